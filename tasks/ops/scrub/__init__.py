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
"""

from __future__ import annotations

import json
import random
import re
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, datetime, timedelta, timezone

from s3arch.ops.catalog import (SCRUB_DIR, _Counter, archive_prefix, read_scrub_result, scrub_result_key,
                      was_committed)
from s3arch.core.config import S3Url
from s3arch.core.cost import usd
from s3arch.core.errors import (IO_ERRORS, ArchiveDamaged, ArchiverError, BadArgument, ConcurrentRun, IntegrityError,
                                TransientError, translate)
from s3arch.ops.jobs import ArchiveJob, days_between
from s3arch.io.listed import _listed
from s3arch.format.day import PART_INFIX, committed_parts
from s3arch.format.manifest import (ARCHIVE_SUFFIXES, MANIFEST_SUFFIX, TRAILING_SEPARATORS, ArchiveLayout,
                                    layout_for, parse_index, read_chunk, read_through)
from s3arch.io.sources import expansion_requests, resolved
from s3arch.ops.split_days import unarchived_splits
from s3arch.protocol.parts import check_late
from s3arch.restore.reading import read_member
from s3arch.restore.glacier import NEEDS_RESTORE
from s3arch.io.reads import none_if_missing, read_object
from s3arch.core.timestamps import parse_s3_time

# Request prices (us-east-1 list prices, as tasks/core/cost.py dates its table): LIST per 1,000,
# GET/HEAD per 1,000 in STANDARD, and retrieval per GB where a class bills reads.
LIST_PER_1000 = 0.005
GET_PER_1000 = 0.0004
PUT_PER_1000 = 0.005
RETRIEVAL_PER_GB = {"STANDARD_IA": 0.01, "GLACIER_IR": 0.03}

ACTIONS = {
    "archive missing": "source still there: re-run the day with overwrite (s3arch archive ... --overwrite); "
                       "source gone: recover the archive from a bucket version or replica",
    "archive changed": "recover the committed archive from a bucket version or replica; if the source is still "
                       "there, re-run the day with overwrite",
    "manifest changed": "recover the manifest from a bucket version or replica, or re-run the day with overwrite "
                        "while the source is there",
    "manifest damaged": "without its manifest the archive cannot be restored by key: recover the manifest from a "
                        "bucket version or replica, or re-run the day with overwrite while the source is there",
    "index damaged": "readers fall back to reading the whole manifest (slower): recover the index from a bucket "
                     "version or replica, or re-run the day with overwrite while the source is there",
    "index missing": "readers fall back to reading the whole manifest (slower): recover the index from a bucket "
                     "version or replica, or re-run the day with overwrite while the source is there",
    "lock shorter": "someone with s3:BypassGovernanceRetention shortened it: extend it again "
                    "(aws s3api put-object-retention) and review who may bypass governance",
    "archive without manifest": "a run died before committing: re-run the day (it starts clean and replaces it)",
    "member differs": "the archive's bytes are damaged: recover it from a version or replica, or re-archive "
                      "with overwrite while the source is there",
    "unreadable": "read the message; check the manifest and index objects",
    "split not archived": "re-run the day (s3arch archive of that name, or clear the day's tasks): the missing "
                          "archive is made, the committed ones are re-checked",
    "newer than archive": "re-run the day (s3arch archive, or clear its task): they are archived as the day's "
                          "next part; a job's late_window re-checks its recent days every night",
}


@dataclass
class Drift:
    day: str
    prefix: str
    kind: str
    detail: str
    action: str = ""
    retryable: bool = False  # an "unreadable" check whose S3 fault outlasted the retries: run again

    def __post_init__(self):
        self.action = self.action or ACTIONS.get(self.kind, "")


class DriftFound(ArchiverError):
    """A scrub found drift: a person acts on it, as each row says (exit 2)."""


SHOWN_ROWS = 5  # drift rows a failure's message names; the table and the JSON hold them all


@dataclass
class ScrubResult:
    job: str
    first: str
    last: str
    started: str
    ended: str = ""
    checked: int = 0
    verified: list[str] = field(default_factory=list)
    sampled: int = 0
    sampled_bytes: int = 0
    drift: list[Drift] = field(default_factory=list)
    requests: dict = field(default_factory=dict)
    cost_usd: float = 0.0
    seconds: float = 0.0
    result_url: str | None = None

    @property
    def ok(self) -> bool:
        return not self.drift

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def summary_line(self) -> str:
        where = f"result {self.result_url}" if self.result_url else "no result written"
        return (f"{self.checked} archive(s) from {self.first} to {self.last}: {len(self.verified)} verified, "
                f"{self.sampled} member(s) sampled; {where}")

    def failure(self) -> ArchiverError | None:
        """What the drift means to whoever ran the scrub (``outcome`` maps it to an exit code):
        None when clean; a ``TransientError`` (exit 3, run again) when every row is a check that
        an S3 fault stopped past the retries; else ``DriftFound`` (exit 2) naming the days and
        kinds, and what to do for each kind."""
        if self.ok:
            return None
        faults = [d for d in self.drift if d.retryable]
        found = [d for d in self.drift if not d.retryable]
        if not found:
            return TransientError(f"scrub of job {self.job}: {len(faults)} check(s) stopped on S3 faults that "
                                  f"outlasted the retries (first: {faults[0].detail}); nothing it read had drifted",
                                  hint="run the scrub again")
        days = sorted({d.day for d in found})
        split = len({d.prefix for d in found}) > len(days)  # a split job: which archive of the day
        rows = "; ".join(f"{d.day} {d.kind}" + (f" ({d.prefix})" if split else "") for d in found[:SHOWN_ROWS])
        more = f"; and {len(found) - SHOWN_ROWS} more" if len(found) > SHOWN_ROWS else ""
        actions: dict[str, str] = {}
        for d in found:
            actions.setdefault(d.kind, d.action)
        todo = "; ".join(f"{kind}: {action}" for kind, action in actions.items())
        stopped = (f"; {len(faults)} other check(s) stopped on S3 faults: run the scrub again for those"
                   if faults else "")
        return DriftFound(f"scrub of job {self.job} found drift in {len(days)} day(s): {rows}{more}",
                          hint=f"what to do: {todo}{stopped}")

    def cost_line(self) -> str:
        r = self.requests
        return (f"scrub cost: {r.get('LIST', 0):,} LIST, {r.get('HEAD', 0):,} HEAD, {r.get('GET', 0):,} GET, "
                f"{r.get('PUT', 0):,} PUT, {self.sampled_bytes:,} bytes sampled: {usd(self.cost_usd)} "
                f"(us-east-1 list prices)")

    def table(self) -> str:
        if not self.drift:
            return f"{self.checked} archive(s) of {self.job} from {self.first} to {self.last}: no drift"
        rows = [("day", "drift", "detail", "what to do")] + [(d.day, d.kind, d.detail, d.action) for d in self.drift]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows)


def scrub(job: ArchiveJob, control, first: date, last: date, *, sample: int = 3, seed: int | None = None,
          write_result: bool = True, now: datetime | None = None, workers: int = 8) -> ScrubResult:
    started = time.monotonic()
    now = now or datetime.now(timezone.utc)
    counter = _Counter()
    counter.counts["PUT"] = 0
    result = ScrubResult(job.name, first.isoformat(), last.isoformat(), now.isoformat(timespec="seconds"))
    rng = random.Random(seed)
    days = days_between(first, last)
    listed = _list_archives(control, job.destination.bucket, archive_prefix(job), counter)
    # The last scrub's verdicts: a day it saw archived of which nothing is left now is drift,
    # where the listing alone would take it for a day never archived.
    counter.add("GET")
    previous = read_scrub_result(control, job) or {}
    before = previous.get("days") or {}
    last_verified: dict[str, str] = {}
    verdicts: dict[str, dict] = {}
    expansions = expansion_requests(control)
    with ThreadPoolExecutor(workers, thread_name_prefix="s3arch-scrub") as pool:
        futures, late = _submit_days(pool, job, control, days, listed, before, sample, rng, now, counter, result,
                                     last_verified)
        unarchived = {day: pool.submit(_unarchived_drift, job, control, day, listed, counter)
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
    counter.add("LIST", expansion_requests(control) - expansions)  # a pattern's levels, the split's days
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
        result.result_url = _write_result(job, control, result, verdicts, before, counter)
        result.requests = dict(counter.counts)
    result.cost_usd = _cost(result, retrieval)
    result.ended = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _list_archives(control, bucket: str, prefix: str, counter: _Counter) -> dict:
    listed = {}
    try:
        for page in control.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            counter.add("LIST")
            listed.update({o.key: o for o in _listed(page)})
    except IO_ERRORS as exc:
        raise translate(exc, f"list the archives s3://{bucket}/{prefix}") from exc
    return listed


_LATE_PART = re.compile(re.escape(PART_INFIX) + r"\d{4,}$")


def archive_day(job: ArchiveJob, layout: ArchiveLayout) -> tuple[date, str] | None:
    """The day and source name (a split job's: with its value) of ``job`` whose archive, or
    late part, ``layout`` is, from its key alone (``layout_for``'s inverse: a name's trailing
    separators are not in its key, and the template says which they are); None if it is not
    one of the job's."""
    base = layout_for(S3Url(job.source.bucket, ""), job.destination).stem.removesuffix("_bucket")
    stem = _LATE_PART.sub("", layout.stem)
    if layout.bucket != job.destination.bucket or not stem.startswith(base):
        return None
    after = job.prefix_template.rsplit("}", 1)[1]
    name = stem[len(base):] + after[len(after.rstrip(TRAILING_SEPARATORS)):]
    try:
        day = job.date_of(name)
    except BadArgument:
        return None
    return (day, name) if layout_for(S3Url(job.source.bucket, name), job.destination).stem == stem else None


def scrub_archive(job: ArchiveJob, control, layout: ArchiveLayout, *, sample: int = 3, seed: int | None = None,
                  now: datetime | None = None) -> ScrubResult:
    """One archive of ``job`` (``layout``: a day's, a split value's or a late part's) checked as
    ``scrub`` checks each: its index, HEADs, lock and sample against its manifest, and its
    source for objects no part of the day holds. Not written: the job's result holds whole days."""
    found = archive_day(job, layout)
    if found is None:
        raise BadArgument(f"s3://{layout.bucket}/{layout.stem}.* is not an archive of job {job.name!r}",
                          hint=f"its archives are under s3://{job.destination.bucket}/{archive_prefix(job)}")
    day, name = found
    started = time.monotonic()
    now = now or datetime.now(timezone.utc)
    counter = _Counter()
    counter.counts["PUT"] = 0
    iso = day.isoformat()
    result = ScrubResult(job.name, iso, iso, now.isoformat(timespec="seconds"))
    listed = _list_archives(control, layout.bucket, layout.stem, counter)
    retrieval = 0.0
    if layout.manifest_key in listed:
        expansions = expansion_requests(control)
        drift, result.sampled, result.sampled_bytes, retrieval = _check_day(
            job, control, layout, day, name, listed, sample, random.Random(seed), now, counter)
        day_layout = layout_for(S3Url(job.source.bucket, name), job.destination)
        result.drift = drift + _late_drift(job, control, day_layout, day, name, counter)
        counter.add("LIST", expansion_requests(control) - expansions)
    elif layout.lease_key in listed:
        raise ConcurrentRun(f"a run holds the lease {layout.lease_key} and has not committed {layout.manifest_url}",
                            hint="scrub the archive once that run is done")
    elif archive := next((layout.archive_key(s) for s in ARCHIVE_SUFFIXES if layout.archive_key(s) in listed), None):
        result.drift.append(Drift(iso, name, "archive without manifest",
                                  f"s3://{layout.bucket}/{archive} is committed by no manifest"))
    else:
        raise BadArgument(f"nothing is archived at s3://{layout.bucket}/{layout.stem}.*: no archive, manifest or "
                          "index", hint=f"a scrub of the day (--date-from {iso} --date-to {iso}) reports an archive "
                                        "that a scrub saw and that is gone")
    result.checked = 1
    result.verified = [] if result.drift else [iso]
    result.requests = dict(counter.counts)
    result.cost_usd = _cost(result, retrieval)
    result.ended = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _submit_days(pool: ThreadPoolExecutor, job: ArchiveJob, control, days: list[date], listed: dict, before: dict,
                 sample: int, rng: random.Random, now: datetime, counter: _Counter, result: ScrubResult,
                 last_verified: dict[str, str]) -> tuple[dict, dict]:
    """The checks of the days' archives submitted to ``pool``: futures of each (day, part)'s
    ``_check_day`` and ``_late_drift``. A part with no manifest is drift now, added to ``result``
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
                    _check_day, job, control, checked, day, source_prefix, listed, sample, random.Random(rng.random()),
                    now, counter)
            late[(day, source_prefix)] = pool.submit(_late_drift, job, control, layout, day, source_prefix, counter)
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


def _cost(result: ScrubResult, retrieval: float) -> float:
    r = result.requests
    return (r.get("LIST", 0) + r.get("PUT", 0)) * LIST_PER_1000 / 1000 + \
        (r.get("GET", 0) + r.get("HEAD", 0)) * GET_PER_1000 / 1000 + retrieval


def _head(control, bucket: str, key: str, counter: _Counter, **kwargs) -> dict | None:
    counter.add("HEAD")
    return none_if_missing(lambda: control.head_object(Bucket=bucket, Key=key, **kwargs), f"check s3://{bucket}/{key}")


def _until(head: dict) -> datetime | None:
    value = head.get("ObjectLockRetainUntilDate")
    if not value:
        return None
    return value if isinstance(value, datetime) else parse_s3_time(value)


def _check_day(job: ArchiveJob, control, layout, day: date, prefix: str, listed: dict, sample: int,
               rng: random.Random, now: datetime, counter: _Counter) -> tuple[list[Drift], int, int, float]:
    iso = day.isoformat()
    drift: list[Drift] = []
    index_url = f"s3://{layout.bucket}/{layout.index_key}"
    try:
        index = index_head = None
        if layout.index_key in listed:
            counter.add("GET")
            # The GET answers what a HEAD of the index would (size, ETag, retention): no HEAD.
            index_head = read_object(control, layout.bucket, layout.index_key, f"read {index_url}", missing_ok=True)
            if index_head is not None:
                index, damage = parse_index(index_head["Body"])
                if damage:
                    drift.append(Drift(iso, prefix, "index damaged", f"{index_url} {damage}; the manifest was read"))
        picked: list[dict] = []
        if index is not None and "summary" in index:
            header, summary = index["header"], index["summary"]
        else:
            # No usable index: the manifest read through gives header, summary and the sample.
            counter.add("GET")
            try:
                header, summary, picked = read_through(control, layout, sample if index is None else 0, rng)
            except (ArchiveDamaged, IntegrityError) as exc:
                return drift + [Drift(iso, prefix, "manifest damaged", str(exc))], 0, 0, 0.0
        if index_head is None and not _predates_indexes(header):
            drift.append(Drift(iso, prefix, "index missing", f"{layout.manifest_url} has no index {index_url}"))
        archive_key = header["archive"]["key"]
        url = f"s3://{layout.bucket}/{archive_key}"
        with ThreadPoolExecutor(2) as heads:
            a = heads.submit(_head, control, layout.bucket, archive_key, counter, ChecksumMode="ENABLED")
            m = heads.submit(_head, control, layout.bucket, layout.manifest_key, counter)
            archive, manifest = a.result(), m.result()
        if archive is None:
            return drift + [Drift(iso, prefix, "archive missing", f"{layout.manifest_url} commits {url}, which is gone")], \
                0, 0, 0.0
        expected = {"size": summary.get("archive_size"), "etag": summary.get("archive_etag"),
                    "crc32c": summary.get("archive_crc32c") or None}
        got = {"size": archive.get("ContentLength"), "etag": archive.get("ETag"), "crc32c": archive.get("ChecksumCRC32C")}
        differs = [k for k in got if expected[k] is not None and got[k] is not None and got[k] != expected[k]]
        if differs:
            drift.append(Drift(iso, prefix, "archive changed",
                               ", ".join(f"{k} {got[k]} (manifest: {expected[k]})" for k in differs)))
        manifest_changed = manifest is not None and index is not None and \
            index.get("manifest_size") not in (None, manifest.get("ContentLength"))
        if manifest_changed:
            assert manifest is not None and index is not None
            drift.append(Drift(iso, prefix, "manifest changed",
                               f"{manifest.get('ContentLength')} bytes, the index recorded {index['manifest_size']}"))
        drift += _check_locks(job, iso, prefix, header, {"archive": archive, "manifest": manifest, "index": index_head})
        sampled = sampled_bytes = 0
        # Sampled only by a manifest and archive that are still what was recorded: the index's
        # chunk offsets are of the recorded manifest.
        if not differs and not manifest_changed and sample > 0 and _readable(archive):
            if index is not None and index.get("chunks"):
                try:
                    picked = _pick_from_index(control, layout, index, sample, rng, counter)
                except (ArchiveDamaged, IntegrityError, ValueError) as exc:  # a chunk that does not inflate or parse
                    return drift + [Drift(iso, prefix, "manifest damaged", f"{layout.manifest_url}: {exc}")], \
                        0, 0, 0.0
            sampled, sampled_bytes, bad = _check_members(control, layout, header, picked, counter)
            drift += [Drift(iso, prefix, "member differs", problem) for problem in bad]
        retrieval = sampled_bytes / (1 << 30) * RETRIEVAL_PER_GB.get(archive.get("StorageClass") or "STANDARD", 0.0)
        return drift, sampled, sampled_bytes, retrieval
    except ArchiverError as exc:
        return drift + [Drift(iso, prefix, "unreadable", str(exc), retryable=exc.retryable)], 0, 0, 0.0


def _late_drift(job: ArchiveJob, control, layout, day: date, prefix: str, counter: _Counter) -> list[Drift]:
    """Objects in the day's source ``prefix`` that no part holds. Its requests: the day's state
    and parts (HEAD and GET per part, one LIST), the day index, the source's listing, and the
    manifests only when the index's digest does not settle it."""
    source = S3Url(job.source.bucket, prefix)
    try:
        parts = committed_parts(control, layout, source)
        if not parts:
            return []  # gone since the listing: the day's own check reports it
        # A pattern is listed as the prefixes it expands to now (tasks/io/sources.py).
        check = check_late(control, resolved(control, source, job.max_prefixes), parts)
    except (ArchiveDamaged, IntegrityError):
        return []  # the day's own check reports the damage
    except BadArgument:
        return []  # the pattern matches no prefix any more: nothing in the source, nothing late
    except ArchiverError as exc:
        return [Drift(day.isoformat(), prefix, "unreadable", f"checking for objects newer than the archive: {exc}",
                      retryable=exc.retryable)]
    counter.add("HEAD", len(parts))
    counter.add("GET", len(parts) + 1 + (len(parts) if check.manifests_read else 0))
    counter.add("LIST", 2 + check.listed // 1000)
    if not check.late:
        return []
    changed = f", {check.changed:,} of them rewritten since" if check.changed else ""
    where = f"{prefix}: " if job.split_by else ""  # which of the day's archives
    return [Drift(day.isoformat(), prefix, "newer than archive",
                  f"{where}{check.late:,} objects newer than its archive{changed} (first: {check.found.first[0]})")]


def _unarchived_drift(job: ArchiveJob, control, day: date, listed: dict, counter: _Counter) -> list[Drift]:
    """A split day some of whose archives are committed: each value holding objects with none."""
    archived = [name for name in job.parts_archived(day, listed)
                if layout_for(S3Url(job.source.bucket, name), job.destination).manifest_key in listed]
    if not archived:
        return []  # a day never archived is the catalog's "missing", not drift
    try:
        missing = unarchived_splits(job, control, day, archived, counter)
    except ArchiverError as exc:
        return [Drift(day.isoformat(), job.prefix_for(day), "unreadable", f"listing the day's split values: {exc}",
                      retryable=exc.retryable)]
    return [Drift(day.isoformat(), name, "split not archived",
                  f"{name} holds objects and has no archive; the day's other {len(archived)} archive(s) are committed")
            for name in missing]


def _predates_indexes(header: dict) -> bool:
    """s3arch 0.1 wrote manifests without an index (docs/FORMAT.md): none missing there."""
    version = str(header.get("tool", "")).removeprefix("s3arch ")
    return version == "0.1" or version.startswith("0.1.")


def _check_locks(job: ArchiveJob, iso: str, prefix: str, header: dict, heads: dict[str, dict | None]) -> list[Drift]:
    """Each object's retention must end no earlier than recorded: the job's ``retain_days``
    from when the run started (archive, manifest and index were all created under it), and
    for the archive and the index the manifest's own (made with the same lock arguments)."""
    job_until = None
    if job.object_lock and job.retain_days and header.get("started"):
        job_until = (f"the job's {job.retain_days} days", parse_s3_time(header["started"]) + timedelta(days=job.retain_days))
    manifest = heads.get("manifest")
    manifest_until = _until(manifest) if manifest is not None else None
    drift = []
    for name, head in heads.items():
        if head is None:
            continue
        recorded = [job_until] if job_until else []
        if name != "manifest" and manifest_until is not None:
            recorded.append(("the manifest's", manifest_until))
        if not recorded:
            continue
        wanted_name, wanted = max(recorded, key=lambda r: r[1])
        until = _until(head)
        if until is None:
            drift.append(Drift(iso, prefix, "lock shorter",
                               f"no retention on the {name}; {wanted_name} ends {wanted:%Y-%m-%d}"))
        # The archive's upload is created before the manifest's: a few minutes' slack.
        elif until < wanted - timedelta(minutes=10):
            drift.append(Drift(iso, prefix, "lock shorter", f"the {name} is retained until {until:%Y-%m-%d %H:%M}, "
                                                            f"{wanted_name} until {wanted:%Y-%m-%d %H:%M}"))
    return drift


def _readable(head: dict) -> bool:
    storage_class = head.get("StorageClass") or "STANDARD"
    if storage_class not in NEEDS_RESTORE:
        return True
    restore = head.get("Restore") or ""
    return 'ongoing-request="false"' in restore


def _pick_from_index(control, layout, index: dict, sample: int, rng: random.Random, counter: _Counter) -> list[dict]:
    """``sample`` random member records: one GET of a manifest chunk each (at most)."""
    chunks = index["chunks"]
    records: list[dict] = []
    for i in sorted({rng.randrange(len(chunks)) for _ in range(sample)}):
        counter.add("GET")
        records += read_chunk(control, layout, index, i)
    return rng.sample(records, min(sample, len(records)))


def _check_members(control, layout, header: dict, picked: list[dict], counter: _Counter) -> tuple[int, int, list[str]]:
    """Read each picked member by ranged GET (one GET of its blocks) and check its SHA-256."""
    bad, read = [], 0
    for record in picked:
        start, end = record["range"]
        counter.add("GET")
        read += end - start  # what the ranged GET asks for, and is billed
        try:
            size, sha256 = read_member(control, layout.bucket, header, record)
        except ArchiverError:
            raise  # S3 or the network, typed at the I/O: not drift
        except Exception as exc:  # a damaged deflate stream is drift, not a crash
            bad.append(f"{record['key']}: does not decompress ({exc})")
            continue
        if size != record["size"] or sha256 != record["sha256"]:
            bad.append(f"{record['key']}: SHA-256 differs from the manifest's")
    return len(picked), read, bad


def _write_result(job: ArchiveJob, control, result: ScrubResult, verdicts: dict, before: dict,
                  counter: _Counter) -> str:
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
    try:
        counter.add("PUT", 2)
        control.put_object(Bucket=bucket, Key=run_key, Body=json.dumps(summary, default=str).encode(),
                           ContentType="application/json")
        control.put_object(Bucket=bucket, Key=latest_key, Body=json.dumps(latest, default=str).encode(),
                           ContentType="application/json")
    except IO_ERRORS as exc:
        raise translate(exc, f"write the scrub result s3://{bucket}/{latest_key}") from exc
    return f"s3://{bucket}/{run_key}"


def parse_range(job: ArchiveJob, date_from, date_to, today: date | None = None) -> tuple[date, date]:
    """A scrub's dates: both given, or by default the job's start to its newest allowed day."""
    from s3arch.ops.jobs import parse_date

    first = parse_date(date_from, "date_from") if date_from else job.start_date
    last = parse_date(date_to, "date_to") if date_to else (today or date.today()) - timedelta(days=job.min_age_days)
    return first, last
