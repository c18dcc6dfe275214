"""Opt-in deletion of archived sources, after the archive and manifest are committed.

The current listing and the manifest are both in key order, so one merge pass pairs them
without holding either in memory. Only objects whose ETag still equals the archived one are
deleted: an object rewritten since it was archived stays.
"""

from __future__ import annotations

from .config import S3Url
from .errors import IntegrityError
from .listing import iter_pages
from .manifest import ArchiveLayout, iter_manifest
from .s3 import translate


def delete_archived_sources(control, source: S3Url, layout: ArchiveLayout) -> int:
    archived = (r for r in iter_manifest(control, layout) if r["type"] == "object")
    current = (o for page in iter_pages(control, source.bucket, source.key) for o in page)
    batch: list[str] = []
    deleted = 0
    record = next(archived, None)
    for obj in current:
        while record is not None and record["key"] < obj.key:
            record = next(archived, None)
        if record is not None and record["key"] == obj.key and record["etag"] == obj.etag:
            batch.append(obj.key)
            if len(batch) == 1000:
                deleted += _delete(control, source.bucket, batch)
                batch = []
    if batch:
        deleted += _delete(control, source.bucket, batch)
    return deleted


def _delete(control, bucket: str, batch: list[str]) -> int:
    try:
        resp = control.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"delete archived sources in s3://{bucket}") from exc
    errors = resp.get("Errors", [])
    if errors:
        first = errors[0]
        raise IntegrityError(f"{len(errors)} source objects could not be deleted, first "
                             f"{first.get('Key')}: {first.get('Code')} {first.get('Message')}")
    return len(batch)
