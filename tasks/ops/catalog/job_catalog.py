"""A job's catalog: the state of each day of a range, read with a few listings and one small GET
per committed day (the package's doc), cached per job in the process (``catalog_for``) and
refreshed by listing again and reading only the manifests that changed."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING

from s3arch.core.config import S3Url
from s3arch.core.cost import prices_with
from s3arch.core.errors import ArchiverError
from s3arch.format.day import listed_parts
from s3arch.format.manifest import layout_for
from s3arch.io.sources import expansion_requests
from s3arch.io.store import Store
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.catalog import reading
from s3arch.ops.catalog.counter import RequestCounter
from s3arch.ops.catalog.day_states import DayStates, Summaries
from s3arch.ops.catalog.prefixes import day_parents
from s3arch.ops.catalog.view import CatalogView, DayState
from s3arch.ops.planning import days_between
from s3arch.ops.split_days import unarchived_splits

if TYPE_CHECKING:
    from s3arch.ops.inventory.days import InventoryDays


class Catalog:
    """A job's days, cached: ``view`` answers from memory while its last read is younger than
    ``max_age`` seconds; a refresh lists again and GETs only the indexes whose manifest changed."""

    def __init__(self, job: ArchiveJob, store: Store, *, max_age: float = 300.0, workers: int = 16):
        self.job = job
        self.store = store
        self.max_age = max_age
        self.workers = workers
        self.prices = prices_with(job.prices)
        self._summaries: Summaries = {}
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
        with ThreadPoolExecutor(self.workers, thread_name_prefix="s3arch-catalog") as pool:
            expansions = expansion_requests(self.store)
            sources = ([pool.submit(reading.list_days, self.store, job, parent, counter) for parent in day_parents(job, days)]
                       if job.days_are_folders else  # wildcards, or a date inside key names: no day folders
                       [pool.submit(reading.day_present, self.store, job, job.prefix_for(day), counter) for day in days])
            scrub = pool.submit(reading.scrub_days, self.store, job, counter)
            listed = reading.list_archives(self.store, job, counter)
            # A day's archives: its one, or a split job's one per value archived (split_days.py).
            names = {day: job.parts_archived(day, listed) for day in days}
            layouts = {(day, name): layout_for(S3Url(job.source.bucket, name), job.destination)
                       for day in days for name in names[day]}
            parts = {key: listed_parts(layout, listed) for key, layout in layouts.items()}
            unarchived = {day: pool.submit(unarchived_splits, job, self.store, day, names[day], counter) for day in days
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
                    wanted[layout] = pool.submit(reading.read_summary, self.store, layout, layout.index_key in listed,
                                                 counter)
            for layout, future in wanted.items():
                found, problem = future.result()
                self._summaries[layout.manifest_key] = (listed[layout.manifest_key].etag, found, problem)
            restored = {day: pool.submit(reading.restored_until, self.store, layouts[(day, names[day][0])], listed,
                                       counter)
                        for day in restore_hint if day in names}
            present: set[str] = set()
            for future in sources:
                present |= future.result()
            missing = {day: f.result() for day, f in unarchived.items()}
            counter.add("LIST", expansion_requests(self.store) - expansions)  # a pattern's levels
            scrub_days = scrub.result()
            restored_until = {day: f.result() for day, f in restored.items()}
        states = DayStates(job, self._summaries, self.prices)
        out = [states.split_day(day, [(n, layouts[(day, n)], parts[(day, n)]) for n in names[day]], missing[day],
                                listed, present, scrub_days.get(day.isoformat()), today) if day in missing else
               states.day(day, layouts[(day, names[day][0])], listed, present, scrub_days.get(day.isoformat()),
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
        from s3arch.ops.inventory.days import inventory_days
        from s3arch.ops.inventory.reports import latest_report

        try:
            counter.add("LIST")
            counter.add("GET", 2)  # the newest manifest.json and its manifest.checksum
            report = latest_report(self.store, job.inventory, job.source.bucket, job.inventory_max_age_days)
            known = self._inventory
            if known is None or known.report.url != report.url:
                counter.add("GET", len(report.files))
                known = self._inventory = inventory_days(job, self.store, report)
        except ArchiverError as exc:
            return {"problem": str(exc)}
        unarchived = {size.day: size for size in known.days.values()
                      if layout_for(S3Url(job.source.bucket, size.prefix), job.destination).manifest_key not in listed}
        for d in out:
            size = unarchived.get(date.fromisoformat(d.day))
            if size is not None:
                d.inventory = {"objects": size.objects, "bytes": size.bytes}
        return {**known.summary(), "unarchived": [s.to_dict() for s in unarchived.values()]}


_CATALOGS: dict[tuple, Catalog] = {}
_CATALOGS_LOCK = threading.Lock()


def catalog_for(job: ArchiveJob, store: Store, **kwargs) -> Catalog:
    """One cached catalog per job (and settings) per process."""
    key = (job.name, id(store))
    with _CATALOGS_LOCK:
        if key not in _CATALOGS:
            _CATALOGS[key] = Catalog(job, store, **kwargs)
        return _CATALOGS[key]
