"""What an ``--overwrite`` of a committed day may replace (checked under the lease, before any
source is read): the day rebuilt as one part, never an archive still under Object Lock, never
with fewer objects than the day holds."""

from __future__ import annotations

from dataclasses import dataclass

from s3arch.core.config import S3Url
from s3arch.core.errors import DestinationConflict
from s3arch.format.day import Part
from s3arch.format.manifest import ArchiveLayout, Committed
from s3arch.io.retention import refuse_locked_overwrite
from s3arch.io.sources import source_pages
from s3arch.io.store import Store
from s3arch.stored.days import committed_parts, day_objects


@dataclass(frozen=True)
class Replaced:
    """The committed day an overwrite replaces."""

    later_parts: list[Part]  # dropped before the new manifest
    objects: int  # each key once


def check_overwrite(store: Store, layout: ArchiveLayout, source: S3Url, committed: Committed) -> Replaced:
    """The day the overwrite replaces; refused if an archive or manifest of it is locked, or if
    the source now holds fewer objects than the day (overwriting would lose archived data)."""
    parts = committed_parts(store, layout, source, first=committed)
    refuse_locked_overwrite(store, layout.bucket, [key for p in parts
                                                   for key in (p.committed.archive_key, p.layout.manifest_key)])
    replaced = Replaced(parts[1:], day_objects(store, parts))
    refuse_fewer_objects(layout, replaced.objects, sum(len(page) for page in source_pages(store, source)))
    return replaced


def refuse_fewer_objects(layout: ArchiveLayout, archived: int, now: int) -> None:
    """An overwrite must not replace a day with fewer objects than it holds."""
    if now < archived:
        raise DestinationConflict(
            f"{layout.manifest_url} holds {archived:,} objects, the source now only {now:,}: "
            "overwriting would lose archived data",
            hint="restore the archive first, or delete the old archive and manifest by hand")
