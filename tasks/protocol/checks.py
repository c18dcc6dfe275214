"""The commit protocol's checks of what it commits: that a committed archive is still the object
its manifest describes (``check_archive_intact``), and what a run cost (``cost_of``)."""

from __future__ import annotations

from s3arch.core.config import ArchiveSpec
from s3arch.core.errors import ArchiveDamaged
from s3arch.format.manifest import ArchiveLayout, Committed
from s3arch.io.retention import retention_of
from s3arch.io.store import Store


def check_archive_intact(store: Store, layout: ArchiveLayout, committed: Committed) -> dict:
    """One HEAD: the archive a manifest commits must still be the object it describes.
    Returns its Object Lock state (empty if it has none)."""
    key, summary = committed.archive_key, committed.summary
    url = f"s3://{layout.bucket}/{key}"
    fix = (f"if the source still holds the prefix, `s3arch archive ... --overwrite` rebuilds it; "
           f"otherwise recover {url} from a bucket version or replica. `s3arch verify {url}` "
           "shows the details")
    head = store.maybe("head_object", f"check the archive {url}", Bucket=layout.bucket, Key=key, ChecksumMode="ENABLED")
    if head is None:
        raise ArchiveDamaged(f"{layout.manifest_url} commits {url}, but that object is missing", hint=fix)
    found = {"size": head["ContentLength"], "etag": head["ETag"], "crc32c": head.get("ChecksumCRC32C")}
    expected = {"size": summary["archive_size"], "etag": summary.get("archive_etag"),
                "crc32c": summary.get("archive_crc32c") or None}
    differs = [k for k in found if expected[k] is not None and found[k] is not None and found[k] != expected[k]]
    if differs:
        raise ArchiveDamaged(
            f"{url} is not the archive {layout.manifest_url} commits: "
            + ", ".join(f"{k} {found[k]} (manifest: {expected[k]})" for k in differs), hint=fix)
    return retention_of(head)


def cost_of(spec: ArchiveSpec, objects: int, bytes_in: int, short_of_minimum: int, archive_bytes: int,
            source_bytes_by_class: dict[str, int] | None = None) -> dict:
    """``source_bytes_by_class``: bytes read from sources in classes other than STANDARD (the
    listing's), for their retrieval fees."""
    from s3arch.core.cost import estimate, prices_with

    return estimate(spec.storage_class, objects=objects, bytes_in=bytes_in, short_of_minimum=short_of_minimum,
                    archive_bytes=archive_bytes, prices=prices_with(spec.prices),
                    source_bytes_by_class=source_bytes_by_class).to_dict()
