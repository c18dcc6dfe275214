"""A run's days: the prefixes one run archives (``plan``: on-call prefixes, a date range, or the
scheduled day and its late window), checked before any work starts, and how they are spread over
the archive DAG's mapped tasks (``archive_batches``).
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from s3arch.core.errors import BadArgument
from s3arch.ops.archive_job import ArchiveJob


def parse_date(text, what: str) -> date:
    if isinstance(text, date):
        return text
    try:
        return date.fromisoformat(str(text).strip())
    except ValueError:
        raise BadArgument(f"{what}: {text!r} is not a date", hint="write it as YYYY-MM-DD") from None


def days_between(first: date, last: date) -> list[date]:
    return [first + timedelta(days=i) for i in range((last - first).days + 1)]


def plan(job: ArchiveJob, *, date_from=None, date_to=None, prefixes=None,
         logical_date: date | None = None) -> list[str]:
    """The prefixes one run archives, oldest first.

    Explicit ``prefixes`` (on-call) or a date range (giving both is an error), else the run's
    logical date minus the job's ``min_age_days`` (scheduled runs and backfills). Every mistake
    is reported before any work starts.
    """
    if prefixes:
        if date_from or date_to:
            raise BadArgument("give either prefixes or a date range, not both")
        if isinstance(prefixes, str):
            prefixes = [p for p in re.split(r"[\s,]+", prefixes) if p]
        dated = sorted((job.date_of(p), p) for p in dict.fromkeys(prefixes))
        _check_age(job, dated[-1][0])
        return [p for _, p in dated]
    if date_from or date_to:
        if not (date_from and date_to):
            raise BadArgument("date_from and date_to go together",
                              hint="for one day set both to the same date")
        first, last = parse_date(date_from, "date_from"), parse_date(date_to, "date_to")
        if first > last:
            raise BadArgument(f"empty date range: date_from {first} is after date_to {last}",
                              hint="swap them, or set both to the same date for one day")
        _check_age(job, last)
        return [job.prefix_for(d) for d in days_between(first, last)]
    if logical_date is None:
        raise BadArgument("no date range, no prefixes and no logical date: nothing to plan")
    # The day that became old enough, and the days before it still within the late window:
    # each is re-checked for late objects (one listing when nothing is new).
    newest = logical_date - timedelta(days=job.min_age_days)
    return [job.prefix_for(newest - timedelta(days=back)) for back in range(job.late_window, -1, -1)]


def _check_age(job: ArchiveJob, newest: date) -> None:
    if newest > job.newest_allowed:
        raise BadArgument(
            f"{newest} is too recent for job {job.name!r}: it archives days at least "
            f"{job.min_age_days} day(s) old, so the newest allowed is {job.newest_allowed}",
            hint="pick an earlier date; data for recent days may still be arriving")


def batches(prefixes: list[str], max_tasks: int) -> list[list[str]]:
    """Split prefixes into at most ``max_tasks`` consecutive batches of near-equal size,
    so a range longer than Airflow's max_map_length still maps (one batch per task)."""
    if max_tasks < 1:
        raise BadArgument("max_tasks must be at least 1")
    per_task = -(-len(prefixes) // max_tasks) if prefixes else 1
    return [prefixes[i:i + per_task] for i in range(0, len(prefixes), per_task)]


# A long range is spread over this many archive tasks, consecutive days sharing one: a year of
# days is 32 task instances, not 365 (each costs Airflow seconds to start and record:
# bench/results/backfill-365.json). A range of at most this many days keeps one task per day:
# what on-call clears is the day itself.
SPREAD_TASKS = 32


def archive_batches(prefixes: list[str], max_tasks: int) -> list[list[str]]:
    """The archive tasks' batches of a run's prefixes: one prefix each for up to
    ``SPREAD_TASKS`` of them, else ``SPREAD_TASKS`` consecutive near-equal batches; never more
    than ``max_tasks`` (Airflow's max_map_length)."""
    return batches(prefixes, min(SPREAD_TASKS, max_tasks))
