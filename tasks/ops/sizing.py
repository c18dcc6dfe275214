"""Which planned prefixes of a job with segment tasks are large: the archive DAG's size task.

A prefix with at least ``segment_min_objects`` objects or ``segment_min_bytes`` bytes becomes
``job.segments`` segment tasks and an assemble task; the others stay with their archive task.
A job that names an S3 Inventory takes the sizes of the days its newest report covers from the
report (one read of its data files, no LIST of the source); a day that ended after the report
was made, or a name the report cannot size (a wildcard's value), is listed up to the threshold
as without one. Either way the archive run LISTs the day it archives.
"""

from __future__ import annotations

import time

from s3arch.core.config import S3Url
from s3arch.ops.jobs import ArchiveJob
from s3arch.produce.segments import PrefixSize, size_prefixes


def split_by_size(job: ArchiveJob, planned: list[list[str]], control) -> dict:
    """The large prefixes, in plan order, what sizing found of each (``source``: inventory or
    listing) and, for a job with an inventory, which report sized them."""
    prefixes = [prefix for batch in planned for prefix in batch]
    from_report, inventory = _sized_by_inventory(job, job.inventory, control, prefixes) if job.inventory else ({}, None)
    unsized = [p for p in prefixes if p not in from_report]
    listed = dict(zip(unsized, size_prefixes(control, job.source.bucket, unsized,
                                             job.segment_min_objects, job.segment_min_bytes)))
    sizes = [from_report.get(p) or listed[p] for p in prefixes]
    split = {"large": [s.prefix for s in sizes if s.large(job.segment_min_objects, job.segment_min_bytes)],
             "sizes": [{"prefix": s.prefix, "objects": s.objects, "bytes": s.bytes, "complete": s.complete,
                        "seconds": round(s.seconds, 3), "requests": s.requests,
                        "source": "inventory" if s.prefix in from_report else "listing"} for s in sizes]}
    return {**split, "inventory": inventory} if inventory else split


def _sized_by_inventory(job: ArchiveJob, location: S3Url, control,
                        prefixes: list[str]) -> tuple[dict[str, PrefixSize], dict]:
    """The sizes the job's newest inventory report under ``location`` gives: each day it covers
    whose name is the job's day prefix (no objects, if the report holds none of it), and which
    report that was. Its data files are read only when it covers one of them; a refused report
    (stale, damaged) fails the sizing, saying why."""
    from s3arch.ops.inventory import inventory_days, latest_report

    report = latest_report(control, location, job.source.bucket, job.inventory_max_age_days)
    covered = {}
    for prefix in prefixes:
        day = job.date_of(prefix)
        if prefix == job.prefix_for(day) and report.covers(day):
            covered[prefix] = day
    if not covered:
        return {}, {"report": report.url, "created": report.created.isoformat(timespec="seconds"), "days": 0}
    started = time.monotonic()
    days = inventory_days(job, control, report)
    seconds = time.monotonic() - started
    sizes = {}
    for prefix, day in covered.items():
        known = days.days.get(day)
        sizes[prefix] = PrefixSize(prefix, known.objects if known else 0, known.bytes if known else 0, True,
                                   seconds / len(covered), 0)
    return sizes, {**days.summary(), "days": len(covered)}

