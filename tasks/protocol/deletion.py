"""Opt-in deletion of archived sources, only after the archive and manifest are committed.

Resumable: every pass lists the source again and pairs it with the manifest (both in key
order, so one merge pass pairs them without holding either in memory). An object is deleted
only if its current ETag equals the archived one, so a pass that was killed, denied or timed
out is finished by the next one, and a finished deletion re-run deletes nothing.

Conditional, so an object rewritten after it was listed here survives:
- where the endpoint honours the ETag in DeleteObjects (S3 does), each key is sent with its
  archived ETag and S3 itself refuses to delete a changed object;
- where it ignores it (MinIO does, measured here), each batch is re-checked with
  ``HeadObject If-Match`` immediately before the DeleteObjects that carries it. The window
  left is between that HEAD and the delete (docs/RELIABILITY.md).
Which of the two applies is found out once per pass with a scratch object in the destination.

Versioned buckets: a plain delete only adds a delete marker; the archived version stays and
is still billed. ``versions=True`` deletes the archived versions themselves (each version
whose ETag equals the archived one), which frees the space and is safe against rewrites by
construction: a newer version is another version id and is never named.

Object Lock: an object whose record says it was under retention or legal hold when it was
archived is never sent for deletion (not even a delete marker), and one S3 refuses to delete
because of a lock is not counted as deleted: both are kept, and the result says why.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from itertools import groupby
from dataclasses import dataclass, field
from typing import Callable, Iterator

from s3arch.io.attributes import lock_reason
from s3arch.core.config import S3Url
from s3arch.core.errors import ArchiverError, SourceDeletionFailed
from s3arch.io.classify import error_for
from s3arch.format.day import Part
from s3arch.stored.days import day_records
from s3arch.format.manifest import ArchiveLayout
from s3arch.stored.manifests import iter_manifest
from s3arch.io.store import Store

BATCH = 1000
# Where each key is re-checked by HEAD, smaller batches shrink the window between a key's
# HEAD and its delete to the time of 100 HEADs (16 at a time), at the cost of more deletes.
RECHECK_BATCH = 100
_WRONG_ETAG = '"00000000000000000000000000000000"'
_LOCKED_SHOWN = 10


@dataclass
class DeletionResult:
    deleted: int = 0        # objects deleted (versions deleted, with versions=True)
    kept_changed: int = 0   # archived keys whose current content differs: kept
    versioned: bool = False  # the source bucket keeps versions
    method: str = ""        # "etag" (conditional DeleteObjects), "recheck" (HEAD If-Match), "versions"
    kept_locked: int = 0    # archived objects under Object Lock retention or legal hold: kept
    locked: list = field(default_factory=list)  # the first few of them, "key: reason"

    def keep_locked(self, key: str, reason: str) -> None:
        self.kept_locked += 1
        if len(self.locked) < _LOCKED_SHOWN:
            self.locked.append(f"{key}: {reason}")

    @property
    def notes(self) -> list[str]:
        notes = []
        if self.versioned and self.method != "versions":
            notes.append("the source bucket is versioned: deletion added delete markers and freed no "
                         "space; --delete-versions deletes the archived versions")
        if self.kept_locked:
            notes.append(f"kept {self.kept_locked:,} archived objects under Object Lock (they cannot be deleted "
                         f"before their retention ends or their legal hold is lifted): " + "; ".join(self.locked)
                         + (" ..." if self.kept_locked > len(self.locked) else ""))
        return notes


def delete_archived_sources(store: Store, source: S3Url, layout: ArchiveLayout, *, versions: bool = False,
                            stop: Callable[[], None] = lambda: None, parts: list[Part] | None = None) -> DeletionResult:
    """``stop`` is called before each batch is sent and raises to end the deletion there (a
    run whose lease was lost must delete nothing more); what it raises is the cause of the
    ``SourceDeletionFailed``. ``parts``: the day's committed parts (tasks/format/day.py), whose
    records, each key's latest, are what may be deleted; by default ``layout``'s manifest."""
    archived = (lambda: day_records(store, parts)) if parts else (lambda: _archived(store, layout))
    # Each version a part holds may go: an object rewritten after it was archived has one in each.
    every = (lambda: day_records(store, parts, every=True)) if parts else archived
    result = DeletionResult(versioned=_is_versioned(store, source.bucket))
    try:
        if versions and result.versioned:
            result.method = "versions"
            _delete_versions(store, source, every(), result, stop)
        else:
            result.method = "etag" if endpoint_honours_etag(store, layout) else "recheck"
            _delete_current(store, source, archived(), result, stop)
    except ArchiverError as exc:
        raise SourceDeletionFailed(
            f"deleted {result.deleted:,} archived source objects under {source}, then stopped",
            cause=exc, hint="the archive is committed and verified; re-run with --delete-source "
                            f"or `s3arch delete-sources s3://{layout.bucket}/{layout.manifest_key}` "
                            "to finish the deletion") from exc
    return result


def _archived(store: Store, layout: ArchiveLayout) -> Iterator[dict]:
    return (r for r in iter_manifest(store, layout) if r["type"] == "object")


def _delete_current(store: Store, source: S3Url, archived: Iterator[dict], result: DeletionResult,
                    stop: Callable[[], None]) -> None:
    from s3arch.io.sources import source_pages

    record = next(archived, None)
    batch: list[tuple[str, str]] = []
    limit = RECHECK_BATCH if result.method == "recheck" else BATCH
    for page in source_pages(store, source):
        for obj in page:
            while record is not None and record["key"] < obj.key:
                record = next(archived, None)
            if record is not None and record["key"] == obj.key:
                reason = lock_reason(record)
                if reason is not None:
                    result.keep_locked(obj.key, reason)
                elif record["etag"] == obj.etag:
                    batch.append((obj.key, obj.etag))
                else:
                    result.kept_changed += 1
            if len(batch) == limit:
                stop()
                _delete_batch(store, source.bucket, batch, result)
                batch = []
    if batch:
        stop()
        _delete_batch(store, source.bucket, batch, result)


def _delete_batch(store: Store, bucket: str, batch: list[tuple[str, str]], result: DeletionResult) -> None:
    if result.method == "recheck":
        unchanged = _still_unchanged(store, bucket, batch)
        result.kept_changed += len(batch) - len(unchanged)
        batch = unchanged
    if batch:
        _send(store, bucket, [{"Key": k, "ETag": etag} for k, etag in batch], result)


def _still_unchanged(store: Store, bucket: str, batch: list[tuple[str, str]]) -> list[tuple[str, str]]:
    def unchanged(item: tuple[str, str]) -> bool:
        key, etag = item
        # None: gone, or rewritten since it was archived: keep (or nothing to do)
        return store.maybe("head_object", f"re-check s3://{bucket}/{key} before deleting it", "source",
                           absent=(404, 412), Bucket=bucket, Key=key, IfMatch=etag) is not None

    with ThreadPoolExecutor(16, thread_name_prefix="s3arch-recheck") as pool:
        keep = list(pool.map(unchanged, batch))
    return [item for item, ok in zip(batch, keep) if ok]


def _send(store: Store, bucket: str, objects: list[dict], result: DeletionResult) -> None:
    response = store.call("delete_objects", f"delete archived sources in s3://{bucket}", "bucket",
                          Bucket=bucket, Delete={"Objects": objects, "Quiet": True})
    failed = 0
    first: ArchiverError | None = None
    for error in response.get("Errors", []):
        if error.get("Code") in ("PreconditionFailed", "ConditionalRequestConflict"):
            result.kept_changed += 1  # S3 refused: rewritten since it was archived
        elif error.get("Code") == "NoSuchKey":
            pass  # already gone
        elif _refused_by_lock(error):
            # Locked after it was archived (or the lock was not readable then): S3 keeps it.
            result.keep_locked(error.get("Key", ""), error.get("Message", "under Object Lock"))
        else:
            failed += 1
            first = first or error_for(error.get("Code", ""), None, error.get("Message", ""),
                                       what=f"delete s3://{bucket}/{error.get('Key')}", subject="source")
    result.deleted += len(objects) - len(response.get("Errors", []))
    if first is not None:
        first.add_note(f"{failed} of {len(objects)} objects in that batch were not deleted")
        raise first


def _refused_by_lock(error: dict) -> bool:
    """S3 answers AccessDenied "... protected by object lock", MinIO InvalidRequest "Object is
    WORM protected"."""
    message = error.get("Message", "").lower()
    return error.get("Code") in ("AccessDenied", "InvalidRequest") and \
        any(word in message for word in ("lock", "worm", "retention"))


