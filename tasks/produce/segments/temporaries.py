"""One segment temporary written and read (tasks/produce/segments/keys.py says which there are).

In a bucket with a default retention they are written under a one-hour GOVERNANCE retention
instead and deleted version by version with BypassGovernanceRetention
(``retention.scratch_lock_args``, tasks/produce/segments/cleanup.py), so none is left as a locked
noncurrent version.
"""

from __future__ import annotations

from s3arch.core.config import WriteOptions
from s3arch.core.errors import IO_ERRORS, translate
from s3arch.format.manifest import ArchiveLayout
from s3arch.io.retention import scratch_lock_args
from s3arch.io.reads import read_object


def put_temporary(control, layout: ArchiveLayout, options: WriteOptions, key: str, body: bytes) -> None:
    """Write a temporary: STANDARD whatever the archive's class, encrypted like the archive."""
    try:
        control.put_object(Bucket=layout.bucket, Key=key, Body=body, StorageClass="STANDARD", **options.encryption_args,
                           **scratch_lock_args(control, layout.bucket))
    except IO_ERRORS as exc:
        raise translate(exc, f"write segment temporary s3://{layout.bucket}/{key}", "upload") from exc


def get_temporary(control, layout: ArchiveLayout, key: str) -> bytes | None:
    """A temporary's bytes, or None if it does not exist."""
    response = read_object(control, layout.bucket, key, f"read segment temporary s3://{layout.bucket}/{key}",
                           missing_ok=True)
    return None if response is None else response["Body"]
