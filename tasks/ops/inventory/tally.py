"""Counting a report's rows per day prefix of a job: which day prefix a key is under (one
regular expression made from the job's template), and objects and bytes per prefix."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from datetime import date

from s3arch.core.errors import BadArgument
from s3arch.ops.archive_job import ArchiveJob


class DayMatcher:
    """Which day prefix of ``job`` a key is under, by one regular expression made from the
    job's template (each candidate checked once by ``job.date_of``, which rejects what the
    template would not write, such as month 13)."""

    _DIRECTIVES = {"Y": r"\d{4}", "G": r"\d{4}", "m": r"\d{2}", "d": r"\d{2}", "y": r"\d{2}", "H": r"\d{2}",
                   "j": r"\d{3}", "U": r"\d{2}", "W": r"\d{2}", "V": r"\d{2}", "u": r"\d", "w": r"\d",
                   "b": r"[A-Za-z]+", "B": r"[A-Za-z]+", "a": r"[A-Za-z]+", "A": r"[A-Za-z]+", "%": "%"}

    def __init__(self, job: ArchiveJob):
        self.job = job
        parts = [re.escape(job.source.key)]
        for literal, field_name, spec, _ in string.Formatter().parse(job.prefix_template):
            parts.append(re.escape(literal))
            if field_name is not None:
                parts.append(self._spec_pattern(spec or ""))
        self.pattern = re.compile("".join(parts))
        self._days: dict[str, date | None] = {}

    def _spec_pattern(self, spec: str) -> str:
        out, i = [], 0
        while i < len(spec):
            if spec[i] == "%" and i + 1 < len(spec):
                out.append(self._DIRECTIVES.get(spec[i + 1], r"[^/]+?"))
                i += 2
            else:
                out.append(re.escape(spec[i]))
                i += 1
        return "".join(out)

    def day_of(self, prefix: str) -> date | None:
        if prefix not in self._days:
            try:
                self._days[prefix] = self.job.date_of(prefix)
            except BadArgument:
                self._days[prefix] = None
        return self._days[prefix]


@dataclass
class Tally:
    """Objects and bytes per matched prefix, and the last prefix seen: inventory rows come in
    key order within a file, so most keys skip the regular expression."""

    matcher: DayMatcher
    counts: dict[str, list[int]] = field(default_factory=dict)
    rows: int = 0
    elsewhere: int = 0
    _last: str | None = None

    def add(self, key: str, size: int) -> None:
        last = self._last
        if last is None or not key.startswith(last):
            m = self.matcher.pattern.match(key)
            if m is None:
                self.elsewhere += 1
                return
            last = self._last = m.group(0)
        counted = self.counts.get(last)
        if counted is None:
            counted = self.counts[last] = [0, 0]
        counted[0] += 1
        counted[1] += size
