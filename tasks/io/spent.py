"""What a run or one of its steps spent: the S3 requests its clients sent, by operation
(``Sent``, tasks/io/store.py), and the CPU-seconds this process used. A bill is the dict
``{"requests": {operation: count}, "cpu_s": seconds}``, the operations with a count in name
order; tasks/protocol/bill.py says how a run's is made."""

from __future__ import annotations

import resource
from collections import Counter

from s3arch.io.store import Sent


def process_cpu() -> float:
    """User plus system CPU-seconds of this process and of its reaped children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class Spent:
    """What ``sent`` counted and this process used from now on."""

    def __init__(self, sent: Sent):
        self._sent = sent
        self._before = sent.counts()
        self._cpu = process_cpu()

    def so_far(self) -> dict:
        """The bill since this was made."""
        return {"requests": self._sent.since(self._before), "cpu_s": round(process_cpu() - self._cpu, 3)}


def bill_sum(*bills: dict) -> dict:
    """One bill of several (a bill's missing parts count nothing)."""
    requests: Counter[str] = Counter()
    for bill in bills:
        requests.update(bill.get("requests") or {})
    return {"requests": {op: n for op, n in sorted(requests.items()) if n},
            "cpu_s": round(sum(bill.get("cpu_s", 0.0) for bill in bills), 3)}
