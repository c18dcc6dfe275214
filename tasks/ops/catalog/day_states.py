"""A day's state from what the catalog read: the archive listing (manifest, archive, lease), the
manifests' summaries, the source's day prefixes and the last scrub's verdict; a split job's day
made of its archives' states (tasks/ops/split_days.py)."""

from __future__ import annotations

from datetime import date, timedelta

from s3arch.core.timestamps import parse_s3_time
from s3arch.format.manifest import ARCHIVE_SUFFIXES
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.catalog.pricing import price_day
from s3arch.ops.catalog.scrub_result import was_committed
from s3arch.ops.catalog.view import (ARCHIVED, BEFORE_START, EMPTY, INCOMPLETE, LOST, MISSING, PENDING, RUNNING,
                                     SEGMENTS, SOURCES_DELETED, DayState)
from s3arch.ops.split_days import for_split, split_summary

# What the catalog knows of each manifest it read: manifest key -> (etag, (header, summary), problem).
Summaries = dict[str, tuple[str, tuple[dict, dict] | None, str | None]]


class DayStates:
    """The states of ``job``'s days, from the manifests' ``summaries`` and the job's ``prices``."""

    def __init__(self, job: ArchiveJob, summaries: Summaries, prices: dict):
        self.job = job
        self.summaries = summaries
        self.prices = prices

    def split_day(self, day: date, archives: list[tuple], missing: list[str], listed: dict, present: set[str],
                   scrub: dict | None, today: date) -> DayState:
        """A split day: archived when each value holding objects has its archive; figures summed."""
        prefix = self.job.prefix_for(day)
        splits = [self.day(day, layout, listed, {name}, for_split(scrub, name), None, today, parts, name)
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

    def day(self, day: date, layout, listed: dict, present: set[str], scrub: dict | None,
             restored_until: str | None, today: date, parts: list, prefix: str | None = None) -> DayState:
        job = self.job
        prefix = prefix or job.prefix_for(day)
        d = DayState(day.isoformat(), prefix, EMPTY, source_present=prefix in present, scrub=scrub,
                     restored_until=restored_until)
        archive_key = next((layout.archive_key(s) for s in ARCHIVE_SUFFIXES if layout.archive_key(s) in listed), None)
        manifest = listed.get(layout.manifest_key)
        if manifest is not None:
            _, found, problem = self.summaries.get(layout.manifest_key, (None, None, None))
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
            found = self.summaries.get(layout.manifest_key, (None, None, None))[1]
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
        price_day(d, d.storage_class or self.job.storage_class, self.prices)
