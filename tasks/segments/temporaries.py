"""The temporaries of a segmented run: small STANDARD objects under ``STEM.segments/``.

``plan.json`` (the plan in progress) and, per segment ``k`` of run ``RUN``,
``RUN/k.held`` (the bytes kept back for the assembler), ``RUN/k.manifest.jsonl.gz`` (its
records) and ``RUN/k.json`` (its result, written last: a segment is done exactly when it
exists). All are deleted once the prefix is committed or its run abandoned. In a bucket with
a default retention they are written under a one-hour GOVERNANCE retention instead and
deleted version by version with BypassGovernanceRetention (``retention.scratch_lock_args``),
so none is left as a locked noncurrent version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..config import ArchiveSpec
from ..errors import IO_ERRORS, AccessDenied, error_for, translate
from ..listing import iter_pages
from ..manifest import MANIFEST_SUFFIX, ArchiveLayout
from ..upload import abort_uploads, open_uploads
from .plan import SegmentPlan, plan_key, segments_prefix


def put_temporary(control, layout: ArchiveLayout, spec: ArchiveSpec, key: str, body: bytes) -> None:
    from ..retention import scratch_lock_args

    try:
        control.put_object(Bucket=layout.bucket, Key=key, Body=body, StorageClass="STANDARD", **spec.encryption_args,
                           **scratch_lock_args(control, layout.bucket))
    except IO_ERRORS as exc:
        raise translate(exc, f"write segment temporary s3://{layout.bucket}/{key}", "upload") from exc


def get_temporary(control, layout: ArchiveLayout, key: str) -> bytes | None:
    """A temporary's bytes, or None if it does not exist."""
    from ..s3 import read_object

    response = read_object(control, layout.bucket, key, f"read segment temporary s3://{layout.bucket}/{key}",
                           missing_ok=True)
    return None if response is None else response["Body"]


def write_plan(spec: ArchiveSpec, control, layout: ArchiveLayout, plan: SegmentPlan) -> None:
    put_temporary(control, layout, spec, plan_key(layout), json.dumps(plan.to_dict()).encode())


def read_plan(control, layout: ArchiveLayout) -> SegmentPlan | None:
    body = get_temporary(control, layout, plan_key(layout))
    return None if body is None else SegmentPlan.from_dict(json.loads(body))


def segment_done(control, layout: ArchiveLayout, plan: SegmentPlan, k: int) -> dict | None:
    """The result of segment ``k`` if it was produced, else None."""
    body = get_temporary(control, layout, plan.temp_key(layout, k, ".json"))
    return None if body is None else json.loads(body)


@dataclass(frozen=True)
class Cleaned:
    objects: int  # temporaries deleted
    uploads: int  # uploads of temporaries aborted


def delete_temporaries(control, layout: ArchiveLayout, keep: SegmentPlan | None = None) -> Cleaned:
    """Delete the segment temporaries (and plan) of every run of this prefix but ``keep``'s.
    A plan left by a run that is gone also names the records uploads its large segments may
    have left open: those are aborted first. (Older runs' are left to the bucket's lifecycle
    rule: docs/DEPLOY.md.)"""
    from ..retention import has_default_retention

    prefix = segments_prefix(layout)
    kept = (f"{prefix}{keep.run}/", plan_key(layout)) if keep else ()
    aborted = deleted = 0
    if has_default_retention(control, layout.bucket):
        try:
            return _delete_temporary_versions(control, layout, prefix, kept)
        except AccessDenied:
            pass  # no s3:ListBucketVersions/DeleteObjectVersion/BypassGovernanceRetention: delete markers
    try:
        for page in iter_pages(control, layout.bucket, prefix):
            doomed = [o.key for o in page if not (kept and o.key.startswith(kept))]
            if plan_key(layout) in doomed:
                aborted += abort_records_uploads(control, layout, read_plan(control, layout))
            if doomed:
                control.delete_objects(Bucket=layout.bucket, Delete={"Objects": [{"Key": k} for k in doomed],
                                                                     "Quiet": True})
            deleted += len(doomed)
    except IO_ERRORS as exc:
        raise translate(exc, f"delete segment temporaries under s3://{layout.bucket}/{prefix}") from exc
    return Cleaned(deleted, aborted)


def _delete_temporary_versions(control, layout: ArchiveLayout, prefix: str, kept: tuple) -> Cleaned:
    """``delete_temporaries`` in a bucket with a default retention: every version and delete
    marker under ``prefix`` but ``kept``'s, by version id, bypassing the GOVERNANCE retention
    they were written with (a plain delete would only add a marker over a locked version)."""
    aborted = deleted = 0
    try:
        for page in control.get_paginator("list_object_versions").paginate(Bucket=layout.bucket, Prefix=prefix):
            doomed = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                      for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
                      if not (kept and v["Key"].startswith(kept))]
            if any(d["Key"] == plan_key(layout) for d in doomed):
                aborted += abort_records_uploads(control, layout, read_plan(control, layout))
            if doomed:
                answer = control.delete_objects(Bucket=layout.bucket, Delete={"Objects": doomed, "Quiet": True},
                                                BypassGovernanceRetention=True)
                if answer.get("Errors"):
                    error = answer["Errors"][0]
                    raise error_for(error.get("Code", ""), None, error.get("Message", ""),
                                    what=f"delete segment temporary s3://{layout.bucket}/{error.get('Key')}")
            deleted += len({d["Key"] for d in doomed})
    except IO_ERRORS as exc:
        raise translate(exc, f"delete segment temporaries under s3://{layout.bucket}/{prefix}") from exc
    return Cleaned(deleted, aborted)


def abort_records_uploads(control, layout: ArchiveLayout, plan: SegmentPlan | None) -> int:
    """Abort the records uploads ``plan``'s segments left open (a segment whose worker was
    killed); how many. The keys are listed at once (MinIO lists uploads per exact key)."""
    from concurrent.futures import ThreadPoolExecutor

    if plan is None:
        return 0
    keys = [plan.temp_key(layout, k, MANIFEST_SUFFIX) for k in range(plan.count)]
    with ThreadPoolExecutor(min(8, len(keys)), thread_name_prefix="s3arch-records") as pool:
        found = list(pool.map(lambda key: open_uploads(control, layout.bucket, key), keys))
    return abort_uploads(control, layout.bucket, [(key, i) for key, ids in zip(keys, found) for i in ids])