def _delete_versions(store: Store, source: S3Url, records: Iterator[dict], result: DeletionResult,
                     stop: Callable[[], None]) -> None:
    archived = ((key, {r["etag"]: r for r in group}) for key, group in groupby(records, key=lambda r: r["key"]))
    record = next(archived, None)
    batch: list[dict] = []
    pages = (page for prefix in source.prefixes  # a pattern's prefixes, in key order
             for page in store.pages("list_object_versions", f"list versions under {source}",
                                     Bucket=source.bucket, Prefix=prefix))
    for page in pages:
        for version in page.get("Versions", []):
            while record is not None and record[0] < version["Key"]:
                record = next(archived, None)
            if record is not None and record[0] == version["Key"] and version["ETag"] in record[1]:
                reason = lock_reason(record[1][version["ETag"]])
                if reason is not None:
                    result.keep_locked(version["Key"], reason)
                else:
                    batch.append({"Key": version["Key"], "VersionId": version["VersionId"]})
            if len(batch) == BATCH:
                stop()
                _send(store, source.bucket, batch, result)
                batch = []
    if batch:
        stop()
        _send(store, source.bucket, batch, result)


def _is_versioned(store: Store, bucket: str) -> bool:
    # None on 403: may not ask; deletion still works, the note cannot be given
    answer = store.maybe("get_bucket_versioning", f"read the versioning state of s3://{bucket}", "bucket",
                         absent=(403,), Bucket=bucket)
    return answer is not None and answer.get("Status") in ("Enabled", "Suspended")


