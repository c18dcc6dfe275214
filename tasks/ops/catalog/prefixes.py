"""Where a job's days are: the destination prefix its archives are under, and the source
prefixes whose delimiter listing shows its day prefixes."""

from __future__ import annotations

import string
from datetime import date

from s3arch.ops.archive_job import ArchiveJob


def archive_prefix(job: ArchiveJob) -> str:
    """The destination prefix every archive of the job is under: the stem of its day prefixes
    up to the first date field or wildcard of the template (``archive/app-logs/logs/``)."""
    literal = next(iter(string.Formatter().parse(job.prefix_template)))[0].split("*")[0]
    dest = job.destination.key
    if dest and not dest.endswith("/"):
        dest += "/"
    return f"{dest}{job.source.bucket}/{job.source.key}{literal}"


def day_parents(job: ArchiveJob, days: list[date]) -> list[str]:
    """The prefixes to list with Delimiter='/' to see the days' prefixes: each day prefix's
    parent (its path up to its last '/' but one)."""
    parents = []
    for day in days:
        prefix = job.prefix_for(day)
        cut = prefix.rstrip("/").rfind("/")
        parents.append(prefix[:cut + 1] if cut >= 0 else "")
    return list(dict.fromkeys(parents))
