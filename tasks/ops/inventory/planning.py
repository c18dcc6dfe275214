"""A backfill's plan from S3 Inventory: the days of a range with their sizes from the newest
report, and the days the report cannot know (younger than it), sized by the listing that
archives them. Nothing is listed."""

from __future__ import annotations

from datetime import date, datetime, timedelta

from s3arch.core.config import S3Url
from s3arch.core.errors import BadArgument
from s3arch.io.store import Store
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.inventory.days import InventoryDays, inventory_days
from s3arch.ops.inventory.reports import latest_report


def plan_days(job: ArchiveJob, days: InventoryDays, first: date, last: date) -> list[dict]:
    """The days of [first, last] to archive, oldest first, each with its size from the report:
    a day the report holds objects of, and a day that ended after the report was made (it
    cannot know all of it: sized by the listing that archives it, like any day). A day the
    report covers and holds nothing of is left out."""
    planned = []
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        known = days.days.get(day)
        if known is not None:
            planned.append(known.to_dict())
        elif not days.covers(day):
            planned.append({"day": day.isoformat(), "prefix": job.prefix_for(day), "objects": None, "bytes": None})
    return planned


def plan_from_inventory(job: ArchiveJob, store: Store, *, date_from=None, date_to=None, location: S3Url | None = None,
                        max_age_days: float | None = None, now: datetime | None = None) -> dict:
    """A backfill's plan from the job's inventory (or ``location``): the days of the range
    (default: the oldest day the report knows to the newest the job archives) with their
    objects and bytes, and what the report was and cost to read. Nothing is listed."""
    from s3arch.ops.planning import parse_date, plan

    location = location or job.inventory
    if location is None:
        raise BadArgument(f"job {job.name!r} names no inventory",
                          hint="set the job's inventory key (docs/JOBS.md) or pass --inventory")
    report = latest_report(store, location, job.source.bucket,
                           max_age_days if max_age_days is not None else job.inventory_max_age_days, now)
    days = inventory_days(job, store, report)
    first = parse_date(date_from, "--from") if date_from else min(days.days, default=None)
    last = parse_date(date_to, "--to") if date_to else job.newest_allowed
    planned = []
    if first is not None and first <= last:
        plan(job, date_from=first, date_to=last)  # the range's own checks (age, order)
        planned = plan_days(job, days, first, last)
    return {"job": job.name, "source": "inventory", "inventory": days.summary(), "days": planned,
            "objects": sum(d["objects"] or 0 for d in planned), "bytes": sum(d["bytes"] or 0 for d in planned)}
