"""What one run of the commit protocol (tasks/protocol/commit.py) did with its prefix, as the
CLI prints it and an Airflow task's row reports it; ``State`` is where the run left the
prefix's destination (the four states of commit.py's docstring)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from s3arch.core.outcome import Outcome
from s3arch.io.spent import bill_sum

if TYPE_CHECKING:
    from s3arch.format.manifest import Committed
    from s3arch.produce.streamed import StreamedArchive


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
    # The run's bill (tasks/protocol/bill.py): S3 requests asked for, by boto3 operation name,
    # and CPU-seconds, its own and its worker processes' (of a segmented run, every task's).
    requests: dict = field(default_factory=dict)
    cpu_s: float = 0.0
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

    def record_skip(self, archive: str, committed: "Committed", summaries: list[dict]) -> None:
        """A committed day skipped: what its parts (``summaries``, part 1's first) hold."""
        self.status, self.state = Outcome.SKIPPED, State.COMMITTED.value
        self.archive, self.part = archive, len(summaries)
        self.objects, self.bytes_in = sum(s["objects"] for s in summaries), sum(s["bytes"] for s in summaries)
        self.bytes_out = sum(s["archive_size"] for s in summaries)
        self.tar_bytes = sum(s["tar_size"] for s in summaries)
        self.storage_class = committed.summary.get("storage_class", self.storage_class)
        self.codec = committed.header.get("codec", self.codec)

    def add_bill(self, requests: dict, cpu_s: float) -> None:
        """``requests`` (operation -> count) and ``cpu_s`` added to the run's bill."""
        summed = bill_sum({"requests": self.requests, "cpu_s": self.cpu_s}, {"requests": requests, "cpu_s": cpu_s})
        self.requests, self.cpu_s = summed["requests"], summed["cpu_s"]

    def record_commit(self, streamed: "StreamedArchive", throttled: int, cost: dict) -> None:
        """The archive ``streamed`` committed; ``throttled``: the control plane's throttled answers.
        What other processes spent on it (``streamed.elsewhere``) goes on the bill."""
        self.add_bill(streamed.elsewhere.get("requests", {}), streamed.elsewhere.get("cpu_s", 0.0))
        self.state = State.COMMITTED.value
        self.objects, self.bytes_in, self.bytes_out = streamed.objects, streamed.bytes_in, streamed.bytes_out
        self.tar_bytes, self.gets, self.peak_buffered = streamed.tar_bytes, streamed.gets, streamed.peak_buffered
        self.throttled, self.cost = streamed.throttled + throttled, cost
        if streamed.tags_unread:
            self.tags_unread = streamed.tags_unread
            self.notes.append(f"{streamed.tags_unread:,} tagged objects were archived without their tags "
                              "(--without-tags; s3:GetObjectTagging was denied); their manifest records say "
                              "\"tags_unread\"")
