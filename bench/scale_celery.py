"""The 1,000,000-object day on the production stack: segment tasks over two Celery workers,
against the CLI's one process on the same machine in the same invocation.

    make bench-scale-celery   # or: .venv/bin/python -m bench.scale_celery [--objects N] [--segments K]

Reuses bench/scale.py's seeded day (seeded once behind its marker, ~15 min the first time).
Then, each into its own destination:
- the archive DAG of a job with ``segments: K`` on ``devtools.airflow_celery``'s stack
  (PostgreSQL, Redis, two Celery workers of concurrency 2), triggered for the day through the
  REST API: wall time from the trigger to the run's success, each task's host, start and end,
  and each task's peak RSS (its task process, ``airflow worker -- <ti id>``, with any processes
  it starts, sampled from /proc);
- bench/scale.py's runs of the CLI on the same day: ``s3arch archive`` with the defaults, its
  verify and ``--processes 1`` (also saved as bench/results/scale-N.json, as ``make bench-scale``);
- ``s3arch verify`` of the DAG's archive, and every member of it read back and compared with
  the source: the member's key and size with the source's listing, its MD5 with the source
  object's ETag (MinIO's ETag of a single-part object is the MD5 of its bytes).
Output: bench/results/scale-celery-N.json, with the load average before and after each run
(the machine is shared: read the ratio, measured in one invocation).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.backfill import _parsed
from bench.bench import DEST_BUCKET, RESULTS, RssSampler, _descendants, start_bench_minio
from bench.scale import SCALE_BUCKET, _clear, _line, _prefix, cli_runs, seeded, verify_run
from devtools.airflow_celery import WORKERS, prepare_celery_airflow
from devtools.airflow_local import write_jobs_file

JOB_NAME = "scale"
DAG_ID = f"s3_archive__{JOB_NAME}"
STEM = "scale-celery/"
TASK_TITLE = "airflow worker -- "  # Airflow's title of a task process, then the task instance's id
TIME_FIELDS = ("%H", "%M", "%S")  # each "00" on a date


def day_template(objects: int) -> tuple[str, str]:
    """A job template whose day DAY is the seeded prefix day-N/, and DAY. A job's template
    needs a date that varies by day: day-1000000/ is the 1st under day-{date:%-d%H%M%S}/ (the
    day of the month, then the date's time, 00:00:00); day-200000/ the 20th under
    day-{date:%-d%H%M}/."""
    digits = str(objects)
    for pairs in range(len(TIME_FIELDS), -1, -1):
        head, zeros = digits[:len(digits) - 2 * pairs], digits[len(digits) - 2 * pairs:]
        if zeros == "00" * pairs and head.isdigit() and 1 <= int(head) <= 31 and not head.startswith("0"):
            return "day-{date:%-d" + "".join(TIME_FIELDS[:pairs]) + "}/", f"2026-01-{int(head):02d}"
    raise SystemExit(f"--objects {objects}: the day's prefix day-{objects}/ is no date of a job's template; "
                     "give a day of the month (1-31) followed by 0, 2, 4 or 6 zeros, e.g. 1000000 or 200000")


def _job(objects: int, segments: int) -> dict:
    template, day = day_template(objects)
    return {"source": f"s3://{SCALE_BUCKET}/", "prefix_template": template, "destination": f"s3://{DEST_BUCKET}/{STEM}",
            "storage_class": "STANDARD", "aws_conn_id": "s3_archive", "min_age_days": 1, "start_date": day,
            "schedule": None, "retries": 2, "retry_delay_seconds": 10, "execution_timeout_minutes": 180,
            "segments": segments, "segment_min_objects": min(objects, 50_000)}


class TaskTrees(threading.Thread):
    """Finds the task processes the workers start and samples each one's process tree: the
    peak RSS of every task instance, by its id."""

    def __init__(self, worker_pids: list[int]):
        super().__init__(daemon=True)
        self.worker_pids = worker_pids
        self.samplers: dict[str, RssSampler] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            for pid in (p for root in self.worker_pids for p in _descendants(root)):
                try:
                    title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
                except OSError:
                    continue
                ti_id = title[len(TASK_TITLE):].strip() if title.startswith(TASK_TITLE) else None
                if ti_id and ti_id not in self.samplers:
                    self.samplers[ti_id] = sampler = RssSampler(pid, interval=0.1)
                    sampler.start()
            for sampler in self.samplers.values():  # a task's tree is sampled while its process lives
                if not Path(f"/proc/{sampler.pid}").exists():
                    sampler.done.set()

    def peaks_mib(self) -> dict[str, float]:
        self.done.set()
        self.join()
        for sampler in self.samplers.values():
            sampler.done.set()
            sampler.join()
        # The summed RSS only: a forked task process's VmHWM starts at its parent's RSS.
        return {ti_id: s.peak_tree / 2**20 for ti_id, s in self.samplers.items()}


def dag_run(airflow, day: str) -> tuple[float, str]:
    """Trigger the archive DAG for the day; seconds until it ended, and how it ended."""
    started = time.monotonic()
    run_id = airflow.api("POST", f"dags/{DAG_ID}/dagRuns", {
        "logical_date": None, "conf": {"date_from": day, "date_to": day}})["dag_run_id"]

    def ended():
        state = airflow.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    state = airflow.wait_until(ended, 4 * 3600, "the archive run")
    return time.monotonic() - started, run_id if state == "success" else ""


def _tasks(airflow, run_id: str, peaks: dict[str, float]) -> list[dict]:
    """Each task instance of the run: its task, map index, host, tries, seconds and peak RSS."""
    rows = []
    for ti in airflow.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=500")["task_instances"]:
        rows.append({"task": ti["task_id"], "map_index": ti["map_index"], "label": ti.get("rendered_map_index"),
                     "state": ti["state"], "host": ti["hostname"], "try": ti["try_number"],
                     "start": ti["start_date"], "end": ti["end_date"], "seconds": round(ti["duration"] or 0, 1),
                     "peak_rss_mib": round(peaks[ti["id"]]) if ti["id"] in peaks else None})
    return sorted(rows, key=lambda r: (r["start"] or "", r["task"], r["map_index"]))


def run_dag(server, objects: int, segments: int) -> dict:
    """The day archived by the DAG on the Celery stack: wall time, the archive and every task."""
    home = Path(tempfile.mkdtemp(prefix="s3arch-bench-scale-celery-"))
    jobs = write_jobs_file(home / "jobs.yaml", {JOB_NAME: _job(objects, segments)})
    airflow = prepare_celery_airflow(home, server, jobs, pool_slots=4)
    try:
        airflow.start()
        airflow.wait_until(lambda: _parsed(airflow, DAG_ID), 300, f"{DAG_ID} to be parsed")
        trees = TaskTrees([airflow.processes[name].pid for name in WORKERS])
        trees.start()
        load_before = os.getloadavg()[0]
        try:
            wall, run_id = dag_run(airflow, day_template(objects)[1])
        finally:
            peaks = trees.peaks_mib()
        if not run_id:
            raise RuntimeError(f"the archive run failed:\n{airflow.log_tail('scheduler')}")
        value = airflow.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/report/xcomEntries/return_value")
        rows = json.loads(value["value"]) if isinstance(value["value"], str) else value["value"]
        return {"wall_s": round(wall, 1), "objects_per_s": round(objects / wall), "segments": segments,
                "load_average_1min": {"before": round(load_before, 1), "after": round(os.getloadavg()[0], 1)},
                "report": rows, "tasks": _tasks(airflow, run_id, peaks)}
    finally:
        airflow.stop()
        shutil.rmtree(home, ignore_errors=True)


def compare_with_source(s3, objects: int, archive_url: str) -> dict:
    """Every member of the archive against the source, in the one key order both have: the
    member's name and size against the listing, the MD5 of its bytes against the object's ETag."""
    from s3arch.format.tarwriter import member_name
    from s3arch.io.reads import stream_object
    from s3arch.restore.reading import DECODE_CHUNK, _DecompressingReader, _ForgetfulTar

    bucket, key = archive_url.removeprefix("s3://").split("/", 1)
    codec = "gzip" if key.endswith(".gz") else "zstd"
    started = time.monotonic()
    chunks = stream_object(s3, bucket, key, f"compare {archive_url}", chunk=DECODE_CHUNK)
    listing = (o for page in s3.get_paginator("list_objects_v2").paginate(Bucket=SCALE_BUCKET, Prefix=_prefix(objects))
               for o in page.get("Contents", []))
    compared = 0
    with _ForgetfulTar.open(fileobj=_DecompressingReader(chunks, codec), mode="r|") as tar:
        for member in iter(tar.next, None):
            source = next(listing, None)
            if source is None or member.name != member_name(source["Key"], source["Size"])[0] \
                    or member.size != source["Size"]:
                raise RuntimeError(f"member {compared + 1} is {member.name!r} ({member.size} bytes); the source "
                                   f"lists {source and source['Key']!r} ({source and source['Size']} bytes)")
            if hashlib.md5(tar.extractfile(member).read()).hexdigest() != source["ETag"].strip('"'):
                raise RuntimeError(f"{member.name!r}: the member's bytes differ from the source object's")
            compared += 1
    left = next(listing, None)
    if left is not None or compared != objects:
        raise RuntimeError(f"{compared} members compared of {objects}; the source lists {left and left['Key']!r} "
                           "beyond the archive's last member")
    return {"members": compared, "seconds": round(time.monotonic() - started, 1)}


def _save(results: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"scale-celery-{results['objects']}.json").write_text(json.dumps(results, indent=1) + "\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--segments", type=int, default=4,
                        help="segment tasks (two workers of concurrency 2 run four at once)")
    args = parser.parse_args(argv)
    day_template(args.objects)  # a day no template can name is refused before any work
    server = start_bench_minio()
    try:
        env, s3 = seeded(server, args.objects)
        results: dict = {"objects": args.objects, "when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
                         "cpus": os.cpu_count()}
        _clear(s3, STEM)
        results["dag"] = dag = run_dag(server, args.objects, args.segments)
        row = next(r for r in dag["report"] if r["prefix"] == _prefix(args.objects))
        if (row["status"], row["objects"]) != ("archived", args.objects):
            raise RuntimeError(f"the DAG's report says {row['status']}, {row['objects']} objects: {row}")
        segments = [t for t in dag["tasks"] if t["task"] == "segment"]
        hosts = sorted({t["host"] for t in segments})
        print(f"DAG on Celery: {dag['wall_s']:.1f} s, {dag['objects_per_s']:,} obj/s, {len(segments)} segment "
              f"tasks on {hosts}; load {dag['load_average_1min']}", flush=True)
        for t in dag["tasks"]:
            print(f"  {t['task']:<8} {t['label'] or '':<28} {t['host'] or '-':<16} try {t['try']} "
                  f"{t['seconds']:>7.1f} s  peak RSS {t['peak_rss_mib'] or '-'} MiB", flush=True)
        results["segment_hosts"] = hosts
        results["verify"] = verify_run(server, env, args.objects, row["archive"])
        print(_line("verify", results["verify"]), flush=True)
        results["compared_with_source"] = compare_with_source(s3, args.objects, row["archive"])
        print(f"every member compared with the source: {results['compared_with_source']}", flush=True)
        _save(results)  # what the DAG did, in case the CLI's runs are cut short
        # The CLI's runs on the same day (bench/scale.py: defaults, its verify, --processes 1),
        # saved as bench/results/scale-N.json too.
        results["cli"] = cli_runs(server, env, args.objects)
        ratio = dag["wall_s"] / results["cli"]["archive_processes_1"]["wall_s"]
        results["dag_vs_cli_processes_1_wall"] = round(ratio, 2)
        print(f"DAG on Celery / CLI --processes 1 wall time: {ratio:.2f}", flush=True)
        _save(results)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
