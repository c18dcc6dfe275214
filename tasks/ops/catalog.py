"""The archive catalog: what state each day of a job is in, read cheaply (docs/CATALOG.md).

For a job and a date range it makes:

- **one listing of the job's archive prefix** (archives, manifests, indexes, leases of every
  day at once; a few pages for three years of days),
- **one small GET per committed day** (its manifest index, which carries the manifest's header
  and summary), remembered by the manifest's ETag, so a refresh GETs only what changed,
- **the source's day prefixes by delimiter listing** (one listing per parent of a day prefix:
  ``logs/2026/11/`` for ``logs/{date:%Y/%m/%d}/``, one for ``events/`` for
  ``events/dt={date:%Y-%m-%d}/``),
- **one GET of the last scrub's result** (tasks/ops/scrub/),

and never a HEAD per day. Airflow's view of a day (a failed or running run) is not S3's to tell:
the Airflow layer fills ``DayState.airflow`` and may override ``state`` with "failed" or
"running" (``apply_runs``).
"""

from __future__ import annotations

import json
import string
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import date, datetime, timedelta, timezone
from typing import TYPE_CHECKING

from s3arch.core.config import S3Url
from s3arch.core.cost import estimate, prices_with
from s3arch.core.errors import IO_ERRORS, ArchiverError, translate
from s3arch.io.sources import expansion_requests, holds_objects
from s3arch.ops.jobs import ArchiveJob, days_between
from s3arch.io.listed import ListedObject, listed_objects
from s3arch.format.day import listed_parts
from s3arch.format.manifest import ARCHIVE_SUFFIXES, layout_for, parse_index, read_through
from s3arch.io.reads import read_object
from s3arch.ops.split_days import for_split, split_summary, unarchived_splits
if TYPE_CHECKING:
    from s3arch.ops.inventory import InventoryDays
from s3arch.core.timestamps import parse_s3_time

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

SCRUB_DIR = "_s3arch-scrub/"  # under the job's archive prefix: <job>/latest.json and one object per scrub


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


def archive_prefix(job: ArchiveJob) -> str:
    """The destination prefix every archive of the job is under: the stem of its day prefixes
    up to the first date field or wildcard of the template (``archive/app-logs/logs/``)."""
    literal = next(iter(string.Formatter().parse(job.prefix_template)))[0].split("*")[0]
    dest = job.destination.key
    if dest and not dest.endswith("/"):
        dest += "/"
    return f"{dest}{job.source.bucket}/{job.source.key}{literal}"


def scrub_result_key(job: ArchiveJob) -> str:
    return f"{archive_prefix(job)}{SCRUB_DIR}{job.name}/latest.json"


def day_parents(job: ArchiveJob, days: list[date]) -> list[str]:
    """The prefixes to list with Delimiter='/' to see the days' prefixes: each day prefix's
    parent (its path up to its last '/' but one)."""
    parents = []
    for day in days:
        prefix = job.prefix_for(day)
        cut = prefix.rstrip("/").rfind("/")
        parents.append(prefix[:cut + 1] if cut >= 0 else "")
    return list(dict.fromkeys(parents))


class RequestCounter:
    def __init__(self):
        self._lock = threading.Lock()
        self.counts = {"LIST": 0, "GET": 0, "HEAD": 0}

    def add(self, kind: str, n: int = 1) -> None:
        with self._lock:
            self.counts[kind] += n


def was_committed(verdict: dict | None) -> bool:
    """Whether a scrub's verdict on a day (latest.json) saw a committed archive there: verified,
    or drift of a committed day (anything but an archive no manifest committed)."""
    if not verdict:
        return False
    return bool(verdict.get("verified") or verdict.get("last_verified")
                or any(d.get("kind") != "archive without manifest" for d in verdict.get("drift") or ()))


