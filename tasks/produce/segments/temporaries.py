"""One segment temporary written and read (tasks/produce/segments/keys.py says which there are).

In a bucket with a default retention they are written under a one-hour GOVERNANCE retention
instead and deleted version by version with BypassGovernanceRetention
(``retention.scratch_lock_args``, tasks/produce/segments/cleanup.py), so none is left as a locked
noncurrent version.
"""

from __future__ import annotations

from s3arch.core.config import WriteOptions
from s3arch.format.manifest import ArchiveLayout
from s3arch.io.retention import scratch_lock_args
from s3arch.io.store import Store


def put_temporary(store: Store, layout: ArchiveLayout, options: WriteOptions, key: str, body: bytes) -> None:
    """Write a temporary: STANDARD whatever the archive's class, encrypted like the archive."""
    store.call("put_object", f"write segment temporary s3://{layout.bucket}/{key}", "upload", Bucket=layout.bucket,
               Key=key, Body=body, StorageClass="STANDARD", **options.encryption_args,
               **scratch_lock_args(store, layout.bucket))


def get_temporary(store: Store, layout: ArchiveLayout, key: str) -> bytes | None:
    """A temporary's bytes, or None if it does not exist."""
    response = store.read(layout.bucket, key, f"read segment temporary s3://{layout.bucket}/{key}", missing_ok=True)
    return None if response is None else response["Body"]
