"""Memory of one archive task by its number of processes: the figures docs/DEPLOY.md's sizing
table quotes.

    .venv/bin/python -m bench.sizing            # writes bench/results/sizing.json, prints the table

One prefix over the segment threshold (4,000 log files of 32 KiB, 125 MiB; the threshold
lowered to 1,000 objects so that the prefix counts as large) is archived with ``--processes 1``
(one pipeline, what an Airflow task does by default) at the default ``--memory-budget 256MiB``,
and 2 and 4 (what a job's ``processes: N`` makes a task do: N worker processes) at the least
budget that holds N workers (their interpreters counted in it: 264 and 480 MiB), each row
checked against the target of the budget plus 64 MiB. The engine is the one an Airflow archive task runs, started as
``python -m s3arch archive`` so that its process tree is all there is to measure: the peak of
the tree's summed RSS (the task process and its workers, sampled every 20 ms) and the largest
single process. An Airflow task adds its task runner's own memory on top. The bench's MinIO
runs on the same machine; each figure is the median of ``--repeat`` runs, with the range.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from bench.bench import DEST_BUCKET, SOURCE_BUCKET, _descendants, bench_env, measure, start_bench_minio
from s3arch.produce.segments.plan import MIN_SHARE, WORKER_INTERPRETER

OUT = Path(__file__).resolve().parent / "results" / "sizing.json"
PREFIX = "sizing/2026/11/21/"
OBJECTS, OBJECT_SIZE = 4_000, 32 << 10
THRESHOLD = 1_000
PROCESSES = (1, 2, 4)


def budget_mib(processes: int) -> int:
    """The default budget, or the least that holds ``processes`` workers and the assembler."""
    if processes == 1:
        return 256
    return (MIN_SHARE + processes * (MIN_SHARE + WORKER_INTERPRETER)) >> 20


def _body(i: int) -> bytes:
    rng = random.Random(i)
    line = lambda: (f"2026-11-21T{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}Z "  # noqa: E731
                    f"app-{rng.randrange(64)} {rng.choice(['GET', 'PUT', 'POST'])} /api/v1/items/"
                    f"{rng.randrange(10**6)} {rng.choice([200, 200, 200, 404, 500])} {rng.random():.4f}\n")
    out = bytearray()
    while len(out) < OBJECT_SIZE:
        out += line().encode()
    return bytes(out[:OBJECT_SIZE])


def seed(s3) -> None:
    listed = s3.list_objects_v2(Bucket=SOURCE_BUCKET, Prefix=PREFIX, MaxKeys=1000)
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=SOURCE_BUCKET, Prefix=PREFIX)
    if listed.get("KeyCount") and sum(p.get("KeyCount", 0) for p in pages) == OBJECTS:
        return
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda i: s3.put_object(Bucket=SOURCE_BUCKET, Key=f"{PREFIX}{i // 200:02d}/app-{i:05d}.log",
                                              Body=_body(i)), range(OBJECTS)))


class WorkerCount(threading.Thread):
    """Most worker processes (spawned interpreters) alive at once under ``pid``."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.most, self.done = pid, 0, threading.Event()

    def run(self):
        while not self.done.wait(0.05):
            alive = 0
            for child in _descendants(self.pid)[1:]:
                try:
                    if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                        alive += 1
                except OSError:
                    pass
            self.most = max(self.most, alive)


def run_once(server, env, processes: int) -> dict:
    s3 = server.client()
    stem = f"sizing-{processes}/"
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=DEST_BUCKET, Prefix=stem):
        keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        if keys:
            s3.delete_objects(Bucket=DEST_BUCKET, Delete={"Objects": keys})
    argv = [sys.executable, "-m", "s3arch", "archive", f"s3://{SOURCE_BUCKET}/{PREFIX}", f"s3://{DEST_BUCKET}/{stem}",
            "--storage-class", "STANDARD", "--json", "--quiet", "--memory-budget", f"{budget_mib(processes)}MiB",
            "--processes", str(processes), "--segment-min-objects", str(THRESHOLD)]
    # The worker count is sampled beside measure()'s RSS sampler, from this process's tree.
    watcher = WorkerCount(os.getpid())
    watcher.start()
    try:
        result = measure(argv, env, server.pid)
    finally:
        watcher.done.set()
        watcher.join()
    summary = json.loads(result.pop("stdout").strip().splitlines()[-1])
    assert summary["status"] == "archived" and summary["objects"] == OBJECTS, summary
    return {"peak_rss_mib": round(result["peak_rss_mib"], 1), "wall_s": round(result["wall_s"], 2),
            "cpu_s": round(result["cpu_s"], 2), "segments": summary.get("segments", 1),
            "workers_seen": watcher.most}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    server = start_bench_minio()
    try:
        seed(server.client())
        env = bench_env(server)
        runs: dict[int, list[dict]] = {p: [] for p in PROCESSES}
        for _ in range(args.repeat):  # alternating, so that the machine's load spreads evenly
            for p in PROCESSES:
                runs[p].append(run_once(server, env, p))
                print(f"processes {p}: {runs[p][-1]}", flush=True)
    finally:
        server.stop()
    rows = []
    for p, measured in runs.items():
        rss = [r["peak_rss_mib"] for r in measured]
        rows.append({"processes": p, "memory_budget_mib": budget_mib(p), "segments": measured[0]["segments"],
                     "workers_seen": max(r["workers_seen"] for r in measured),
                     "peak_rss_mib": round(statistics.median(rss), 1), "peak_rss_range_mib": [min(rss), max(rss)],
                     "wall_s": round(statistics.median(r["wall_s"] for r in measured), 2),
                     "runs": measured})
    out = {"when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"), "machine": platform.machine(),
           "cpus": os.cpu_count(), "python": platform.python_version(), "command": "python -m bench.sizing "
           f"--repeat {args.repeat}", "objects": OBJECTS, "object_bytes": OBJECT_SIZE,
           "segment_min_objects": THRESHOLD, "rows": rows}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print("| processes | budget (MiB) | segments | worker processes | peak RSS of the task's tree (MiB) | wall (s) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["peak_rss_range_mib"]
        verdict = "PASS" if hi <= r["memory_budget_mib"] + 64 else "MISS"
        print(f"| {r['processes']} | {r['memory_budget_mib']} | {r['segments']} | {r['workers_seen']} | "
              f"{r['peak_rss_mib']:.0f} [{lo:.0f}-{hi:.0f}] (budget + 64: {verdict}) | {r['wall_s']:.1f} |")
    print(f"written: {OUT.relative_to(Path.cwd()) if OUT.is_relative_to(Path.cwd()) else OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
