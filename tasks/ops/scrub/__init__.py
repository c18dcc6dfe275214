"""Scrub: prove every archive of a job is still the one its manifest describes (docs/CATALOG.md).

No restore is needed for the main check, so it works on GLACIER and DEEP_ARCHIVE: for each
committed day, one HEAD of the archive, the manifest and the index, checked against what the
index (the manifest's header and summary) records: size, ETag, CRC32C, and Object Lock
retention no shorter than recorded. For an archive in a readable class (or with a restored
copy), a random sample of members is read by ranged GET and its SHA-256 checked.

Drift is reported as one row per day with what to do:

- ``archive missing``: the manifest commits an archive that is gone; or the last scrub saw the
  day archived and its archive, manifest and index are all gone now,
- ``archive changed``: size, ETag or CRC32C differ from the manifest's,
- ``manifest changed``: the manifest's size differs from the index's,
- ``manifest damaged``: the manifest does not read through to its summary (no index to check it by),
- ``index damaged`` / ``index missing``: the manifest's index does not parse, or is gone (the
  manifest is read through instead, for the checks and the sample),
- ``lock shorter``: the archive's, manifest's or index's retention ends before recorded (the job's
  ``retain_days`` from the run's start; for archive and index also the manifest's own),
- ``archive without manifest``: an archive object no manifest commits (a run died before it),
- ``member differs``: a sampled member's bytes do not match its SHA-256,
- ``newer than archive``: the source holds objects no part of the day holds (they landed, or
  were rewritten, after it was archived): "N objects newer than its archive" (a split job: per archive),
- ``split not archived``: a split job's day some of whose archives are committed, and a value of
  the split wildcard (an account, say) holding objects that day has none.

A small result object goes beside the archives (``<archive prefix>_s3arch-scrub/<job>/``):
one per scrub, and ``latest.json`` merged day by day, which the catalog shows. One archive
(``scrub_archive``: a day's, a split value's or a late part's) is checked the same way, its
result not written (the job's result holds whole days).

Here the range scrub; the checks of one archive in checks.py, one archive alone in one.py,
the rows, result and bill in result.py.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import date, datetime, timedelta, timezone

from s3arch.core.config import S3Url
from s3arch.format.day import PART_INFIX
from s3arch.format.manifest import ARCHIVE_SUFFIXES, MANIFEST_SUFFIX, ArchiveLayout, layout_for
from s3arch.io.sources import expansion_requests
from s3arch.io.store import Store
from s3arch.ops.catalog.counter import RequestCounter
from s3arch.ops.catalog.prefixes import archive_prefix
from s3arch.ops.catalog.scrub_result import SCRUB_DIR, read_scrub_result, scrub_result_key, was_committed
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.planning import days_between
from s3arch.ops.scrub.checks import check_day, late_drift, list_archives, unarchived_drift
from s3arch.ops.scrub.one import archive_day, scrub_archive
from s3arch.ops.scrub.result import ACTIONS, Drift, DriftFound, ScrubResult, scrub_cost

__all__ = ["ACTIONS", "Drift", "DriftFound", "ScrubResult", "archive_day", "parse_range", "scrub", "scrub_archive"]


def scrub(job: ArchiveJob, store: Store, first: date, last: date, *, sample: int = 3, seed: int | None = None,
          write_result: bool = True, now: datetime | None = None, workers: int = 8) -> ScrubResult:
    started = time.monotonic()
    now = now or datetime.now(timezone.utc)
    counter = RequestCounter()
    counter.counts["PUT"] = 0
    result = ScrubResult(job.name, first.isoformat(), last.isoformat(), now.isoformat(timespec="seconds"))
    rng = random.Random(seed)
    days = days_between(first, last)
    listed = list_archives(store, job.destination.bucket, archive_prefix(job), counter)
    # The last scrub's verdicts: a day it saw archived of which nothing is left now is drift,
    # where the listing alone would take it for a day never archived.
    counter.add("GET")
    previous = read_scrub_result(store, job) or {}
    before = previous.get("days") or {}
    last_verified: dict[str, str] = {}
    verdicts: dict[str, dict] = {}
    expansions = expansion_requests(store)
    with ThreadPoolExecutor(workers, thread_name_prefix="s3arch-scrub") as pool:
        futures, late = _submit_days(pool, job, store, days, listed, before, sample, rng, now, counter, result,
                                     last_verified)
        unarchived = {day: pool.submit(unarchived_drift, job, store, day, listed, counter)
                      for day in days if job.split_by}
        retrieval = 0.0
        for (day, source_prefix, _), future in futures.items():
            drift, sampled, sampled_bytes, dollars = future.result()
            drift = drift + late.pop((day, source_prefix), _NO_LATE).result()  # once per day, with its first part
            retrieval += dollars
            result.checked += 1
            result.sampled += sampled
            result.sampled_bytes += sampled_bytes
            if drift:
                result.drift.extend(drift)
            else:
                result.verified.append(day.isoformat())
        for future in unarchived.values():
            result.drift.extend(future.result())
    counter.add("LIST", expansion_requests(store) - expansions)  # a pattern's levels, the split's days
    result.drift.sort(key=lambda d: d.day)
    result.verified = sorted(set(result.verified) - {d.day for d in result.drift})  # every part of the day
    for d in result.drift:
        verdicts.setdefault(d.day, {"scrubbed": result.started, "drift": []})["drift"].append(
            {"kind": d.kind, "detail": d.detail, "action": d.action, "prefix": d.prefix})
    for iso, when in last_verified.items():
        if when:
            verdicts[iso]["last_verified"] = when  # kept from scrub to scrub while the day stays gone
    for iso in result.verified:
        verdicts[iso] = {"scrubbed": result.started, "verified": result.started[:10], "sampled": sample}
    result.requests = dict(counter.counts)
    if write_result:
        result.result_url = _write_result(job, store, result, verdicts, before, counter)
        result.requests = dict(counter.counts)
    result.cost_usd = scrub_cost(result, retrieval)
    result.ended = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _submit_days(pool: ThreadPoolExecutor, job: ArchiveJob, store: Store, days: list[date], listed: dict, before: dict,
                 sample: int, rng: random.Random, now: datetime, counter: RequestCounter, result: ScrubResult,
                 last_verified: dict[str, str]) -> tuple[dict, dict]:
    """The checks of the days' archives submitted to ``pool``: futures of each (day, part)'s
    ``check_day`` and ``late_drift``. A part with no manifest is drift now, added to ``result``
    (``last_verified``: when a scrub last verified a day that is gone), or skipped while a run
    is at work on it."""
    bucket = job.destination.bucket
    futures = {}
    late = {}
    # A split job's day is one archive per part (its manifests in the listing).
    for day, source_prefix in ((d, name) for d in days for name in job.parts_archived(d, listed)):
        layout = layout_for(S3Url(job.source.bucket, source_prefix), job.destination)
        archive_key = next((layout.archive_key(s) for s in ARCHIVE_SUFFIXES if layout.archive_key(s) in listed),
                           None)
        if layout.manifest_key in listed:
            # The day's first archive and each late part's, each checked as an archive of its own.
            for checked in [layout, *late_parts_listed(layout, listed)]:
                futures[(day, source_prefix, checked.stem)] = pool.submit(
                    check_day, job, store, checked, day, source_prefix, listed, sample, random.Random(rng.random()),
                    now, counter)
            late[(day, source_prefix)] = pool.submit(late_drift, job, store, layout, day, source_prefix, counter)
        elif layout.lease_key in listed:
            continue  # a run is at work on it
        elif archive_key is not None:
            result.drift.append(Drift(day.isoformat(), source_prefix, "archive without manifest",
                                      f"s3://{bucket}/{archive_key} is committed by no manifest"))
        elif was_committed(seen := before.get(day.isoformat())):
            assert seen is not None
            when = seen.get("verified") or seen.get("last_verified")
            last_verified[day.isoformat()] = when
            stem = layout.manifest_key.removesuffix(MANIFEST_SUFFIX)
            result.drift.append(Drift(
                day.isoformat(), source_prefix, "archive missing",
                f"archive, manifest and index s3://{bucket}/{stem}.* are all gone; "
                + (f"a scrub verified them on {when}" if when else f"the scrub of {seen.get('scrubbed')} saw them"),
                f"{ACTIONS['archive missing']} (with its manifest and index); deleted on purpose: remove the "
                f"day from s3://{bucket}/{scrub_result_key(job)} and scrubs stop reporting it"))
    return futures, late


def late_parts_listed(day: ArchiveLayout, listed: dict) -> list[ArchiveLayout]:
    """The late parts of ``day`` whose manifests the listing holds, in part order."""
    stems = sorted(key.removesuffix(MANIFEST_SUFFIX) for key in listed
                   if key.startswith(day.stem + PART_INFIX) and key.endswith(MANIFEST_SUFFIX))
    return [ArchiveLayout(day.bucket, stem) for stem in stems]


_NO_LATE: Future = Future()
_NO_LATE.set_result([])


def _write_result(job: ArchiveJob, store: Store, result: ScrubResult, verdicts: dict, before: dict,
                  counter: RequestCounter) -> str:
    bucket = job.destination.bucket
    latest_key = scrub_result_key(job)
    stamp = result.started.replace(":", "").replace("+0000", "Z")
    run_key = f"{archive_prefix(job)}{SCRUB_DIR}{job.name}/{stamp}.json"
    days = dict(before)
    for day in days_between(date.fromisoformat(result.first), date.fromisoformat(result.last)):
        days.pop(day.isoformat(), None)  # this scrub's verdict replaces the last one's
    days.update(verdicts)
    summary = {k: v for k, v in result.to_dict().items() if k not in ("verified",)}
    latest = {"job": job.name, "last_scrub": summary, "days": dict(sorted(days.items()))}
    counter.add("PUT", 2)
    what = f"write the scrub result s3://{bucket}/{latest_key}"
    store.call("put_object", what, Bucket=bucket, Key=run_key, Body=json.dumps(summary, default=str).encode(),
               ContentType="application/json")
    store.call("put_object", what, Bucket=bucket, Key=latest_key, Body=json.dumps(latest, default=str).encode(),
               ContentType="application/json")
    return f"s3://{bucket}/{run_key}"


def parse_range(job: ArchiveJob, date_from, date_to, today: date | None = None) -> tuple[date, date]:
    """A scrub's dates: both given, or by default the job's start to its newest allowed day."""
    from s3arch.ops.planning import parse_date

    first = parse_date(date_from, "date_from") if date_from else job.start_date
    last = parse_date(date_to, "date_to") if date_to else (today or date.today()) - timedelta(days=job.min_age_days)
    return first, last
