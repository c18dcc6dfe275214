"""The archive job: one job of the jobs file (tasks/ops/jobs.py) as the engine, the CLI and the DAGs
see it: its source names per day (``prefix_for``, ``date_of``), its split into one archive per value
of a wildcard (``split``, ``parts_archived``), and the spec each of its archive tasks runs.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import BadArgument
from s3arch.core.options import SPEC_OPTIONS, archive_options, archive_spec, job_options
from s3arch.io.sources import WILDCARD

if TYPE_CHECKING:
    from s3arch.io.store import Store


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
    # inventory_max_age_days (tasks/ops/inventory/). Each day is still listed when archived.
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

    def split(self, store: Store, names: list[str]) -> list[str]:
        """Each day's name as one name per value of the split wildcard (a LIST per level,
        once per level); a job without ``split_by``: the names as they are."""
        if not self.split_by:
            return names
        from s3arch.io.sources import expand

        whole = self.prefix_template.count(WILDCARD)  # fewer: an on-call name of one part already
        return [part for name in names
                for part in ([name] if name.count(WILDCARD) < whole else
                             expand(store, self.source.bucket, name, self.max_prefixes,
                                    split_at=self.split_by))]

    def split_archived(self, store: "Store", names: list[str]) -> list[str]:
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
                             expand(store, self.destination.bucket, base + name, self.max_prefixes,
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
        """What every archive step of this job takes as its ``options``, by the option table's
        names (which are the job's keys and the CLI's flags): the DAG hands these to each step."""
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
