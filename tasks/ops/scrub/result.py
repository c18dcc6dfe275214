"""What a scrub found (``Drift`` rows, what to do about each kind), its result and its bill."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from s3arch.core.cost import usd
from s3arch.core.errors import ArchiverError, TransientError


# Request prices (us-east-1 list prices, as tasks/core/cost.py dates its table): LIST per 1,000,
# GET/HEAD per 1,000 in STANDARD, and retrieval per GB where a class bills reads.
LIST_PER_1000 = 0.005
GET_PER_1000 = 0.0004
PUT_PER_1000 = 0.005
RETRIEVAL_PER_GB = {"STANDARD_IA": 0.01, "GLACIER_IR": 0.03}


ACTIONS = {
    "archive missing": "source still there: re-run the day with overwrite (s3arch archive ... --overwrite); "
                       "source gone: recover the archive from a bucket version or replica",
    "archive changed": "recover the committed archive from a bucket version or replica; if the source is still "
                       "there, re-run the day with overwrite",
    "manifest changed": "recover the manifest from a bucket version or replica, or re-run the day with overwrite "
                        "while the source is there",
    "manifest damaged": "without its manifest the archive cannot be restored by key: recover the manifest from a "
                        "bucket version or replica, or re-run the day with overwrite while the source is there",
    "index damaged": "readers fall back to reading the whole manifest (slower): recover the index from a bucket "
                     "version or replica, or re-run the day with overwrite while the source is there",
    "index missing": "readers fall back to reading the whole manifest (slower): recover the index from a bucket "
                     "version or replica, or re-run the day with overwrite while the source is there",
    "lock shorter": "someone with s3:BypassGovernanceRetention shortened it: extend it again "
                    "(aws s3api put-object-retention) and review who may bypass governance",
    "archive without manifest": "a run died before committing: re-run the day (it starts clean and replaces it)",
    "member differs": "the archive's bytes are damaged: recover it from a version or replica, or re-archive "
                      "with overwrite while the source is there",
    "unreadable": "read the message; check the manifest and index objects",
    "split not archived": "re-run the day (s3arch archive of that name, or clear the day's tasks): the missing "
                          "archive is made, the committed ones are re-checked",
    "newer than archive": "re-run the day (s3arch archive, or clear its task): they are archived as the day's "
                          "next part; a job's late_window re-checks its recent days every night",
}


@dataclass
class Drift:
    day: str
    prefix: str
    kind: str
    detail: str
    action: str = ""
    retryable: bool = False  # an "unreadable" check whose S3 fault outlasted the retries: run again

    def __post_init__(self):
        self.action = self.action or ACTIONS.get(self.kind, "")


class DriftFound(ArchiverError):
    """A scrub found drift: a person acts on it, as each row says (exit 2)."""


SHOWN_ROWS = 5  # drift rows a failure's message names; the table and the JSON hold them all


@dataclass
class ScrubResult:
    job: str
    first: str
    last: str
    started: str
    ended: str = ""
    checked: int = 0
    verified: list[str] = field(default_factory=list)
    sampled: int = 0
    sampled_bytes: int = 0
    drift: list[Drift] = field(default_factory=list)
    requests: dict = field(default_factory=dict)
    cost_usd: float = 0.0
    seconds: float = 0.0
    result_url: str | None = None

    @property
    def ok(self) -> bool:
        return not self.drift

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    def summary_line(self) -> str:
        where = f"result {self.result_url}" if self.result_url else "no result written"
        return (f"{self.checked} archive(s) from {self.first} to {self.last}: {len(self.verified)} verified, "
                f"{self.sampled} member(s) sampled; {where}")

    def failure(self) -> ArchiverError | None:
        """What the drift means to whoever ran the scrub (``outcome`` maps it to an exit code):
        None when clean; a ``TransientError`` (exit 3, run again) when every row is a check that
        an S3 fault stopped past the retries; else ``DriftFound`` (exit 2) naming the days and
        kinds, and what to do for each kind."""
        if self.ok:
            return None
        faults = [d for d in self.drift if d.retryable]
        found = [d for d in self.drift if not d.retryable]
        if not found:
            return TransientError(f"scrub of job {self.job}: {len(faults)} check(s) stopped on S3 faults that "
                                  f"outlasted the retries (first: {faults[0].detail}); nothing it read had drifted",
                                  hint="run the scrub again")
        days = sorted({d.day for d in found})
        split = len({d.prefix for d in found}) > len(days)  # a split job: which archive of the day
        rows = "; ".join(f"{d.day} {d.kind}" + (f" ({d.prefix})" if split else "") for d in found[:SHOWN_ROWS])
        more = f"; and {len(found) - SHOWN_ROWS} more" if len(found) > SHOWN_ROWS else ""
        actions: dict[str, str] = {}
        for d in found:
            actions.setdefault(d.kind, d.action)
        todo = "; ".join(f"{kind}: {action}" for kind, action in actions.items())
        stopped = (f"; {len(faults)} other check(s) stopped on S3 faults: run the scrub again for those"
                   if faults else "")
        return DriftFound(f"scrub of job {self.job} found drift in {len(days)} day(s): {rows}{more}",
                          hint=f"what to do: {todo}{stopped}")

    def cost_line(self) -> str:
        r = self.requests
        return (f"scrub cost: {r.get('LIST', 0):,} LIST, {r.get('HEAD', 0):,} HEAD, {r.get('GET', 0):,} GET, "
                f"{r.get('PUT', 0):,} PUT, {self.sampled_bytes:,} bytes sampled: {usd(self.cost_usd)} "
                f"(us-east-1 list prices)")

    def table(self) -> str:
        if not self.drift:
            return f"{self.checked} archive(s) of {self.job} from {self.first} to {self.last}: no drift"
        rows = [("day", "drift", "detail", "what to do")] + [(d.day, d.kind, d.detail, d.action) for d in self.drift]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows)


def scrub_cost(result: ScrubResult, retrieval: float) -> float:
    r = result.requests
    return (r.get("LIST", 0) + r.get("PUT", 0)) * LIST_PER_1000 / 1000 + \
        (r.get("GET", 0) + r.get("HEAD", 0)) * GET_PER_1000 / 1000 + retrieval