def endpoint_honours_etag(store: Store, layout: ArchiveLayout) -> bool:
    """Delete a scratch object with a wrong ETag: if it survives, the endpoint checks ETags.
    In a versioned bucket the probe's version (and a delete marker) is deleted by its id, so
    nothing is left, not even under a default retention (``retention.scratch_lock_args``)."""
    from s3arch.io.retention import delete_scratch_version, scratch_lock_args

    bucket, key = layout.bucket, layout.probe_key
    what = f"probe conditional deletes with s3://{bucket}/{key}"
    version = store.call("put_object", what, "bucket", Bucket=bucket, Key=key,
                         Body=b"probe: does this endpoint honour ETags in DeleteObjects?",
                         **scratch_lock_args(store, bucket)).get("VersionId")
    answer = store.call("delete_objects", what, "bucket", Bucket=bucket,
                        Delete={"Objects": [{"Key": key, "ETag": _WRONG_ETAG}], "Quiet": False})
    survived = store.maybe("head_object", what, "bucket", Bucket=bucket, Key=key) is not None
    if version not in (None, "null"):
        try:  # best effort: without s3:DeleteObjectVersion they stay, locked an hour at most
            for marker in [d.get("DeleteMarkerVersionId") for d in answer.get("Deleted", [])]:
                if marker:
                    store.call("delete_object", what, "bucket", Bucket=bucket, Key=key, VersionId=marker)
            delete_scratch_version(store, bucket, key, version)
        except ArchiverError as error:
            if error.status != 403:
                raise
            if survived:
                store.call("delete_object", what, "bucket", Bucket=bucket, Key=key)
    elif survived:
        store.call("delete_object", what, "bucket", Bucket=bucket, Key=key)
    return survived
