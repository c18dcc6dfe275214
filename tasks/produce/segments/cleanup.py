"""Deleting what segmented runs leave: their temporaries (tasks/produce/segments/keys.py) and the
records uploads of segments whose worker was killed."""

from __future__ import annotations

from dataclasses import dataclass

from s3arch.core.errors import AccessDenied
from s3arch.io.classify import error_for
from s3arch.io.listing import iter_pages
from s3arch.format.manifest import MANIFEST_SUFFIX, ArchiveLayout
from s3arch.io.multipart import abort_uploads, open_uploads
from s3arch.produce.segments.keys import plan_key, segments_prefix
from s3arch.produce.segments.plan import SegmentPlan, read_plan
from s3arch.io.store import Store


@dataclass(frozen=True)
class Cleaned:
    objects: int  # temporaries deleted
    uploads: int  # uploads of temporaries aborted


def delete_temporaries(store: Store, layout: ArchiveLayout, keep: SegmentPlan | None = None) -> Cleaned:
    """Delete the segment temporaries (and plan) of every run of this prefix but ``keep``'s.
    A plan left by a run that is gone also names the records uploads its large segments may
    have left open: those are aborted first. (Older runs' are left to the bucket's lifecycle
    rule: docs/DEPLOY.md.)"""
    from s3arch.io.retention import has_default_retention

    prefix = segments_prefix(layout)
    kept = (f"{prefix}{keep.run}/", plan_key(layout)) if keep else ()
    aborted = deleted = 0
    if has_default_retention(store, layout.bucket):
        try:
            return _delete_temporary_versions(store, layout, prefix, kept)
        except AccessDenied:
            pass  # no s3:ListBucketVersions/DeleteObjectVersion/BypassGovernanceRetention: delete markers
    what = f"delete segment temporaries under s3://{layout.bucket}/{prefix}"
    for page in iter_pages(store, layout.bucket, prefix):
        doomed = [o.key for o in page if not (kept and o.key.startswith(kept))]
        if plan_key(layout) in doomed:
            aborted += abort_records_uploads(store, layout, read_plan(store, layout))
        if doomed:
            store.call("delete_objects", what, Bucket=layout.bucket,
                       Delete={"Objects": [{"Key": k} for k in doomed], "Quiet": True})
        deleted += len(doomed)
    return Cleaned(deleted, aborted)


def _delete_temporary_versions(store: Store, layout: ArchiveLayout, prefix: str, kept: tuple) -> Cleaned:
    """``delete_temporaries`` in a bucket with a default retention: every version and delete
    marker under ``prefix`` but ``kept``'s, by version id, bypassing the GOVERNANCE retention
    they were written with (a plain delete would only add a marker over a locked version)."""
    aborted = deleted = 0
    what = f"delete segment temporaries under s3://{layout.bucket}/{prefix}"
    for page in store.pages("list_object_versions", what, Bucket=layout.bucket, Prefix=prefix):
        doomed = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                  for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
                  if not (kept and v["Key"].startswith(kept))]
        if any(d["Key"] == plan_key(layout) for d in doomed):
            aborted += abort_records_uploads(store, layout, read_plan(store, layout))
        if doomed:
            answer = store.call("delete_objects", what, Bucket=layout.bucket,
                                Delete={"Objects": doomed, "Quiet": True}, BypassGovernanceRetention=True)
            if answer.get("Errors"):
                error = answer["Errors"][0]
                raise error_for(error.get("Code", ""), None, error.get("Message", ""),
                                what=f"delete segment temporary s3://{layout.bucket}/{error.get('Key')}")
        deleted += len({d["Key"] for d in doomed})
    return Cleaned(deleted, aborted)


def abort_records_uploads(store: Store, layout: ArchiveLayout, plan: SegmentPlan | None) -> int:
    """Abort the records uploads ``plan``'s segments left open (a segment whose worker was
    killed); how many. The keys are listed at once (MinIO lists uploads per exact key)."""
    from concurrent.futures import ThreadPoolExecutor

    if plan is None:
        return 0
    keys = [plan.temp_key(layout, k, MANIFEST_SUFFIX) for k in range(plan.count)]
    with ThreadPoolExecutor(min(8, len(keys)), thread_name_prefix="s3arch-records") as pool:
        found = list(pool.map(lambda key: open_uploads(store, layout.bucket, key), keys))
    return abort_uploads(store, layout.bucket, [(key, i) for key, ids in zip(keys, found) for i in ids])
