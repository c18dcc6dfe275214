"""The typed configuration at the front of the pipeline."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from s3arch.core.errors import BadArgument

STORAGE_CLASSES = ("GLACIER", "DEEP_ARCHIVE", "GLACIER_IR", "STANDARD_IA", "STANDARD")
CODECS = ("gzip", "zstd")
SSE_MODES = ("AES256", "aws:kms", "aws:kms:dsse")
DEFAULT_LEVEL = {"gzip": 1, "zstd": 3}
LEVEL_RANGE = {"gzip": (0, 9), "zstd": (1, 19)}
MiB = 1 << 20
GiB = 1 << 30
# One default per setting, whoever runs the engine (CLI, job YAML, operator).
DEFAULT_CONCURRENCY = 128  # GETs in flight
DEFAULT_LEASE_TTL = 180.0  # seconds
DEFAULT_SEGMENT_MIN_OBJECTS = 50_000
DEFAULT_SEGMENT_MIN_BYTES = 4 * GiB
DEFAULT_INVENTORY_MAX_AGE_DAYS = 2.0  # a daily S3 Inventory report is at most a day old; a weekly one needs 8

MIN_LEASE_TTL = 10.0  # the least a user may set (tests of the lease go lower through ArchiveSpec)
# Seconds a request may stay throttled (503 SlowDown) before the run gives up with exit 3:
# long enough to outlast S3 re-partitioning a prefix, short enough to free the worker slot.
DEFAULT_THROTTLE_BUDGET = 900.0
THROTTLE_BUDGET_ENV = "S3ARCH_THROTTLE_BUDGET"  # the default of --throttle-budget


def check_lease_ttl(seconds: float, name: str = "--lease-ttl") -> float:
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or seconds < MIN_LEASE_TTL:
        raise BadArgument(f"{name} {seconds!r} must be a number of seconds, at least {MIN_LEASE_TTL:g}",
                          hint="the lease is renewed every sixth of it; 180 (the default) suits most runs")
    return float(seconds)


def check_throttle_budget(seconds, name: str = "--throttle-budget") -> float:
    """``seconds`` as a number of seconds > 0 (a number, or its text from a flag, a template
    or the environment), else BadArgument naming ``name``."""
    try:
        value = float(seconds) if isinstance(seconds, (str, int, float)) and not isinstance(seconds, bool) else None
    except ValueError:
        value = None
    if value is None or not 0 < value < math.inf:
        raise BadArgument(f"{name} {seconds!r} must be a number of seconds > 0",
                          hint=f"how long a request may stay throttled before the run gives up (exit 3); "
                               f"{DEFAULT_THROTTLE_BUDGET:g} (the default) outlasts S3 re-partitioning a prefix")
    return value


def resolve_throttle_budget(seconds=None) -> float:
    """The throttle budget a run honours: ``seconds`` (--throttle-budget, a job's or an
    operator's ``throttle_budget``) if given, else ``S3ARCH_THROTTLE_BUDGET``, else 900."""
    if seconds is not None:
        return check_throttle_budget(seconds)
    env = os.environ.get(THROTTLE_BUDGET_ENV)
    return check_throttle_budget(env, THROTTLE_BUDGET_ENV) if env else DEFAULT_THROTTLE_BUDGET


def available_cpus() -> int:
    """CPUs this process may actually use: its affinity mask, and the cgroup CPU quota a
    container runs under (a 2-CPU pod on a 64-core node gets 2, not 64)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = _cgroup_cpu_quota()
    if quota is not None:
        cpus = min(cpus, max(1, int(quota + 0.999)))
    return max(1, cpus)


def default_processes(endpoint_url: str | None) -> int:
    """``--processes`` when not given: the CPUs this process may use, or half of them when the
    S3 endpoint is this machine's loopback, where the server spends the same CPUs (the demo,
    the bench: two segment workers on two cores shared with MinIO ran the 200,000-object set
    1.25x slower than one process, bench/results/latest.json). The budget may allow fewer."""
    cpus = available_cpus()
    return max(1, cpus // 2) if endpoint_on_loopback(endpoint_url) else cpus


def endpoint_on_loopback(endpoint_url: str | None) -> bool:
    """Whether ``endpoint_url`` names this machine (localhost, 127.0.0.0/8, ::1): the S3
    server then shares this machine's CPUs. AWS's endpoints (None) never do."""
    import ipaddress
    from urllib.parse import urlsplit

    host = urlsplit(endpoint_url).hostname if endpoint_url else None
    if host is None:
        return False
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cgroup_cpu_quota(root: str = "/sys/fs/cgroup") -> float | None:
    """CPUs' worth of quota from cgroup v2 (cpu.max) or v1 (cfs quota/period), if limited."""
    try:
        with open(f"{root}/cpu.max") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open(f"{root}/cpu/cpu.cfs_quota_us") as f:
            quota_us = int(f.read())
        with open(f"{root}/cpu/cpu.cfs_period_us") as f:
            period_us = int(f.read())
        return None if quota_us <= 0 else quota_us / period_us
    except (OSError, ValueError):
        return None


