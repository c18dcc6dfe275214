"""The catalog's view of a job's days: each day's state and figures (``DayState``), the range's
(``CatalogView``, with its totals), and Airflow's last word on each day laid over it
(``apply_runs``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

# Day states, in the order the page's legend shows them.
ARCHIVED = "archived"            # manifest present: complete and verified when it was written
SEGMENTS = "segments"            # archived, produced as segments (the summary says so)
SOURCES_DELETED = "sources_deleted"  # archived, and the source prefix holds nothing any more
MISSING = "missing"              # the source has data, no archive
INCOMPLETE = "incomplete"        # an archive object without its manifest (a run died before committing)
LOST = "lost"                    # a scrub saw it archived; archive, manifest and index are gone now
RUNNING = "running"              # Airflow: a run is at work on it (or its lease is held)
FAILED = "failed"                # Airflow: the last run of it failed
EMPTY = "empty"                  # nothing in the source, nothing archived
PENDING = "pending"              # too recent for the job (min_age_days)
BEFORE_START = "before_start"    # before the job's start_date, nothing there
STATES = (ARCHIVED, SEGMENTS, SOURCES_DELETED, MISSING, INCOMPLETE, LOST, RUNNING, FAILED, EMPTY, PENDING,
          BEFORE_START)
ARCHIVED_STATES = (ARCHIVED, SEGMENTS, SOURCES_DELETED)


@dataclass
class DayState:
    day: str
    prefix: str
    state: str
    source_present: bool = False
    objects: int | None = None
    bytes_in: int | None = None
    bytes_out: int | None = None
    ratio: float | None = None
    storage_class: str | None = None
    archive_url: str | None = None
    manifest_url: str | None = None
    archived_at: str | None = None
    segments: int | None = None
    archive_monthly_usd: float | None = None
    separate_monthly_usd: float | None = None
    locked_until: str | None = None   # the job's retention from when the archive was written
    restored_until: str | None = None  # a restored copy of a GLACIER-class archive (restore_hint)
    scrub: dict | None = None         # the last scrub's verdict on this day
    airflow: dict | None = None       # filled by the Airflow layer: last run, state, link
    inventory: dict | None = None     # not archived, and the job's inventory report holds objects of it
    problem: str | None = None        # a manifest or index that could not be read
    parts: int | None = None          # archive parts, when late objects made more than one (tasks/format/day.py)
    late: str | None = None           # the last scrub found objects newer than the archive: how many
    splits: list[dict] | None = None  # a split job's day: each archive, and each value with objects but none

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class CatalogView:
    job: str
    first: str
    last: str
    as_of: str
    days: list[DayState]
    requests: dict = field(default_factory=dict)  # what this read cost: lists, gets, heads
    seconds: float = 0.0
    # The job's inventory report (if it names one): what it is, and every day it holds objects
    # of that is not archived, in or out of the viewed range; or the problem reading it.
    inventory: dict | None = None

    @property
    def totals(self) -> dict:
        archived = [d for d in self.days if d.state in ARCHIVED_STATES]
        gaps = [d.day for d in self.days if d.state in (MISSING, FAILED, INCOMPLETE, LOST)]
        return {
            "days": len(self.days),
            "archived": len(archived),
            "by_state": {s: n for s in STATES if (n := sum(d.state == s for d in self.days))},
            "objects": sum(d.objects or 0 for d in archived),
            "bytes_in": sum(d.bytes_in or 0 for d in archived),
            "bytes_out": sum(d.bytes_out or 0 for d in archived),
            "archive_monthly_usd": round(sum(d.archive_monthly_usd or 0 for d in archived), 6),
            "separate_monthly_usd": round(sum(d.separate_monthly_usd or 0 for d in archived), 6),
            "monthly_saving_usd": round(sum((d.separate_monthly_usd or 0) - (d.archive_monthly_usd or 0)
                                            for d in archived), 6),
            "oldest": archived[0].day if archived else None,
            "newest": archived[-1].day if archived else None,
            "gaps": gaps,
            "drift": [d.day for d in self.days if d.scrub and d.scrub.get("drift")],
            "late": [d.day for d in self.days if d.late],
        }

    def to_dict(self) -> dict:
        return {"job": self.job, "first": self.first, "last": self.last, "as_of": self.as_of,
                "seconds": round(self.seconds, 3), "requests": self.requests, "totals": self.totals,
                "days": [d.to_dict() for d in self.days], **({"inventory": self.inventory} if self.inventory else {})}


def apply_runs(view: CatalogView, runs: dict[str, dict]) -> CatalogView:
    """Airflow's last word on each day (``{"2026-03-14": {"state": "failed", "run_id": ..., "url": ...}}``):
    a day not archived whose last run failed is "failed", one being worked on "running"; an
    archived day whose last task was the segments' ``assemble`` is "segments". A new view: the
    one given is the catalog's cached one, which the next request's runs must find unchanged."""
    days = []
    for d in view.days:
        run = runs.get(d.day)
        if not run:
            days.append(d)
            continue
        d = replace(d, airflow=run)
        days.append(d)
        if d.state == ARCHIVED and run.get("task_id") == "assemble" and run.get("state") == "success":
            d.state = SEGMENTS  # made by the archive DAG's segment tasks and their assembly
        if d.state in ARCHIVED_STATES:
            continue
        if run.get("state") == "failed":
            d.state = FAILED
        elif run.get("state") in ("running", "queued"):
            d.state = RUNNING
    return replace(view, days=days)
