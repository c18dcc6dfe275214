"""The jobs file: archive jobs read from YAML rather than code, each checked as it is read
(every mistake names the job and the key), the spellings of earlier releases still read with a
warning. The file's format is documented in docs/JOBS.md; a job is an ``ArchiveJob``
(tasks/ops/archive_job.py), and ``plan`` (tasks/ops/planning.py) turns it and a date range (or
on-call's prefixes) into the prefixes to archive, for the Airflow DAG and any cron script alike.
"""

from __future__ import annotations

import re
import string
import warnings
from dataclasses import fields
from datetime import date
from pathlib import Path

from s3arch.core.config import S3Url
from s3arch.core.errors import BadArgument
from s3arch.core.options import is_whole, job_options, whole
from s3arch.io.sources import WILDCARD, check_pattern, is_pattern
from s3arch.ops.archive_job import ArchiveJob, format_day
from s3arch.ops.planning import parse_date
from s3arch.ops.presets import with_preset

_JOB_NAME = re.compile(r"[A-Za-z0-9_\-]{1,200}")


def _check_template(name: str, template: str, split_by: int | None) -> None:
    names = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    if names != ["date"]:
        raise BadArgument(f"job {name!r}: prefix_template {template!r} must contain {{date:...}} exactly once",
                          hint="write it like logs/{date:%Y/%m/%d}/")
    spec = next(s for _, f, s, _ in string.Formatter().parse(template) if f == "date") or ""
    if re.search(r"%-[^md]", spec):
        raise BadArgument(f"job {name!r}: prefix_template {template!r}: only %-m and %-d may drop their zero")
    if format_day(template, date(2026, 1, 31)) == format_day(template, date(2026, 1, 30)):
        raise BadArgument(f"job {name!r}: prefix_template {template!r} gives the same prefix for "
                          "different days", hint="include the day, e.g. {date:%Y/%m/%d}")
    after_date = template.rsplit("}", 1)[1]
    if not after_date or after_date[0].isalnum():
        raise BadArgument(f"job {name!r}: prefix_template {template!r} must go on after the date with a "
                          "separator ('/', '-', '.', '_')",
                          hint="without it, logs/2026/01/1 would also match logs/2026/01/10..19: end it "
                               "with '/' for a folder, or '-' for a date inside key names (logs/{date:%Y-%m-%d}-)")
    check_pattern(template, f"job {name!r}: prefix_template")
    wildcards = template.count(WILDCARD)
    if split_by is not None and not (is_whole(split_by) and 1 <= split_by <= wildcards):
        raise BadArgument(f"job {name!r}: split_by {split_by!r} must name one of the template's "
                          f"{wildcards} wildcard(s), by number from 1",
                          hint="e.g. split_by: 1 for one archive per value of the first '*'")


def job_keys() -> set[str]:
    """Every key a job may have: its own fields and the options that are job keys."""
    return {f.name for f in fields(ArchiveJob)} - {"name", "options"} | {o.name for o in job_options()}


def load_jobs(path: str | Path) -> dict[str, ArchiveJob]:
    """Read and validate the jobs file; every mistake names the job and the field."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise BadArgument(f"jobs file {path} does not exist",
                          hint="create it (see docs/JOBS.md) or point S3ARCH_JOBS_FILE at it") from None
    except yaml.YAMLError as exc:
        raise BadArgument(f"jobs file {path} is not valid YAML: {exc}") from None
    raw_jobs = doc.get("jobs") if isinstance(doc, dict) else None
    if not isinstance(raw_jobs, dict):
        raise BadArgument(f"jobs file {path} has no 'jobs:' mapping", hint="see docs/JOBS.md")
    return {name: job_from_dict(name, body or {}) for name, body in raw_jobs.items()}


# Keys of round 3 renamed so that a job, the CLI and the operators use one name per setting:
# still read for one release, with a warning that names the new key.
DEPRECATED_KEYS = {"lease_ttl_seconds": "lease_ttl", "restore_poll_seconds": "poll_interval"}


def job_from_dict(name: str, body: dict) -> ArchiveJob:
    if not _JOB_NAME.fullmatch(str(name)):
        raise BadArgument(f"job name {name!r} may only use letters, digits, '_' and '-'")
    body = with_preset(name, _renamed(name, body))
    known = job_keys()
    unknown = sorted(set(body) - known)
    if unknown:
        raise BadArgument(f"job {name!r}: unknown field(s) {', '.join(unknown)}",
                          hint=f"known fields: {', '.join(sorted(known))}")
    for required in ("source", "prefix_template", "destination"):
        if not body.get(required):
            raise BadArgument(f"job {name!r}: '{required}' is required")
    values = dict(body)
    options = {o.name: o.job_value(values.pop(o.name), f"job {name!r}: {o.name}") if o.name in values
               else o.default_for_job for o in job_options()}
    values["source"] = S3Url.parse(values["source"])
    values["destination"] = S3Url.parse(values["destination"])
    if values.get("inventory") is not None:
        values["inventory"] = check_inventory_location(S3Url.parse(values["inventory"]), f"job {name!r}: inventory")
    if isinstance(values.get("start_date"), str):
        values["start_date"] = parse_date(values["start_date"], f"job {name!r}: start_date")
    for number in ("min_age_days", "execution_timeout_minutes", "retries", "retry_delay_seconds"):
        if number in values:
            whole(0)(values[number], f"job {name!r}: {number}")
    _check_template(name, values["prefix_template"], values.get("split_by"))
    if is_pattern(values["source"].key):
        raise BadArgument(f"job {name!r}: source {values['source']} holds a '*'",
                          hint="put the wildcards in prefix_template; source is the bucket and a fixed prefix")
    job = ArchiveJob(name=name, options=options, **values)
    job.spec_for(job.prefix_for(date(2026, 1, 31)))  # the engine's own checks, at load time
    return job


def check_inventory_location(url: S3Url, name: str = "--inventory") -> S3Url:
    """An S3 Inventory configuration's destination as a job or the CLI names it: the folder
    that holds the report folders, ``s3://BUCKET/DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/``."""
    if not url.key.endswith("/") or url.key.count("/") < 2:
        raise BadArgument(f"{name} {url} is not an inventory configuration's destination",
                          hint="name the folder S3 writes the reports under: "
                               "s3://DEST-BUCKET/[DEST-PREFIX/]SOURCE-BUCKET/CONFIG-ID/")
    return url


def _renamed(name: str, body: dict) -> dict:
    """The job's keys with round 3's spellings replaced by the current ones, each with a
    warning (both spellings of one setting is an error)."""
    body = dict(body)
    for old, new in DEPRECATED_KEYS.items():
        if old not in body:
            continue
        if new in body:
            raise BadArgument(f"job {name!r}: {old} and {new} are the same setting", hint=f"keep only {new}")
        warnings.warn(f"job {name!r}: {old} is deprecated and will stop working in the next release; "
                      f"write {new} (the same setting)", FutureWarning, stacklevel=3)
        body[new] = body.pop(old)
    return body


