"""Which planned prefixes of a job with segment tasks are large: the archive DAG's size task;
and ``s3arch plan`` of a job without an inventory, each day listed (``plan_from_listing``).

A prefix with at least ``segment_min_objects`` objects or ``segment_min_bytes`` bytes becomes
``job.segments`` segment tasks and an assemble task; the others stay with their archive task.
A job that names an S3 Inventory takes the sizes of the days its newest report covers from the
report (one read of its data files, no LIST of the source); a day that ended after the report
was made, or a name the report cannot size (a wildcard's value), is listed up to the threshold
as without one. Either way the archive run LISTs the day it archives.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from concurrent.futures import ThreadPoolExecutor
from datetime import date

from s3arch.core.config import S3Url
from s3arch.core.errors import BadArgument
from s3arch.io.sources import expansion_requests, resolved, source_pages
from s3arch.io.store import Store
from s3arch.ops.inventory.days import DaySize
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.planning import days_between, parse_date, plan
from s3arch.produce.segments import PrefixSize, size_prefixes
from s3arch.produce.segments.sizing import SIZING_THREADS, HandOff


def split_by_size(job: ArchiveJob, planned: list[list[str]], store: Store, hand_off: HandOff | None = None) -> dict:
    """The large prefixes, in plan order, what sizing found of each (``source``: inventory or
    listing) and, for a job with an inventory, which report sized them. A large prefix sized by
    listing has its pages ``hand_off``, its hand-off given as ``handoff``."""
    prefixes = [prefix for batch in planned for prefix in batch]
    from_report, inventory = _sized_by_inventory(job, job.inventory, store, prefixes) if job.inventory else ({}, None)
    unsized = [p for p in prefixes if p not in from_report]
    listed = dict(zip(unsized, size_prefixes(store, job.source.bucket, unsized, job.segment_min_objects,
                                             job.segment_min_bytes, hand_off=hand_off)))
    sizes = [from_report.get(p) or listed[p] for p in prefixes]
    split = {"large": [s.prefix for s in sizes if s.large(job.segment_min_objects, job.segment_min_bytes)],
             "sizes": [{"prefix": s.prefix, "objects": s.objects, "bytes": s.bytes, "complete": s.complete,
                        "seconds": round(s.seconds, 3), "requests": s.requests,
                        "source": "inventory" if s.prefix in from_report else "listing",
                        **({"handoff": s.handoff} if s.handoff else {})} for s in sizes]}
    return {**split, "inventory": inventory} if inventory else split


def _sized_by_inventory(job: ArchiveJob, location: S3Url, store: Store,
                        prefixes: list[str]) -> tuple[dict[str, PrefixSize], dict]:
    """The sizes the job's newest inventory report under ``location`` gives: each day it covers
    whose name is the job's day prefix (no objects, if the report holds none of it), and which
    report that was. Its data files are read only when it covers one of them; a refused report
    (stale, damaged) fails the sizing, saying why."""
    from s3arch.ops.inventory.days import inventory_days
    from s3arch.ops.inventory.reports import latest_report

    report = latest_report(store, location, job.source.bucket, job.inventory_max_age_days)
    covered = {}
    for prefix in prefixes:
        day = job.date_of(prefix)
        if prefix == job.prefix_for(day) and report.covers(day):
            covered[prefix] = day
    if not covered:
        return {}, {"report": report.url, "created": report.created.isoformat(timespec="seconds"), "days": 0}
    started = time.monotonic()
    days = inventory_days(job, store, report)
    seconds = time.monotonic() - started
    sizes = {}
    for prefix, day in covered.items():
        known = days.days.get(day)
        sizes[prefix] = PrefixSize(prefix, known.objects if known else 0, known.bytes if known else 0, True,
                                   seconds / len(covered), 0)
    return sizes, {**days.summary(), "days": len(covered)}


def plan_from_listing(job: ArchiveJob, store: Store, *, date_from=None, date_to=None) -> dict:
    """``plan_from_inventory``'s plan for a job without an inventory: each day of the range
    (default: the job's start_date to the newest it archives) listed whole, ``SIZING_THREADS``
    days at once, counted page by page (memory stays flat); a day with no objects is left out,
    as a report leaves it out. What it cost: the LIST requests (a pattern's expansions
    included) and the seconds."""
    first = parse_date(date_from, "--from") if date_from else job.start_date
    last = parse_date(date_to, "--to") if date_to else job.newest_allowed
    days: list[date] = []
    if first <= last:
        plan(job, date_from=first, date_to=last)  # the range's own checks (age, order)
        days = days_between(first, last)
    started = time.monotonic()
    expansions = expansion_requests(store)
    with ThreadPoolExecutor(min(SIZING_THREADS, max(1, len(days))), thread_name_prefix="s3arch-plan") as pool:
        listed = list(pool.map(lambda day: _listed_day(job, store, day), days))
    requests = sum(n for _, n in listed) + expansion_requests(store) - expansions
    planned = [size.to_dict() for size, _ in listed if size.objects]
    return {"job": job.name, "source": "listing",
            "listing": {"bucket": job.source.bucket, "days": len(days), "empty": len(days) - len(planned),
                        "requests": requests, "seconds": round(time.monotonic() - started, 3)},
            "days": planned, "objects": sum(d["objects"] for d in planned), "bytes": sum(d["bytes"] for d in planned)}


def _listed_day(job: ArchiveJob, store: Store, day: date) -> tuple[DaySize, int]:
    """The day's objects and bytes, and the LISTs of its prefixes (one per page, one for a
    prefix that holds nothing); a pattern that matches no prefix holds nothing."""
    name = job.prefix_for(day)
    try:
        source = resolved(store, S3Url(job.source.bucket, name), job.max_prefixes)
    except BadArgument as exc:
        if "matches no prefix" not in exc.message:
            raise  # more prefixes than max_prefixes: its archive run would refuse the day too
        return DaySize(day, name, 0, 0), 0  # its expansion's LISTs are counted by the caller
    prefixes = source.prefixes
    objects = size = pages = 0
    holding: set[int] = set()  # which prefixes had a page
    for page in source_pages(store, source):
        pages += 1
        objects += len(page)
        size += sum(o.size for o in page)
        holding.add(bisect_right(prefixes, page[0].key) - 1)
    return DaySize(day, name, objects, size), pages + len(prefixes) - len(holding)
