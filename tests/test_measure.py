"""The archive DAG's measure task sizes its prefixes in parallel (bounded threads): a backfill
of many days was sized one prefix after another under the task's 30-minute timeout."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

from s3arch.io.store import Store
from s3arch.ops.jobs import job_from_dict
from s3arch.ops.sizing import split_by_size

JOB = {"source": "s3://app-logs/", "prefix_template": "logs/{date:%Y/%m/%d}/", "destination": "s3://vault/archive/",
       "segments": 3, "segment_min_objects": 1000}
LIST_SECONDS = 0.4


class SlowLists:
    """A control client whose every LIST answers after LIST_SECONDS: one page, ``sizes[prefix]``
    objects. Counts the LISTs under way at once."""

    def __init__(self, sizes: dict[str, int]):
        self.sizes, self.at_once, self.most = sizes, 0, 0
        self._lock = threading.Lock()

    def get_paginator(self, name):
        return self

    def paginate(self, Bucket, Prefix, PaginationConfig, **kwargs):
        with self._lock:
            self.at_once += 1
            self.most = max(self.most, self.at_once)
        time.sleep(LIST_SECONDS)
        with self._lock:
            self.at_once -= 1
        when = datetime(2026, 11, 21, tzinfo=timezone.utc)
        yield {"S3archListed": [__import__("s3arch.io.listed", fromlist=["ListedObject"]).ListedObject(
            f"{Prefix}{i:05d}", 10, '"e"', when) for i in range(self.sizes[Prefix])]}


def test_measure_sizes_the_prefixes_of_a_backfill_in_parallel_and_in_order():
    job = job_from_dict("logs", JOB)
    days = [f"logs/2026/11/{d:02d}/" for d in range(1, 21)]
    control = SlowLists({p: (1000 if i % 5 == 0 else 10) for i, p in enumerate(days)})
    started = time.monotonic()
    split = split_by_size(job, [days[:10], days[10:]], Store(control))
    seconds = time.monotonic() - started
    assert [s["prefix"] for s in split["sizes"]] == days  # in the order planned
    assert split["large"] == days[::5]
    assert 1 < control.most <= 8, f"{control.most} LISTs at once"
    assert seconds < 20 * LIST_SECONDS / 2, f"20 prefixes took {seconds:.1f}s: sized one after another"
