"""The options, each declared once: its name, type, default, help and check.

An option's name is the job key, the operator's option (or parameter) and, with ``-`` for
``_``, the CLI flag. ``OPTIONS`` is the one table the CLI's flags (tasks/cli/), the job file's
keys (tasks/ops/jobs.py), the keys of the archive and restore operators' ``options`` (and the
checks of their values), the archive and restore DAGs' trigger forms and the docs' tables
(``python -m devtools.option_tables``) are made from; tests check the operators against it. A
new option is one entry here (and the code that uses its value).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from s3arch.core.config import (CODECS, DEFAULT_CONCURRENCY, DEFAULT_INVENTORY_MAX_AGE_DAYS, DEFAULT_LEASE_TTL,
                                DEFAULT_SEGMENT_MIN_OBJECTS, SSE_MODES, STORAGE_CLASSES, ArchiveSpec, S3Url,
                                check_lease_ttl, check_throttle_budget, parse_size)
from s3arch.core.errors import BadArgument

# A job value's check: (value, what to call it in an error, e.g. "job 'logs': concurrency")
# -> the value the job holds. Raises BadArgument saying what to write instead.
Check = Callable[[Any, str], Any]

_SAME = object()  # a job's default that is the CLI's

TIERS = ("Expedited", "Standard", "Bulk")  # S3's restore tiers, fastest first


@dataclass(frozen=True)
class Form:
    """An option as a field of a DAG's trigger form (an Airflow Param whose default, type and
    choices are the option's): the restore DAG's for a restore option, the archive DAG's for an
    archive step's. Its ``title`` there (" (optional)" is added where the field may stay empty),
    the form's ``description`` (the DAG's limits are not the CLI's, docs/RESTORE.md), and
    JSON-schema ``bounds`` such as ``minimum``."""

    title: str
    description: str
    bounds: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Option:
    """One setting, as every surface names it.

    ``cli``: the commands whose flag it is ("connection": every command, before or after it);
    ``help_on``: another help on one of them; ``flag_type``: argparse's ``type`` (None: text;
    a bool option is a switch).
    ``job``: "key" (a job key), "param" (a trigger param of the run) or None.
    ``operator``: which operators take it: "step" (a key of every archive step's ``options``,
    from the job's ``operator_args``), "deleting" (a parameter of the archive and assemble
    steps), "segments" (of the segment steps), "restore" (a key of the restore operator's
    ``options``), or None. Each operator templates its whole ``options``, so every option it
    takes there. ``label`` and ``doc_default`` are the docs' words for it. ``spelled``: the
    flag, where it is not the name's; ``nargs``: argparse's; ``one_of``: a group of flags of
    which one at most is given (``required``: one must be); ``form``: a field of the trigger
    form of the DAG whose operator takes it (the archive DAG's hands it to every step's
    ``options``)."""

    name: str
    label: str
    help: str | None = None
    default: Any = None
    job_default: Any = _SAME
    doc_default: str = "none"
    flag_type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    check: Check | None = None
    cli: tuple[str, ...] = ()
    help_on: Mapping[str, str] = field(default_factory=dict)
    job: str | None = "key"
    operator: str | None = "step"
    spelled: str | None = None
    nargs: str | None = None
    one_of: str | None = None
    required: bool = False
    form: Form | None = None

    @property
    def flag(self) -> str:
        return self.spelled or "--" + self.name.replace("_", "-")

    @property
    def switch(self) -> bool:
        return self.default is False

    def job_value(self, value: Any, what: str) -> Any:
        """``value`` as a job holds it, checked; None stands for "not set" where that is the default."""
        if value is None and self.default_for_job is None:
            return None
        if self.choices is not None and value not in self.choices:
            listed = " or ".join(self.choices) if len(self.choices) == 2 else "one of " + ", ".join(self.choices)
            raise BadArgument(f"{what} {value!r} is not {listed}")
        return self.check(value, what) if self.check else value

    @property
    def default_for_job(self) -> Any:
        default = self.default if self.job_default is _SAME else self.job_default
        return self.check(default, self.name) if self.check and default is not None else default


def is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def whole(low: int, high: int | None = None, hint: str | None = None) -> Check:
    """A check of a whole number from ``low`` (to ``high``)."""
    def check(value: Any, what: str) -> int:
        if not is_whole(value) or value < low or (high is not None and value > high):
            bounds = f">= {low}" if high is None else f"from {low} to {high}"
            raise BadArgument(f"{what} must be a whole number {bounds}", hint=hint)
        return value
    return check


def seconds_above_zero(value: Any, what: str) -> float:
    if not isinstance(value, (int, float)) or value <= 0:
        raise BadArgument(f"{what} must be a number of seconds > 0")
    return value


def _report_age(value: Any, what: str) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise BadArgument(f"{what} must be a number of days > 0",
                          hint=f"{DEFAULT_INVENTORY_MAX_AGE_DAYS:g} (the default) suits a daily inventory, "
                               "8 a weekly one")
    return value


def whole_days(value: Any, what: str) -> int:
    """Whole days from ``2``, ``"2d"`` or ``"36h"`` (hours round up to days)."""
    match = re.fullmatch(r"\s*(\d+)\s*([dh]?)\s*", str(value)) if not isinstance(value, bool) else None
    if match is None:
        raise BadArgument(f"{what} must be a number of days such as 2d (or hours, 36h), not {value!r}")
    number = int(match.group(1))
    return -(-number // 24) if match.group(2) == "h" else number


def _size(value: Any, what: str) -> int:
    return parse_size(value)


def _account(value: Any, what: str) -> str:
    return str(value)  # YAML reads 123456789012 as a number


OPTIONS: tuple[Option, ...] = (
    Option("storage_class", "storage class of the archive", default="GLACIER", doc_default="GLACIER",
           choices=STORAGE_CLASSES, cli=("archive",)),
    Option("codec", "compression", default="gzip", doc_default="gzip", choices=CODECS, cli=("archive",)),
    Option("level", "compression level", flag_type=int, doc_default="gzip 1, zstd 3", cli=("archive",),
           help="gzip 0-9 (ISA-L for 0-3, zlib-ng for 4-9), default 1; zstd 1-19, default 3"),
    Option("memory_budget", "bound on buffered bytes", default="256MiB", doc_default="256MiB", check=_size,
           cli=("archive", "extract"), help="bound on buffered bytes (default 256MiB)"),
    Option("concurrency", "GETs in flight", default=DEFAULT_CONCURRENCY, flag_type=int,
           doc_default=str(DEFAULT_CONCURRENCY), check=whole(1), cli=("archive",),
           help=f"GETs in flight (default {DEFAULT_CONCURRENCY})"),
    Option("threads", "compression threads", flag_type=int, doc_default="the CPUs", check=whole(1),
           cli=("archive",),
           help="compression threads (default: the CPUs this process may use, affinity and "
                "cgroup quota included; capped so their blocks fit a quarter of the budget)"),
    Option("processes", "local worker processes", job_default=1, flag_type=int,
           doc_default="**1 in a task**; on the CLI as many as `memory_budget` holds (1 at 256MiB), up to the CPUs",
           check=whole(1, 64, hint="1 (the default) keeps each archive task one process"), cli=("archive",),
           help="local worker processes that produce a large prefix's segments (default: as many as "
                "--memory-budget holds at 108 MiB each beyond 48 MiB: 1 at the default 256MiB, 4 at 480MiB; at "
                "most the CPUs this process may use, half of them on a loopback endpoint; 1: never segments)"),
    Option("segments", "segments of a large prefix", flag_type=int,
           doc_default="one per process; `1` never cuts", operator="segments", cli=("archive",),
           check=whole(1, 1000, hint="1 archives every prefix in one task; 2 or more cuts a large prefix into "
                                     "as many segment tasks"),
           help="a prefix of at least --segment-min-objects objects or --segment-min-bytes is cut into "
                "this many segments, assembled into one archive; smaller ones stay one pipeline; "
                "1 never cuts (default: one segment per process)"),
    Option("segment_min_objects", "objects from which a prefix is large", default=DEFAULT_SEGMENT_MIN_OBJECTS,
           flag_type=int, doc_default=str(DEFAULT_SEGMENT_MIN_OBJECTS), check=whole(0), cli=("archive",),
           help=f"objects from which a prefix is cut into segments (default {DEFAULT_SEGMENT_MIN_OBJECTS})"),
    Option("segment_min_bytes", "bytes from which a prefix is large", default="4GiB", doc_default="4GiB",
           check=_size, cli=("archive",), help="bytes from which a prefix is cut into segments (default 4GiB)"),
    Option("lease_ttl", "lease TTL (seconds)", default=DEFAULT_LEASE_TTL, flag_type=float,
           doc_default=f"{DEFAULT_LEASE_TTL:g}", check=check_lease_ttl, cli=("archive",),
           help=f"seconds the prefix's lease outlives its last renewal: how long a run on another host "
                f"waits for the prefix of a run that died (default {DEFAULT_LEASE_TTL:g}, at least 10)"),
    Option("max_prefixes", "prefixes a pattern may expand to", default=10_000, flag_type=int,
           doc_default="10000", check=whole(1), cli=("archive",),
           help="a source with '*' wildcards may expand to at most this many prefixes (default 10000)"),
    Option("overwrite", "re-archive a done prefix", default=False, doc_default="off", job="param",
           cli=("archive",), help="re-archive a prefix that is done",
           form=Form("Overwrite", "Re-archive prefixes that already have a complete archive.")),
    Option("dry_run", "dry run", default=False, doc_default="off", job="param", cli=("archive",),
           help="list, count and estimate; write nothing",
           form=Form("Dry run", "List and estimate only; write nothing.")),
    Option("delete_source", "delete the archived sources", default=False, doc_default="off",
           operator="deleting", cli=("archive",),
           help="after the archive verified, delete sources whose ETag still matches; on an "
                "archived prefix, finish a deletion an earlier run did not"),
    Option("delete_versions", "versions of deleted sources", default=False, doc_default="off",
           operator="deleting", cli=("archive", "delete-sources"),
           help="with --delete-source on a versioned bucket: delete the archived versions "
                "(frees the space) instead of adding delete markers",
           help_on={"delete-sources": "versioned bucket: delete the archived versions instead of adding "
                                      "delete markers"}),
    Option("without_tags", "unreadable tags", default=False, doc_default="off", cli=("archive",),
           help="archive tagged objects whose tags may not be read (s3:GetObjectTagging denied) "
                "without them, recording which, instead of failing"),
    Option("sse", "encryption", choices=SSE_MODES, cli=("archive",),
           help="server-side encryption of the archive, manifest and index (aws:kms:dsse: two layers)"),
    Option("sse_kms_key_id", "encryption: KMS key", doc_default="aws/s3", cli=("archive",),
           help="with --sse aws:kms or aws:kms:dsse: the KMS key (default: aws/s3)"),
    Option("sse_bucket_key", "encryption: S3 Bucket Key", default=False, doc_default="off", cli=("archive",),
           help="with a KMS --sse: use an S3 Bucket Key (fewer KMS requests, lower KMS cost)"),
    Option("object_lock", "Object Lock mode", choices=("GOVERNANCE", "COMPLIANCE"), cli=("archive",),
           help="put the archive, manifest and index under Object Lock retention in this mode "
                "(the destination bucket must have Object Lock enabled); needs --retain-days"),
    Option("retain_days", "Object Lock: days of retention", flag_type=int, cli=("archive",),
           help="with --object-lock: days of retention, counted from when each object is written"),
    Option("legal_hold", "Object Lock: legal hold", default=False, doc_default="off", cli=("archive",),
           help="put the archive, manifest and index under a legal hold (until lifted)"),
    Option("expected_owner", "bucket owner", metavar="ACCOUNT", check=_account, cli=("connection",),
           help="the AWS account (12 digits, or `self` for the caller's) that must own every "
                "bucket used: sent as ExpectedBucketOwner on every request, so a bucket another "
                "account owns fails (exit 2) instead of being read or written"),
    Option("throttle_budget", "throttle budget (seconds)", metavar="SECONDS",
           doc_default="`S3ARCH_THROTTLE_BUDGET`, else 900", check=check_throttle_budget, cli=("connection",),
           help="how long a request may stay throttled (503 SlowDown, waited out with backoff) "
                "before the run gives up with exit 3 (default: S3ARCH_THROTTLE_BUDGET, else 900)"),
    Option("prices", "prices of the cost estimate", doc_default="built-in table"),
    Option("target", "restore target", spelled="--to", metavar="TO", job=None, operator="restore",
           cli=("extract",), one_of="where", required=True, help="s3://BUCKET/PREFIX/ to write the objects under",
           form=Form("Target", "s3://BUCKET/PREFIX/ to restore under (each object keeps its full key below it). "
                               "Empty: back to the original bucket and keys.")),
    Option("to_dir", "local directory", flag_type=Path, job=None, operator=None, cli=("extract",), one_of="where",
           required=True, help="local directory to write the objects into"),
    Option("keys", "keys to restore", nargs="+", metavar="KEY", job=None, operator="restore",
           cli=("extract",), one_of="which", help="only these keys (exact, full keys)",
           form=Form("Keys", "Only these objects (full keys). Empty: every object of each prefix.")),
    Option("from_file", "file of keys", flag_type=Path, job=None, operator=None, cli=("extract",), one_of="which",
           help="only the keys listed in this file, one per line"),
    Option("glob", "keys matching a pattern", job=None, operator="restore", cli=("extract",),
           one_of="which", help="only keys matching this pattern (fnmatch, on the full key)",
           form=Form("Glob", "Only keys matching this pattern, e.g. */app-7*.log. Empty: no filter.")),
    Option("original_keys", "original keys", default=False, job=None, operator=None, cli=("extract",),
           help="keep each object's full original key under the target (default: the key relative to the "
                "archived prefix)"),
    Option("overwrite", "replace objects at the target", default=False, job=None, operator="restore",
           cli=("extract",), help="replace existing objects with other content",
           form=Form("Overwrite", "Replace objects that exist at the target with other content.")),
    Option("metadata_file", "metadata file", flag_type=Path, job=None, operator=None, cli=("extract",),
           help="with --to-dir: write each object's key, attributes, metadata and tags here (JSON Lines, one "
                "line per object; docs/FORMAT.md)"),
    Option("tier", "retrieval tier", default="Standard", choices=TIERS, job=None, operator="restore",
           cli=("restore",),
           help="GLACIER: Expedited 1-5 min, Standard 3-5 h, Bulk 5-12 h; DEEP_ARCHIVE: Standard within 12 h, "
                "Bulk within 48 h (default Standard)",
           form=Form("Retrieval tier", "GLACIER: Expedited 1-5 min, Standard 3-5 h, Bulk 5-12 h. DEEP_ARCHIVE: "
                                       "Standard within 12 h, Bulk within 48 h (Expedited falls back to Standard).")),
    Option("fallback_tier", "fallback tier", choices=TIERS[1:], job=None, operator=None, cli=("restore",),
           help="tier to use if Expedited is unavailable (or the class has none)"),
    Option("days", "days restored", default=7, flag_type=int, job=None, operator="restore",
           cli=("restore",), help="how long the restored copy stays (default 7)",
           form=Form("Days restored", "How long S3 keeps the restored copy of each archive.",
                     {"minimum": 1, "maximum": 365})),
    Option("wait", "wait for the restore", default=False, job=None, operator=None, cli=("restore",),
           help="poll until the archive is readable"),
    Option("wait_timeout", "restore wait limit (seconds)", default=48 * 3600, flag_type=float, doc_default="48 h",
           job=None, operator="restore", cli=("restore",),
           help="with --wait: stop waiting after this many seconds (default 48 h; exit 3, the restore "
                "goes on in S3: run the same command again to keep waiting)"),
    Option("poll_interval", "restore poll (seconds)", flag_type=float, doc_default="by tier",
           check=seconds_above_zero, operator="restore", cli=("restore",),
           help="with --wait: seconds between polls (default by tier: 30 Expedited, 300 Standard, 900 Bulk)"),
    Option("inventory_max_age_days", "oldest S3 Inventory report a plan takes (days)",
           job_default=DEFAULT_INVENTORY_MAX_AGE_DAYS, flag_type=float,
           doc_default=f"{DEFAULT_INVENTORY_MAX_AGE_DAYS:g}",
           check=_report_age, operator=None, cli=("plan",), help="refuse an older report (default: the job's, 2)"),
    Option("late_window", "late window (days re-checked by each nightly run: `2d`, `36h`, or days)", default=0,
           doc_default="0", check=whole_days, operator=None, cli=("archive",), metavar="DAYS",
           help="also re-check the DAYS days before the source's date (2d, or hours: 36h) and archive "
                "objects that landed there late as each day's next part, as a job's late_window "
                "(--json: one line per day)"),
)


# Encryption, Object Lock, owner and tags: what round 3 passed as one ``spec_options``
# (still a job's property, and an operator parameter for one release).
SPEC_OPTIONS = ("without_tags", "sse", "sse_kms_key_id", "sse_bucket_key", "object_lock", "retain_days",
                "legal_hold", "expected_owner")


# Archive options that are no field of ArchiveSpec: they choose which days run, not how one is
# archived. And the options whose field is named otherwise.
NOT_IN_SPEC = ("late_window",)
SPEC_FIELD_OF = {"threads": "compress_threads"}


def archive_options() -> dict[str, Option]:
    """The options an archive takes, by name: its flags, the connection's, and what the
    archive steps take from a job."""
    return {o.name: o for o in OPTIONS
            if {"archive", "connection"} & set(o.cli) or o.operator in ("step", "deleting", "segments")}


def as_switch(value: Any) -> bool:
    """A switch's value; a template field renders it as the text 'True' or 'False'."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def archive_spec(source: S3Url, destination: S3Url, values: Mapping[str, Any]) -> ArchiveSpec:
    """The one way an archive's spec is made, by the CLI, a job and the operators: ``values``
    by the option table's names, each checked and converted as its option says (sizes
    parsed, switches read from rendered templates); None leaves the engine's default. An
    option that reaches no ArchiveSpec field is a TypeError: a new option cannot be lost on
    its way to the engine."""
    known = archive_options()
    fields = {f.name for f in dataclasses.fields(ArchiveSpec)}
    given: dict[str, Any] = {}
    for name, value in values.items():
        option = known.get(name)
        if option is None:
            raise TypeError(f"{name!r} is no archive option of tasks/core/options.py")
        if value is None or name in NOT_IN_SPEC:
            continue
        spec_field = SPEC_FIELD_OF.get(name, name)
        if spec_field not in fields:
            raise TypeError(f"the archive option {name!r} reaches no ArchiveSpec field: add the field, "
                            "or list the option in options.NOT_IN_SPEC")
        if option.switch:
            value = as_switch(value)
        elif option.check:
            value = option.check(value, option.flag)
        given[spec_field] = value
    return ArchiveSpec(source=source, destination=destination, **given)


def options_for(command: str) -> tuple[Option, ...]:
    """The options that are flags of ``command`` ("connection": of every command)."""
    return tuple(o for o in OPTIONS if command in o.cli)


def job_options() -> tuple[Option, ...]:
    return tuple(o for o in OPTIONS if o.job == "key")


def step_options() -> tuple[str, ...]:
    """The keys of every archive step's ``options`` (from the job's ``operator_args``)."""
    return tuple(o.name for o in OPTIONS if o.operator == "step")


def form_options(dag: str = "restore") -> tuple[Option, ...]:
    """The fields of a DAG's trigger form: the restore DAG's (the default), each an option of the
    restore operator, or the archive DAG's (``"archive"``), each an option of its steps."""
    return tuple(o for o in OPTIONS if o.form is not None and (o.operator == "restore") == (dag == "restore"))
