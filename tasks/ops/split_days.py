"""Days of a split job (``split_by``: one archive per value of a wildcard, an account's day say)
as the catalog and the scrub see them: which of the day's values hold objects but no archive,
and the day's state made of its archives' (docs/CATALOG.md).

A day is archived only when every value of the split wildcard that holds objects that day has
its archive: the values are the split wildcard's delimiter listing (one LIST per level, shared
by every day), and only a value with no archive is probed for objects, so a fully archived day
costs nothing more. A day that is a folder is probed by its parent's delimiter listing (one LIST
per month and prefix, shared by the month's days); a date inside key names by a LIST of one key
per prefix until one answers.
"""

from __future__ import annotations

from datetime import date

from s3arch.core.errors import BadArgument
from s3arch.io.sources import child_prefixes, expand, holds_objects, is_pattern
from s3arch.io.store import Store
from s3arch.ops.archive_job import ArchiveJob

# The figures of an archive that a split day lists per archive (the rest is the day's).
SPLIT_FIELDS = ("prefix", "state", "objects", "bytes_in", "bytes_out", "archive_url", "manifest_url",
                "archived_at", "parts", "late", "problem")


def unarchived_splits(job: ArchiveJob, store: Store, day: date, archived: list[str], counter) -> list[str]:
    """The day's split names that hold objects and have no archive (``archived``: those that
    have one); ``counter`` counts the LISTs it took to tell, the split wildcard's levels aside."""
    try:
        names = job.split(store, [job.prefix_for(day)])
    except BadArgument:
        return []  # the wildcards match nothing any more: no value left to archive
    return [name for name in names if name not in archived and _holds_objects(job, store, name, counter)]


def _holds_objects(job: ArchiveJob, store: Store, name: str, counter) -> bool:
    bucket = job.source.bucket
    if not name.endswith("/"):  # the date inside key names: no day folder to look for
        holds, probes = holds_objects(store, bucket, name, job.max_prefixes)
        counter.add("LIST", probes)
        return holds
    try:
        prefixes = expand(store, bucket, name, job.max_prefixes) if is_pattern(name) else [name]
    except BadArgument:
        return False  # matches no prefix
    # A folder exists while a key is under it: its parent's listing shows it.
    return any(p in child_prefixes(store, bucket, p[:p.rstrip("/").rfind("/") + 1]) for p in prefixes)


def for_split(verdict: dict | None, name: str) -> dict | None:
    """The scrub's verdict on a day narrowed to the rows of one split archive (rows name their
    archive's source; a verdict from before splits were told apart applies to each)."""
    if not verdict or not verdict.get("drift"):
        return verdict
    rows = [row for row in verdict["drift"] if row.get("prefix") in (None, name)]
    return {**verdict, "drift": rows} if rows else {k: v for k, v in verdict.items() if k != "drift"}


def split_summary(state) -> dict:
    """One archive's entry in its day's ``splits``."""
    return {k: v for k, v in state.to_dict().items() if k in SPLIT_FIELDS}