_SIZE_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1 << 10, "m": 10**6, "mb": 10**6,
               "mib": MiB, "g": 10**9, "gb": 10**9, "gib": GiB}


def parse_size(text: str | int) -> int:
    """'256MiB' -> 268435456. Accepts B, KB/KiB, MB/MiB, GB/GiB."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise BadArgument(f"cannot read size {text!r}", hint="write it like 256MiB, 1GiB or 500MB")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class S3Url:
    bucket: str
    key: str = ""

    @classmethod
    def parse(cls, url: str) -> "S3Url":
        m = re.fullmatch(r"s3://([^/]+)/?(.*)", url or "", flags=re.S)
        if not m:
            raise BadArgument(f"{url!r} is not an S3 URL", hint="write it as s3://BUCKET/PREFIX/")
        bucket = m.group(1)
        if not re.fullmatch(r"[a-z0-9][a-z0-9.\-_]{1,254}", bucket):
            raise BadArgument(f"{bucket!r} is not a valid bucket name",
                              hint="bucket names are 3-63 lowercase letters, digits, dots, hyphens")
        return cls(bucket, m.group(2))

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    @property
    def prefixes(self) -> tuple[str, ...]:
        """The prefixes listed for this URL: its key (a pattern's are in tasks/io/sources.py)."""
        return (self.key,)


@dataclass(frozen=True)
class WriteOptions:
    """How a run writes: the archive's storage class, server-side encryption on every object
    it writes and Object Lock on what a commit makes visible (``ArchiveSpec``'s fields of the
    same names, validated there). What the storage helpers take, not the whole spec."""

    storage_class: str
    sse: str | None = None
    sse_kms_key_id: str | None = None
    sse_bucket_key: bool = False
    object_lock: str | None = None
    retain_days: int | None = None
    legal_hold: bool = False

    @property
    def encryption_args(self) -> dict:
        """Server-side encryption for every object the run writes (archive, manifest, temporaries)."""
        args: dict = {}
        if self.sse:
            args["ServerSideEncryption"] = self.sse
        if self.sse_kms_key_id:
            args["SSEKMSKeyId"] = self.sse_kms_key_id
        if self.sse_bucket_key:
            args["BucketKeyEnabled"] = True
        return args

    @property
    def locks(self) -> bool:
        return self.object_lock is not None or self.legal_hold

    def lock_args(self) -> dict:
        """Object Lock for the objects a commit makes visible (archive, manifest and its index),
        retained ``retain_days`` from now; given when each is created (CreateMultipartUpload,
        PutObject), so no moment exists in which one of them is visible and unlocked."""
        start = datetime.now(timezone.utc)
        args: dict = {}
        if self.object_lock:
            assert self.retain_days is not None  # ArchiveSpec.__post_init__: they go together
            args["ObjectLockMode"] = self.object_lock
            args["ObjectLockRetainUntilDate"] = (start + timedelta(days=self.retain_days)).replace(microsecond=0)
        if self.legal_hold:
            args["ObjectLockLegalHoldStatus"] = "ON"
        return args


@dataclass(frozen=True)
class ArchiveSpec:
    """What to archive, where to, and how. The destination keys derive from (source bucket,
    source prefix) alone, so every re-run of the same spec finds what an earlier one left."""

    source: S3Url
    destination: S3Url
    storage_class: str = "GLACIER"
    codec: str = "gzip"
    level: int | None = None
    memory_budget: int = 256 * MiB
    concurrency: int = DEFAULT_CONCURRENCY
    overwrite: bool = False
    dry_run: bool = False
    delete_source: bool = False
    sse: str | None = None
    sse_kms_key_id: str | None = None
    sse_bucket_key: bool = False  # S3 Bucket Keys: one KMS data key per bucket, not per object
    # Object Lock on what a run commits (archive, manifest, index): GOVERNANCE or COMPLIANCE
    # retention for retain_days from the run's start, and/or a legal hold.
    object_lock: str | None = None
    retain_days: int | None = None
    legal_hold: bool = False
    # The account that must own the source and destination buckets (ExpectedBucketOwner on
    # every request): a bucket name taken over by another account fails instead of receiving data.
    expected_owner: str | None = None
    block_size: int = MiB
    min_part_size: int = 0  # 0: derived from the memory budget (5-8 MiB)
    large_object_chunk: int = 8 * MiB
    stall_timeout: float = 60.0  # seconds a GET may go without receiving a byte
    compress_threads: int = field(default_factory=lambda: available_cpus())
    delete_versions: bool = False  # versioned source: delete the archived versions, not just hide them
    lease_ttl: float = DEFAULT_LEASE_TTL  # seconds without renewal after which another run may take the prefix
    part_growth_every: int = 1000  # parts per doubling of the part size while the total is unknown
    prices: dict | None = None  # overrides of tasks/core/cost.py's price table: {CLASS: {field: value}}
    # Segments (tasks/produce/segments/): a prefix with at least segment_min_objects objects or
    # segment_min_bytes bytes is cut into segments, produced by up to ``processes`` local
    # worker processes and assembled; smaller ones are one pipeline in this process.
    # ``processes``: the CLI's default is the CPUs; the Airflow operators pass 1 (one task,
    # one process) unless the job asks for more.
    processes: int = field(default_factory=lambda: available_cpus())
    # 0: one segment per process. 1: never cut (one pipeline, whatever ``processes`` says).
    # N >= 2: exactly N segments, without sizing the prefix: callers that honour the
    # thresholds (the CLI's --segments, the archive DAG) size it first and pass N only for
    # a large prefix.
    segments: int = 0
    segment_min_objects: int = DEFAULT_SEGMENT_MIN_OBJECTS
    segment_min_bytes: int = DEFAULT_SEGMENT_MIN_BYTES
    # A tagged object whose tags may not be read fails the run (the archive would lose them),
    # unless this is set: then it is archived without them and its record says so.
    without_tags: bool = False
    # Seconds a GET or a control-plane call may stay throttled before the run fails (exit 3);
    # read from S3ARCH_THROTTLE_BUDGET when the spec is made, so worker processes get the same.
    throttle_budget: float = field(default_factory=resolve_throttle_budget)
    # A source pattern's wildcards (tasks/io/sources.py) may expand to at most this many prefixes.
    max_prefixes: int = 10_000

    def __post_init__(self):
        if self.storage_class not in STORAGE_CLASSES:
            raise BadArgument(f"unknown storage class {self.storage_class!r}",
                              hint=f"--storage-class takes one of {', '.join(STORAGE_CLASSES)}")
        if self.codec not in CODECS:
            raise BadArgument(f"unknown codec {self.codec!r}", hint="--codec takes gzip or zstd")
        lo, hi = LEVEL_RANGE[self.codec]
        if self.level is not None and not lo <= self.level <= hi:
            raise BadArgument(f"level {self.level} is out of range for {self.codec}",
                              hint=f"--level takes {lo}..{hi} with --codec {self.codec}")
        if self.memory_budget < 48 * MiB:
            raise BadArgument("memory budget below 48MiB (the smallest that holds 5 MiB parts of the "
                              "archive and manifest, the GETs and the compression blocks)",
                              hint="--memory-budget 64MiB or more")
        if not 1 <= self.concurrency <= 1024:
            raise BadArgument(f"concurrency {self.concurrency} out of range",
                              hint="--concurrency takes 1..1024")
        if self.sse not in (None, *SSE_MODES):
            raise BadArgument(f"unknown SSE {self.sse!r}", hint=f"--sse takes {', '.join(SSE_MODES)}")
        if (self.sse_kms_key_id or self.sse_bucket_key) and self.sse not in ("aws:kms", "aws:kms:dsse"):
            raise BadArgument("--sse-kms-key-id and --sse-bucket-key need --sse aws:kms or aws:kms:dsse")
        if self.object_lock not in (None, "GOVERNANCE", "COMPLIANCE"):
            raise BadArgument(f"unknown Object Lock mode {self.object_lock!r}",
                              hint="--object-lock takes GOVERNANCE or COMPLIANCE")
        if (self.object_lock is None) != (self.retain_days is None):
            raise BadArgument("--object-lock and --retain-days go together",
                              hint="e.g. --object-lock COMPLIANCE --retain-days 2555 (seven years)")
        if self.retain_days is not None and not 1 <= self.retain_days <= 36_500:
            raise BadArgument(f"--retain-days {self.retain_days} is out of range", hint="--retain-days takes 1..36500")
        if self.expected_owner is not None and not re.fullmatch(r"\d{12}|self", self.expected_owner):
            raise BadArgument(f"--expected-owner {self.expected_owner!r} is not an AWS account id",
                              hint="give the 12-digit account id, or `self` for the caller's own account")
        if not self.min_part_size:
            # S3's 5 MiB minimum for small budgets, where two parts in flight weigh most.
            object.__setattr__(self, "min_part_size", max(5 * MiB, min(8 * MiB, self.memory_budget // 16)))
        if self.delete_source and self.dry_run:
            raise BadArgument("--delete-source and --dry-run contradict each other")
        if self.delete_versions and not self.delete_source:
            raise BadArgument("--delete-versions needs --delete-source")
        if self.compress_threads < 1:
            raise BadArgument("compression threads must be at least 1")
        if not 1 <= self.processes <= 64:
            raise BadArgument(f"--processes {self.processes} is out of range", hint="--processes takes 1..64")
        if not 0 <= self.segments <= 1000:  # each segment needs its own run of part numbers
            raise BadArgument(f"--segments {self.segments} is out of range", hint="--segments takes 1..1000")
        if self.segments == 1:
            # One segment is no segment: one pipeline, the same meaning as a job's `segments: 1`.
            object.__setattr__(self, "segments", 0)
            object.__setattr__(self, "processes", 1)
        if self.max_prefixes < 1:
            raise BadArgument("--max-prefixes must be at least 1")
        if self.segment_min_objects < 0 or self.segment_min_bytes < 0:
            raise BadArgument("--segment-min-objects and --segment-min-bytes must be >= 0")
        object.__setattr__(self, "throttle_budget", check_throttle_budget(self.throttle_budget))
        from s3arch.core.cost import prices_with

        prices_with(self.prices)  # a mistake in the overrides is reported now, not after the run

    def previewed(self) -> "ArchiveSpec":
        """This spec as a dry run: it lists and estimates, and deletes nothing. The one place
        that rule lives, for every caller that turns a configured job into a dry run."""
        return replace(self, dry_run=True, delete_source=False, delete_versions=False)

    @property
    def write_options(self) -> WriteOptions:
        return WriteOptions(self.storage_class, self.sse, self.sse_kms_key_id, self.sse_bucket_key,
                            self.object_lock, self.retain_days, self.legal_hold)

    @property
    def effective_level(self) -> int:
        return DEFAULT_LEVEL[self.codec] if self.level is None else self.level

    @property
    def extension(self) -> str:
        return ".tar.gz" if self.codec == "gzip" else ".tar.zst"
