"""The days a ``--late-window`` re-checks before the day a command line names: the date found in
the source's name and spelled again, day by day, as the name spells it.

A job knows its template (``late_window``, tasks/ops/jobs.py); a command line names one day's
prefix or pattern (``logs/2026/11/21/``, ``AWSLogs/*/Config/*/2026/3/7/``, ``logs/2026-11-21-``),
so its date is found by the spellings AWS and Hive-style layouts use, the rightmost match
winning. A date written ``YYYY/MM/DD`` with two digits in month and day is taken as zero-padded.
"""

from __future__ import annotations

import re
from datetime import date, timedelta

from s3arch.core.config import S3Url
from s3arch.core.errors import BadArgument
from s3arch.ops.archive_job import format_day

# (regex of one spelling, its date spec): the padded spellings before AWS Config's unpadded one.
_SPELLINGS = [(re.compile(r"year=(\d{4})/month=(\d{2})/day=(\d{2})"), "year=%Y/month=%m/day=%d"),
              (re.compile(r"(\d{4})/(\d{2})/(\d{2})"), "%Y/%m/%d"),
              (re.compile(r"(\d{4})-(\d{2})-(\d{2})"), "%Y-%m-%d"),
              (re.compile(r"(?<!\d)(\d{4})(\d{2})(\d{2})(?!\d)"), "%Y%m%d"),
              (re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})"), "%Y/%-m/%-d")]


def earlier_sources(source: S3Url, days: int) -> list[S3Url]:
    """The ``days`` days before ``source``'s date, the oldest first, spelled as ``source`` is;
    a name without a date is a ``BadArgument`` naming the flag."""
    if days == 0:
        return []
    found = _date_in(source.key)
    if found is None:
        raise BadArgument(f"--late-window needs a date in the source's name to count back from; "
                          f"{source} has none", hint="name one day's prefix, such as s3://bucket/logs/2026/11/21/, "
                                                     "or drop --late-window")
    start, end, day, spec = found
    template = "{date:" + spec + "}"
    return [S3Url(source.bucket, source.key[:start] + format_day(template, day - timedelta(days=back))
                  + source.key[end:]) for back in range(days, 0, -1)]


def _date_in(name: str) -> tuple[int, int, date, str] | None:
    """(start, end, date, spec) of the rightmost date in ``name`` that its spec spells exactly."""
    best = None
    for pattern, spec in _SPELLINGS:
        for match in pattern.finditer(name):
            try:
                day = date(*(int(g) for g in match.groups()))
            except ValueError:
                continue
            if format_day("{date:" + spec + "}", day) != match.group(0):
                continue
            if best is None or match.end() > best[1]:
                best = (match.start(), match.end(), day, spec)
    return best