class Catalog:
    """A job's days, cached: ``view`` answers from memory while its last read is younger than
    ``max_age`` seconds; a refresh lists again and GETs only the indexes whose manifest changed."""

    def __init__(self, job: ArchiveJob, control, *, max_age: float = 300.0, workers: int = 16):
        self.job = job
        self.control = control
        self.max_age = max_age
        self.workers = workers
        self.prices = prices_with(job.prices)
        self._summaries: dict[str, tuple[str, tuple[dict, dict] | None, str | None]] = {}  # manifest key -> (etag, (header, summary), problem)
        self._cached: dict[tuple[str, str, frozenset[date]], tuple[float, CatalogView]] = {}
        self._lock = threading.Lock()
        self._inventory: InventoryDays | None = None  # the last report's days: read again for a newer report

    def view(self, first: date, last: date, *, refresh: bool = False, today: date | None = None,
             restore_hint: set[date] | None = None) -> CatalogView:
        # The days restored lately are part of the key: a restore that ends or a new one reads
        # again, and the same set (a GLACIER job with any restore in 30 days) is served cached.
        cache_key = (first.isoformat(), last.isoformat(), frozenset(restore_hint or ()))
        with self._lock:
            cached = self._cached.get(cache_key)
            if cached and not refresh and time.monotonic() - cached[0] < self.max_age:
                return cached[1]
            view = self._read(first, last, today or date.today(), restore_hint or set())
            self._cached[cache_key] = (time.monotonic(), view)
            return view

    # -- reading ---------------------------------------------------------------------------

    def _read(self, first: date, last: date, today: date, restore_hint: set[date]) -> CatalogView:
        started = time.monotonic()
        counter = RequestCounter()
        job = self.job
        days = days_between(first, last)
        bucket = job.destination.bucket
        with ThreadPoolExecutor(self.workers, thread_name_prefix="s3arch-catalog") as pool:
            expansions = expansion_requests(self.control)
            sources = ([pool.submit(self._list_days, parent, counter) for parent in day_parents(job, days)]
                       if job.days_are_folders else  # wildcards, or a date inside key names: no day folders
                       [pool.submit(self._day_present, job.prefix_for(day), counter) for day in days])
            scrub = pool.submit(self._scrub_results, counter)
            listed = self._list_archives(counter)
            # A day's archives: its one, or a split job's one per value archived (split_days.py).
            names = {day: job.parts_archived(day, listed) for day in days}
            layouts = {(day, name): layout_for(S3Url(job.source.bucket, name), job.destination)
                       for day in days for name in names[day]}
            parts = {key: listed_parts(layout, listed) for key, layout in layouts.items()}
            unarchived = {day: pool.submit(unarchived_splits, job, self.control, day, names[day], counter) for day in days
                          if job.split_by and layouts[(day, names[day][0])].manifest_key in listed}
            # Manifest summaries: one GET of the index per committed day (and late part), only
            # for manifests not seen before with this ETag.
            wanted = {}
            for layout in (one for key, layout in layouts.items() for one in (layout, *parts[key])):
                manifest = listed.get(layout.manifest_key)
                if manifest is None:
                    continue
                known = self._summaries.get(layout.manifest_key)
                if known is None or known[0] != manifest.etag:
                    wanted[layout] = pool.submit(self._read_summary, layout, layout.index_key in listed, counter)
            for layout, future in wanted.items():
                found, problem = future.result()
                self._summaries[layout.manifest_key] = (listed[layout.manifest_key].etag, found, problem)
            restored = {day: pool.submit(self._restored_until, layouts[(day, names[day][0])], listed, counter)
                        for day in restore_hint if day in names}
            present: set[str] = set()
            for future in sources:
                present |= future.result()
            missing = {day: f.result() for day, f in unarchived.items()}
            counter.add("LIST", expansion_requests(self.control) - expansions)  # a pattern's levels
            scrub_days = scrub.result()
            restored_until = {day: f.result() for day, f in restored.items()}
        out = [self._split_day(day, [(n, layouts[(day, n)], parts[(day, n)]) for n in names[day]], missing[day],
                               listed, present, scrub_days.get(day.isoformat()), today) if day in missing else
               self._day(day, layouts[(day, names[day][0])], listed, present, scrub_days.get(day.isoformat()),
                         restored_until.get(day), today, parts[(day, names[day][0])]) for day in days]
        inventory = self._inventory_days(listed, out, counter)
        return CatalogView(job.name, first.isoformat(), last.isoformat(),
                           datetime.now(timezone.utc).isoformat(timespec="seconds"), out,
                           requests=dict(counter.counts), seconds=time.monotonic() - started, inventory=inventory)

    def _inventory_days(self, listed: dict, out: list[DayState], counter: RequestCounter) -> dict | None:
        """The job's inventory: the days its newest report holds objects of that have no
        manifest (each marked on its DayState too), or the problem that kept it unread."""
        job = self.job
        if job.inventory is None:
            return None
        from s3arch.ops.inventory import inventory_days, latest_report

        try:
            counter.add("LIST")
            counter.add("GET", 2)  # the newest manifest.json and its manifest.checksum
            report = latest_report(self.control, job.inventory, job.source.bucket, job.inventory_max_age_days)
            known = self._inventory
            if known is None or known.report.url != report.url:
                counter.add("GET", len(report.files))
                known = self._inventory = inventory_days(job, self.control, report)
        except ArchiverError as exc:
            return {"problem": str(exc)}
        unarchived = {size.day: size for size in known.days.values()
                      if layout_for(S3Url(job.source.bucket, size.prefix), job.destination).manifest_key not in listed}
        for d in out:
            size = unarchived.get(date.fromisoformat(d.day))
            if size is not None:
                d.inventory = {"objects": size.objects, "bytes": size.bytes}
        return {**known.summary(), "unarchived": [s.to_dict() for s in unarchived.values()]}

    def _list_archives(self, counter: RequestCounter) -> dict[str, ListedObject]:
        bucket, prefix = self.job.destination.bucket, archive_prefix(self.job)
        out: dict[str, ListedObject] = {}
        try:
            for page in self.control.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                counter.add("LIST")
                for obj in listed_objects(page):
                    out[obj.key] = obj
        except IO_ERRORS as exc:
            raise translate(exc, f"list the archives s3://{bucket}/{prefix}") from exc
        return out

    def _list_days(self, parent: str, counter: RequestCounter) -> set[str]:
        """Day prefixes under ``parent`` that hold at least one object."""
        bucket = self.job.source.bucket
        found: set[str] = set()
        try:
            for page in self.control.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket, Prefix=parent, Delimiter="/"):
                counter.add("LIST")
                found |= {p["Prefix"] for p in page.get("CommonPrefixes") or ()}
        except IO_ERRORS as exc:
            raise translate(exc, f"list the day prefixes of s3://{bucket}/{parent}") from exc
        return found

    def _day_present(self, name: str, counter: RequestCounter) -> set[str]:  # {name} if its source holds an object
        holds, lists = holds_objects(self.control, self.job.source.bucket, name, self.job.max_prefixes)
        counter.add("LIST", lists)
        return {name} if holds else set()

    def _read_summary(self, layout, indexed: bool, counter: RequestCounter):
        """((header, summary), problem): from the index, else from the manifest read through; a
        damaged index is the day's problem, its figures still shown from the manifest."""
        problem = None
        try:
            if indexed:
                counter.add("GET")
                got = read_object(self.control, layout.bucket, layout.index_key,
                                  f"read s3://{layout.bucket}/{layout.index_key}", missing_ok=True)
                if got is not None:
                    index, damage = parse_index(got["Body"])
                    if index is not None and "summary" in index:
                        return (index["header"], index["summary"]), None
                    if damage:
                        problem = f"index s3://{layout.bucket}/{layout.index_key} {damage}; read from the manifest"
            # No index (a run died between manifest and index, or an old manifest): read it through.
            counter.add("GET")
            header, summary, _ = read_through(self.control, layout)
            return (header, summary), problem
        except ArchiverError as exc:
            return None, f"{problem}; {exc}" if problem else str(exc)

    def _scrub_results(self, counter: RequestCounter) -> dict:
        counter.add("GET")
        result = read_scrub_result(self.control, self.job)
        return (result or {}).get("days", {})

    def _restored_until(self, layout, listed: dict, counter: RequestCounter) -> str | None:
        from s3arch.restore.glacier import NEEDS_RESTORE, archive_state

        key = next((layout.archive_key(s) for s in ARCHIVE_SUFFIXES if layout.archive_key(s) in listed), None)
        if key is None:
            return None
        counter.add("HEAD")
        try:
            state = archive_state(self.control, layout.bucket, key)
        except ArchiverError:
            return None
        if state.storage_class in NEEDS_RESTORE and state.state == "restored":
            return state.expiry
        return None

    def _split_day(self, day: date, archives: list[tuple], missing: list[str], listed: dict, present: set[str],
                   scrub: dict | None, today: date) -> DayState:
        """A split day: archived when each value holding objects has its archive; figures summed."""
        prefix = self.job.prefix_for(day)
        splits = [self._day(day, layout, listed, {name}, for_split(scrub, name), None, today, parts, name)
                  for name, layout, parts in archives]
        entries = [split_summary(s) for s in splits] + [{"prefix": n, "state": MISSING} for n in missing]
        d = DayState(day.isoformat(), prefix, MISSING if missing else ARCHIVED if prefix in present else SOURCES_DELETED,
                     source_present=prefix in present, scrub=scrub, splits=sorted(entries, key=lambda s: s["prefix"]))
        for name in ("objects", "bytes_in", "bytes_out", "archive_monthly_usd", "separate_monthly_usd"):
            setattr(d, name, sum(getattr(s, name) or 0 for s in splits))
        d.ratio = round(d.bytes_in / d.bytes_out, 3) if d.bytes_in and d.bytes_out else None
        d.storage_class, d.archived_at = splits[0].storage_class, max(s.archived_at or "" for s in splits) or None
        d.late = "; ".join(f"{s.prefix}: {s.late}" for s in splits if s.late) or None
        d.problem = "; ".join(f"{s.prefix}: {s.problem}" for s in splits if s.problem) or None
        return d

    def _day(self, day: date, layout, listed: dict, present: set[str], scrub: dict | None,
             restored_until: str | None, today: date, parts: list, prefix: str | None = None) -> DayState:
        job = self.job
        prefix = prefix or job.prefix_for(day)
        d = DayState(day.isoformat(), prefix, EMPTY, source_present=prefix in present, scrub=scrub,
                     restored_until=restored_until)
        archive_key = next((layout.archive_key(s) for s in ARCHIVE_SUFFIXES if layout.archive_key(s) in listed), None)
        manifest = listed.get(layout.manifest_key)
        if manifest is not None:
            _, found, problem = self._summaries.get(layout.manifest_key, (None, None, None))
            d.manifest_url = layout.manifest_url
            d.state = SOURCES_DELETED if not d.source_present else ARCHIVED
            if found is None:
                d.problem = problem or "manifest unreadable"
            else:
                d.problem = problem
                self._fill(d, *found)
                self._add_parts(d, parts)
            d.late = next((x.get("detail") for x in (scrub or {}).get("drift") or ()
                           if x.get("kind") == "newer than archive"), None)
            return d
        if layout.lease_key in listed:
            d.state = RUNNING
        elif archive_key is not None:
            d.state = INCOMPLETE
            d.archive_url = f"s3://{layout.bucket}/{archive_key}"
        elif was_committed(scrub):
            # A scrub saw it archived and nothing of it is left: not "empty", whatever the source holds.
            d.state = LOST
        elif d.source_present:
            d.state = PENDING if day > today - timedelta(days=job.min_age_days) else MISSING
        elif day < job.start_date:
            d.state = BEFORE_START
        elif day > today - timedelta(days=job.min_age_days):
            d.state = PENDING
        return d

    def _add_parts(self, d: DayState, parts: list) -> None:
        """A day's late parts add their objects and bytes (a key rewritten into a later part
        counts in each)."""
        for layout in parts:
            found = self._summaries.get(layout.manifest_key, (None, None, None))[1]
            if found is not None:
                summary = found[1]
                d.objects = (d.objects or 0) + summary.get("objects", 0)
                d.bytes_in = (d.bytes_in or 0) + summary.get("bytes", 0)
                d.bytes_out = (d.bytes_out or 0) + summary.get("archive_size", 0)
        if parts:
            d.parts = 1 + len(parts)
            d.ratio = round(d.bytes_in / d.bytes_out, 3) if d.bytes_in and d.bytes_out else None

    def _fill(self, d: DayState, header: dict, summary: dict) -> None:
        d.objects, d.bytes_in, d.bytes_out = summary.get("objects"), summary.get("bytes"), summary.get("archive_size")
        d.ratio = round(d.bytes_in / d.bytes_out, 3) if d.bytes_in and d.bytes_out else None
        d.storage_class = summary.get("storage_class")
        archive = header.get("archive") or {}
        d.archive_url = f"s3://{archive.get('bucket')}/{archive.get('key')}" if archive else None
        d.archived_at = summary.get("ended")
        if (summary.get("segments") or 1) > 1:
            d.segments = summary["segments"]
            if d.state == ARCHIVED:
                d.state = SEGMENTS
        if self.job.retain_days and (self.job.object_lock or self.job.legal_hold):
            started = header.get("started")
            if started:
                d.locked_until = (parse_s3_time(started) + timedelta(days=self.job.retain_days)).date().isoformat()
        storage_class = d.storage_class or self.job.storage_class
        if storage_class in self.prices and d.objects is not None and d.bytes_in is not None:
            # The objects' shortfall below 128 KiB is not in the summary: an upper bound of
            # zero keeps the one-by-one figure a floor, never an exaggeration.
            cost = estimate(storage_class, objects=d.objects, bytes_in=d.bytes_in, short_of_minimum=0,
                            archive_bytes=d.bytes_out or 0, prices=self.prices)
            d.archive_monthly_usd = round(cost.archive_monthly, 8)
            d.separate_monthly_usd = round(cost.separate_monthly, 8)


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


def read_scrub_result(control, job: ArchiveJob) -> dict | None:
    bucket, key = job.destination.bucket, scrub_result_key(job)
    got = read_object(control, bucket, key, f"read the scrub result s3://{bucket}/{key}", missing_ok=True)
    if got is None:
        return None
    try:
        result = json.loads(got["Body"])
    except ValueError:
        return None
    # Another shape (edited by hand, damaged) is no result: the next scrub writes a whole one.
    if not isinstance(result, dict) or not isinstance(result.get("days", {}), dict):
        return None
    return result


_CATALOGS: dict[tuple, Catalog] = {}
_CATALOGS_LOCK = threading.Lock()


def catalog_for(job: ArchiveJob, control, **kwargs) -> Catalog:
    """One cached catalog per job (and settings) per process."""
    key = (job.name, id(control))
    with _CATALOGS_LOCK:
        if key not in _CATALOGS:
            _CATALOGS[key] = Catalog(job, control, **kwargs)
        return _CATALOGS[key]
