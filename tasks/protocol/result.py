"""What one run of the commit protocol (tasks/protocol/commit.py) did with its prefix, as the
CLI prints it and an Airflow task's row reports it; ``State`` is where the run left the
prefix's destination (the four states of commit.py's docstring)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum

from s3arch.core.outcome import Outcome


class State(str, Enum):
    ABSENT = "absent"
    PRODUCED = "produced"
    COMMITTED = "committed"
    SOURCES_DELETED = "sources_deleted"


@dataclass
class ArchiveResult:
    status: Outcome
    source: str
    archive: str | None
    manifest: str | None
    state: str = State.ABSENT.value
    objects: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    tar_bytes: int = 0
    seconds: float = 0.0
    storage_class: str = ""
    codec: str = ""
    deleted: int = 0
    deletion: dict | None = None
    gets: int = 0
    peak_buffered: int = 0
    stale_uploads_aborted: int = 0
    segments: int = 1  # segments the archive was produced as (tasks/produce/segments.py)
    part: int = 1  # the day's part this run committed; skipped: the day's last part (tasks/format/day.py)
    late: int = 0  # objects newer than the day's archive: archived as ``part`` (a dry run: would be)
    timings: dict = field(default_factory=dict)  # of a segmented run: plan, slowest segment, assembly
    estimated_bytes_out: int | None = None
    tags_unread: int = 0  # tagged objects archived without their tags (--without-tags)
    throttled: int = 0  # throttled answers (503 SlowDown) to GETs, waited out with a growing backoff
    needs_restore: int = 0  # source objects in GLACIER/DEEP_ARCHIVE, not restored (a dry run counts them)
    retention: dict | None = None  # the archive's Object Lock: mode, retain_until, legal_hold, applied
    cost: dict | None = None  # tasks/core/cost.py: monthly and one-time figures, archive vs one by one
    notes: list[str] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.bytes_in / self.bytes_out if self.bytes_out else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "status": self.status.value, "ratio": round(self.ratio, 3)}
