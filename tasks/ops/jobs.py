"""Archive jobs: what to archive each day, read from a YAML file rather than code.

A job names a source bucket, a prefix template with the date in it, a destination and how to
archive. ``plan`` turns a job and a date range (or a list of prefixes from on-call) into the
prefixes to archive; the Airflow DAG and any cron script call the same function. The file's
format is documented in docs/JOBS.md.
"""

from __future__ import annotations

import re
import string
import warnings
from dataclasses import dataclass, field, fields
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import BadArgument
from s3arch.core.options import SPEC_OPTIONS, archive_options, archive_spec, is_whole, job_options, whole
from s3arch.io.sources import WILDCARD, check_pattern, is_pattern
from s3arch.ops.presets import with_preset

_JOB_NAME = re.compile(r"[A-Za-z0-9_\-]{1,200}")


@dataclass(frozen=True)
class ArchiveJob:
    name: str
    source: S3Url  # bucket, and the key part before the template (usually empty)
    prefix_template: str  # e.g. "logs/{date:%Y/%m/%d}/"
    destination: S3Url
    min_age_days: int = 1
    aws_conn_id: str = "aws_default"
    # A connection per duty, so each runs with its role's least privilege (docs/SECURITY.md):
    # the restore DAG's, and the api-server's catalog page and the scrub's. None: aws_conn_id.
    restore_conn_id: str | None = None
    catalog_conn_id: str | None = None
    schedule: str = "@daily"
    start_date: date = date(2026, 1, 1)
    # Whether the scheduler creates the runs it missed (scheduler down for two nights: two
    # runs, each archiving its own day). Off by default: turning it on for a job whose
    # start_date is far back creates one run per day since then.
    catchup: bool = False
    pool: str = "s3_archive"
    execution_timeout_minutes: int = 360
    retries: int = 3
    retry_delay_seconds: int = 60
    allow_empty: bool = False
    description: str = ""
    # An S3 Inventory configuration's destination (s3://BUCKET/DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/):
    # days and their sizes are planned from its newest report, refused when older than
    # inventory_max_age_days (tasks/ops/inventory.py). Each day is still listed when archived.
    inventory: S3Url | None = None
    # A template with '*' wildcards (tasks/io/sources.py): the wildcard (its number, from 1)
    # whose values split a day into one archive each.
    split_by: int | None = None
    preset: str | None = None  # the AWS layout the template came from (tasks/ops/presets.py)
    # The job's value of every option of tasks/core/options.py that is a job key (storage_class,
    # codec, memory_budget, segments, lease_ttl, ...), checked, defaults filled in; each is
    # read as an attribute of the job (``job.codec``), so that a new option is one entry there.
    options: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        options = self.__dict__.get("options")  # not self.options: unpickling asks before it is set
        if options is None or name not in options:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        return options[name]

    def prefix_for(self, day: date) -> str:
        """The day's source name: its prefix, or its pattern (wildcards and all)."""
        return self.source.key + format_day(self.prefix_template, day)

    def date_of(self, prefix: str) -> date:
        """The date a prefix of this job stands for; rejects prefixes the job cannot produce.
        A split job's names have the split wildcard filled in (one account's day)."""
        match = self._name_pattern().fullmatch(prefix)
        if match is not None:
            spec = self._date_spec()
            try:
                day = datetime.strptime(match.group("date"), spec.replace("%-", "%")).date()
            except ValueError:
                day = None
            # strptime also accepts unpadded numbers; only the job's exact spelling is its prefix.
            if day is not None and format_day("{date:" + spec + "}", day) == match.group("date"):
                return day
        raise BadArgument(f"prefix {prefix!r} is not one that job {self.name!r} archives "
                          f"(template {self.source.key + self.prefix_template!r})",
                          hint=f"pass it exactly as the job makes it, e.g. {self.prefix_for(date(2026, 1, 31))!r}")

    def _date_spec(self) -> str:
        return next(spec for _, f, spec, _ in string.Formatter().parse(self.prefix_template) if f == "date") or ""

    def _name_pattern(self) -> re.Pattern:
        """A regex of the job's source names: the date captured, each '*' itself, the split
        wildcard (if any) a value."""
        out, wildcard = [re.escape(self.source.key)], 0
        for literal, field_name, _, _ in string.Formatter().parse(self.prefix_template):
            pieces = literal.split(WILDCARD)
            for i, piece in enumerate(pieces):
                if i:
                    wildcard += 1
                    out.append(r"[^/*]+" if wildcard == self.split_by else re.escape(WILDCARD))
                out.append(re.escape(piece))
            if field_name is not None:
                out.append("(?P<date>.+?)")
        return re.compile("".join(out), re.S)

    @property
    def days_are_folders(self) -> bool:
        """Whether each day is a folder that a Delimiter='/' listing of its parent shows."""
        return WILDCARD not in self.prefix_template and self.prefix_template.endswith("/")

    def parts_archived(self, day: date, keys) -> list[str]:
        """The names of ``day``'s archives: its one name, or a split job's parts whose
        manifests are among the destination ``keys`` (none: the day's name, so that a day
        whose archives vanished is still looked at)."""
        name = self.prefix_for(day)
        if not self.split_by:
            return [name]
        from s3arch.format.manifest import layout_for

        pieces = name.split(WILDCARD)
        before, after = WILDCARD.join(pieces[:self.split_by]), WILDCARD.join(pieces[self.split_by:])
        mark = "\0"  # no key holds it: where the part's value goes in the manifest key
        head, tail = layout_for(S3Url(self.source.bucket, before + mark + after), self.destination) \
            .manifest_key.split(mark)
        part = re.compile(re.escape(head) + r"([^/*]+)" + re.escape(tail))
        found = sorted(before + m.group(1) + after for key in keys if (m := part.fullmatch(key)))
        return found or [name]

    def split(self, control, names: list[str]) -> list[str]:
        """Each day's name as one name per value of the split wildcard (a LIST per level,
        once per level); a job without ``split_by``: the names as they are."""
        if not self.split_by:
            return names
        from s3arch.io.sources import expand

        whole = self.prefix_template.count(WILDCARD)  # fewer: an on-call name of one part already
        return [part for name in names
                for part in ([name] if name.count(WILDCARD) < whole else
                             expand(control, self.source.bucket, name, self.max_prefixes, split_at=self.split_by))]

    def split_archived(self, control, names: list[str]) -> list[str]:
        """``split`` from the archives instead of the sources (the restore DAG's plan): an
        archive's key mirrors its source's path under the destination (``layout_for``), so the
        split wildcard is expanded by LISTs of the destination. The sources may be deleted,
        and the restore role may not list them."""
        if not self.split_by:
            return names
        from s3arch.format.manifest import layout_for
        from s3arch.io.sources import expand

        base = layout_for(S3Url(self.source.bucket, ""), self.destination).stem.removesuffix("_bucket")
        whole = self.prefix_template.count(WILDCARD)
        return [part.removeprefix(base) for name in names
                for part in ([base + name] if name.count(WILDCARD) < whole else
                             expand(control, self.destination.bucket, base + name, self.max_prefixes,
                                    split_at=self.split_by))]

    def spec_for(self, prefix: str, *, overwrite: bool = False, dry_run: bool = False) -> ArchiveSpec:
        """The spec one archive task of this job runs (what the operators build from
        ``operator_args``)."""
        options = archive_options()
        values = {name: value for name, value in self.options.items() if name in options}
        # A job's segments >= 2 are segment tasks, sized by the DAG; one task's spec cuts only by processes.
        values.update(overwrite=overwrite, segments=1 if self.segments == 1 else None,
                      delete_versions=self.delete_versions and self.delete_source)
        spec = archive_spec(S3Url(self.source.bucket, prefix), self.destination, values)
        return spec.previewed() if dry_run else spec

    @property
    def spec_options(self) -> dict[str, Any]:
        """The job's encryption, Object Lock, owner and tag settings, as ArchiveSpec and the
        operators take them (same names)."""
        return {name: getattr(self, name) for name in SPEC_OPTIONS}

    @property
    def operator_args(self) -> dict:
        """What every archive step of this job takes, by the operators' parameter names
        (which are the job's keys and the CLI's flags): the DAG hands these to each operator."""
        steps = {o.name: self.options[o.name] for o in job_options() if o.operator == "step"}
        return {**steps, "processes": 1 if self.segments == 1 else self.processes}

    @property
    def segment_tasks(self) -> int:
        """Segment tasks per large prefix: 0 when the job archives every prefix in one task."""
        return self.segments if self.segments and self.segments >= 2 else 0

    # The spellings of round 3, for code that read them (one release, like the YAML keys).
    @property
    def lease_ttl_seconds(self) -> float:
        return self.lease_ttl

    @property
    def restore_poll_seconds(self) -> float | None:
        return self.poll_interval

    def conn_id_for(self, duty: str) -> str:
        """The Airflow connection of this job's ``duty``: "archive" (the archive DAG),
        "restore" (the restore DAG) or "catalog" (the catalog page and the scrub DAG)."""
        chosen = {"archive": None, "restore": self.restore_conn_id, "catalog": self.catalog_conn_id}[duty]
        return chosen or self.aws_conn_id

    @property
    def newest_allowed(self) -> date:
        """Dates younger than this may still be receiving objects."""
        return date.today() - timedelta(days=self.min_age_days)


def format_day(template: str, day: date) -> str:
    """``template`` with its ``{date:...}`` filled in; ``%-m`` and ``%-d`` are the month and
    the day without a leading zero (AWS Config's folders), on every platform."""
    out = []
    for literal, field_name, spec, _ in string.Formatter().parse(template):
        out.append(literal)
        if field_name is not None:
            spec = (spec or "%Y-%m-%d").replace("%-m", str(day.month)).replace("%-d", str(day.day))
            out.append(day.strftime(spec))
    return "".join(out)


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

