"""One archive scrubbed alone (``s3arch scrub s3://.../DAY.tar.gz``): a day's, a split value's
or a late part's, found among a job's archives by its key."""

from __future__ import annotations

import random
import re
import time
from datetime import date, datetime, timezone

from s3arch.core.config import S3Url
from s3arch.core.errors import BadArgument, ConcurrentRun
from s3arch.format.day import PART_INFIX
from s3arch.format.manifest import ARCHIVE_SUFFIXES, TRAILING_SEPARATORS, ArchiveLayout, layout_for
from s3arch.io.sources import expansion_requests
from s3arch.io.store import Store
from s3arch.ops.catalog.counter import RequestCounter
from s3arch.ops.catalog.prefixes import archive_prefix
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.scrub.checks import check_day, late_drift, list_archives
from s3arch.ops.scrub.result import Drift, ScrubResult, scrub_cost


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


def scrub_archive(job: ArchiveJob, store: Store, layout: ArchiveLayout, *, sample: int = 3, seed: int | None = None,
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
    counter = RequestCounter()
    counter.counts["PUT"] = 0
    iso = day.isoformat()
    result = ScrubResult(job.name, iso, iso, now.isoformat(timespec="seconds"))
    listed = list_archives(store, layout.bucket, layout.stem, counter)
    retrieval = 0.0
    if layout.manifest_key in listed:
        expansions = expansion_requests(store)
        drift, result.sampled, result.sampled_bytes, retrieval = check_day(
            job, store, layout, day, name, listed, sample, random.Random(seed), now, counter)
        day_layout = layout_for(S3Url(job.source.bucket, name), job.destination)
        result.drift = drift + late_drift(job, store, day_layout, day, name, counter)
        counter.add("LIST", expansion_requests(store) - expansions)
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
    result.cost_usd = scrub_cost(result, retrieval)
    result.ended = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result.seconds = round(time.monotonic() - started, 3)
    return result
