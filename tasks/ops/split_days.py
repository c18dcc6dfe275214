"""Days of a split job (``split_by``: one archive per value of a wildcard, an account's day say)
as the catalog and the scrub see them: which of the day's values hold objects but no archive,
and the day's state made of its archives' (docs/CATALOG.md).

A day is archived only when every value of the split wildcard that holds objects that day has
its archive: the values are the split wildcard's delimiter listing (one LIST per level, shared
by every day), and only a value with no archive is probed for objects (a LIST of one key per
prefix until one answers), so a fully archived day costs nothing more.
"""

from __future__ import annotations

from datetime import date

from s3arch.core.errors import BadArgument
from s3arch.io.sources import holds_objects
from s3arch.ops.jobs import ArchiveJob

# The figures of an archive that a split day lists per archive (the rest is the day's).
SPLIT_FIELDS = ("prefix", "state", "objects", "bytes_in", "bytes_out", "archive_url", "manifest_url",
                "archived_at", "parts", "late", "problem")


def unarchived_splits(job: ArchiveJob, control, day: date, archived: list[str], counter) -> list[str]:
    """The day's split names that hold objects and have no archive (``archived``: those that
    have one); ``counter`` counts the LISTs it took to tell, the split wildcard's levels aside."""
    try:
        names = job.split(control, [job.prefix_for(day)])
    except BadArgument:
        return []  # the wildcards match nothing any more: no value left to archive
    missing = []
    for name in names:
        if name in archived:
            continue
        holds, probes = holds_objects(control, job.source.bucket, name, job.max_prefixes)
        counter.add("LIST", probes)
        if holds:
            missing.append(name)
    return missing


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
