"""The 1,000,000-object day on the production stack: segment tasks over two Celery workers,
against the CLI's one process on the same machine in the same invocation.

    make bench-scale-celery   # or: .venv/bin/python -m bench.scale_celery [--objects N] [--segments K]
    .venv/bin/python -m bench.scale_celery --objects 10000000 --cli recorded
    .venv/bin/python -m bench.scale_celery --source seeded

Archives the synthetic endpoint's virtual day (``--source synthetic``, the default), or with
``--source seeded`` bench/scale.py's day seeded into MinIO (once behind its marker, ~15 min the
first time). The synthetic day needs no seeding (bench/scale_synthetic.py): the stack's
connection is the endpoint, which passes the archive's writes to MinIO, and it is verified as
there (the manifest against the listing record for record, a sample fetched again, ``s3arch
verify``). ``--cli recorded`` takes the CLI's ``--processes 1`` on the same virtual day
from its committed bench/results/scale-synthetic-N.json instead of running it (10M: 52 min).
Then, each into its own destination:
- the archive DAG of a job with ``segments: K`` on ``devtools.airflow_celery``'s stack
  (PostgreSQL, Redis, two Celery workers of concurrency 2), triggered for the day through the
  REST API: wall time from the trigger to the run's success, each task's host, start and end,
  and each task's peak RSS and CPU-seconds (its task process, ``airflow worker -- <ti id>``,
  with any processes it starts, sampled from /proc); the bill: the CPU-seconds of every process
  of the stack (Airflow's, PostgreSQL, Redis, the S3 servers) over the run;
- bench/scale.py's runs of the CLI on the same day: ``s3arch archive`` with the defaults, its
  verify and ``--processes 1`` (also saved as bench/results/scale-N.json, as ``make bench-scale``);
- ``s3arch verify`` of the DAG's archive, and every member of it read back and compared with
  the source: the member's key and size with the source's listing, its MD5 with the source
  object's ETag (MinIO's ETag of a single-part object is the MD5 of its bytes).
Output: bench/results/scale-celery-N.json (scale-celery-synthetic-N.json), with the load average before and after each run
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
from bench.bench import (DEFAULT_BUDGET_MIB, DEST_BUCKET, RESULTS, RssSampler, _descendants, bench_env,
                         start_bench_minio, tree_cpu_seconds)
from bench.scale import SCALE_BUCKET, _clear, _line, _prefix, cli_runs, seeded, verify_run
from bench.scale_synthetic import archive_run as synthetic_archive_run
from bench.scale_synthetic import check_manifest, commit
from bench.scale_synthetic import verify_run as synthetic_verify
from bench.synthetic_source import SyntheticSource
from devtools.servers import ROOT
from devtools.airflow_celery import WORKERS, prepare_celery_airflow
from devtools.airflow_local import write_jobs_file

JOB_NAME = "scale"
DAG_ID = f"s3_archive__{JOB_NAME}"
STEM = "scale-celery/"
TASK_TITLE = "airflow worker -- "  # Airflow's title of a task process, then the task instance's id
TIME_FIELDS = ("%H", "%M", "%S")  # each "00" on a date
SYNTHETIC_BUCKET = "bench-synthetic"
SLOT_SLACK_MIB = 256  # a slot is memory_budget + 256 MiB (docs/DEPLOY.md, What one worker slot needs)


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


def _job(objects: int, segments: int, source_bucket: str) -> dict:
    template, day = day_template(objects)
    return {"source": f"s3://{source_bucket}/", "prefix_template": template, "destination": f"s3://{DEST_BUCKET}/{STEM}",
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
        self.cpu: dict[str, float] = {}  # CPU-seconds of each task instance's process tree
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
            for ti_id, sampler in self.samplers.items():  # a task's tree is sampled while its process lives
                if not Path(f"/proc/{sampler.pid}").exists():
                    sampler.done.set()
                elif not sampler.done.is_set():
                    self.cpu[ti_id] = max(self.cpu.get(ti_id, 0.0), tree_cpu_seconds(sampler.pid))

    def peaks_mib(self) -> dict[str, float]:
        self.done.set()
        self.join()
        for sampler in self.samplers.values():
            sampler.done.set()
            sampler.join()
        # The summed RSS only: a forked task process's VmHWM starts at its parent's RSS.
        return {ti_id: s.peak_tree / 2**20 for ti_id, s in self.samplers.items()}


class StackCpu:
    """CPU-seconds the whole stack spent between ``start`` and ``stop``: every Airflow process
    with the task processes the workers reaped, PostgreSQL (its backends), Redis, and the S3
    servers named."""

    def __init__(self, airflow, servers: dict[str, int]):
        self.roots = {name: process.pid for name, process in airflow.processes.items()}
        self.roots.update(postgresql=airflow.postgres.process.pid, redis=airflow.redis.process.pid, **servers)
        self.before: dict[str, float] = {}

    def _now(self) -> dict[str, float]:
        return {name: tree_cpu_seconds(pid) for name, pid in self.roots.items()}

    def start(self) -> None:
        self.before = self._now()

    def stop(self) -> dict[str, float]:
        return {name: round(cpu - self.before[name], 1) for name, cpu in self._now().items()}


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


def _tasks(airflow, run_id: str, peaks: dict[str, float], cpu: dict[str, float]) -> list[dict]:
    """Each task instance of the run: its task, map index, host, tries, seconds, CPU-seconds
    (its task process's tree) and peak RSS."""
    rows = []
    for ti in airflow.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=500")["task_instances"]:
        rows.append({"task": ti["task_id"], "map_index": ti["map_index"], "label": ti.get("rendered_map_index"),
                     "state": ti["state"], "host": ti["hostname"], "try": ti["try_number"],
                     "start": ti["start_date"], "end": ti["end_date"], "seconds": round(ti["duration"] or 0, 1),
                     "cpu_s": round(cpu[ti["id"]], 1) if ti["id"] in cpu else None,
                     "peak_rss_mib": round(peaks[ti["id"]]) if ti["id"] in peaks else None})
    return sorted(rows, key=lambda r: (r["start"] or "", r["task"], r["map_index"]))


def run_dag(s3_server, objects: int, segments: int, source_bucket: str, servers: dict[str, int]) -> dict:
    """The day archived by the DAG on the Celery stack, its connection to ``s3_server``: wall
    time, the archive, every task, and the CPU of the stack and of ``servers`` (name: PID)."""
    home = Path(tempfile.mkdtemp(prefix="s3arch-bench-scale-celery-"))
    jobs = write_jobs_file(home / "jobs.yaml", {JOB_NAME: _job(objects, segments, source_bucket)})
    airflow = prepare_celery_airflow(home, s3_server, jobs, pool_slots=4)
    try:
        airflow.start()
        airflow.wait_until(lambda: _parsed(airflow, DAG_ID), 300, f"{DAG_ID} to be parsed")
        trees = TaskTrees([airflow.processes[name].pid for name in WORKERS])
        trees.start()
        stack = StackCpu(airflow, servers)
        stack.start()
        load_before = os.getloadavg()[0]
        try:
            wall, run_id = dag_run(airflow, day_template(objects)[1])
        finally:
            peaks = trees.peaks_mib()
            stack_cpu = stack.stop()
        if not run_id:
            raise RuntimeError(f"the archive run failed:\n{airflow.log_tail('scheduler')}")
        value = airflow.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/report/xcomEntries/return_value")
        rows = json.loads(value["value"]) if isinstance(value["value"], str) else value["value"]
        tasks = _tasks(airflow, run_id, peaks, trees.cpu)
        task_cpu = sum(t["cpu_s"] or 0 for t in tasks)
        return {"wall_s": round(wall, 1), "objects_per_s": round(objects / wall), "segments": segments,
                "load_average_1min": {"before": round(load_before, 1), "after": round(os.getloadavg()[0], 1)},
                "tasks_cpu_s": round(task_cpu, 1), "tasks_cpu_ms_per_object": round(1000 * task_cpu / objects, 3),
                "stack_cpu_s": stack_cpu, "report": rows, "tasks": tasks}
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
    stem = "scale-celery-synthetic" if results["source"] == "synthetic" else "scale-celery"
    (RESULTS / f"{stem}-{results['objects']}.json").write_text(json.dumps(results, indent=1) + "\n")


def _archived_row(dag: dict, prefix: str, objects: int) -> dict:
    row = next(r for r in dag["report"] if r["prefix"] == prefix)
    if (row["status"], row["objects"]) != ("archived", objects):
        raise RuntimeError(f"the DAG's report says {row['status']}, {row['objects']} objects: {row}")
    return row


def _print_dag(dag: dict) -> None:
    segments = [t for t in dag["tasks"] if t["task"] == "segment"]
    print(f"DAG on Celery: {dag['wall_s']:.1f} s, {dag['objects_per_s']:,} obj/s, {len(segments)} segment tasks on "
          f"{sorted({t['host'] for t in segments})}; tasks' CPU {dag['tasks_cpu_s']:,.0f} s "
          f"({dag['tasks_cpu_ms_per_object']:.3f} ms/object); load {dag['load_average_1min']}", flush=True)
    for t in dag["tasks"]:
        print(f"  {t['task']:<8} {t['label'] or '':<28} {t['host'] or '-':<16} try {t['try']} "
              f"{t['seconds']:>7.1f} s  CPU {t['cpu_s'] if t['cpu_s'] is not None else '-':>7} s  "
              f"peak RSS {t['peak_rss_mib'] or '-'} MiB", flush=True)
    over = [t for t in dag["tasks"] if (t["peak_rss_mib"] or 0) > DEFAULT_BUDGET_MIB + SLOT_SLACK_MIB]
    slot = DEFAULT_BUDGET_MIB + SLOT_SLACK_MIB
    print(f"  every task within its slot's {slot} MiB" if not over else f"  OVER the slot's {slot} MiB: {over}", flush=True)
    print(f"  the bill: {sum(dag['stack_cpu_s'].values()):,.0f} CPU-s for the whole stack: {dag['stack_cpu_s']}",
          flush=True)


def seeded_day(args, results: dict) -> None:
    """bench/scale.py's day seeded into MinIO, by the DAG; every member compared with the
    source; then the CLI's runs on the same day."""
    server = start_bench_minio()
    try:
        env, s3 = seeded(server, args.objects)
        _clear(s3, STEM)
        results["dag"] = dag = run_dag(server, args.objects, args.segments, SCALE_BUCKET, {"minio": server.pid})
        row = _archived_row(dag, _prefix(args.objects), args.objects)
        _print_dag(dag)
        results["verify"] = verify_run(server, env, args.objects, row["archive"])
        print(_line("verify", results["verify"]), flush=True)
        results["compared_with_source"] = compare_with_source(s3, args.objects, row["archive"])
        print(f"every member compared with the source: {results['compared_with_source']}", flush=True)
        _save(results)  # what the DAG did, in case the CLI's runs are cut short
        if args.cli == "run":  # bench/scale.py's runs, saved as bench/results/scale-N.json too
            results["cli"] = cli_runs(server, env, args.objects)
            results["cli_processes_1"] = results["cli"]["archive_processes_1"]
    finally:
        server.stop()


def synthetic_day(args, results: dict) -> None:
    """The synthetic endpoint's virtual day (bench/scale_synthetic.py) by the DAG, the stack's
    connection to the endpoint (which passes the archive's writes to MinIO); the manifest
    against the listing and ``s3arch verify``; then the CLI's ``--processes 1`` on the same day."""
    server = start_bench_minio()
    try:
        s3 = server.client()
        with SyntheticSource(objects=args.objects, bucket=SYNTHETIC_BUCKET, prefix=_prefix(args.objects),
                             upstream=server) as source:
            _clear(s3, STEM)
            results["dag"] = dag = run_dag(source.server, args.objects, args.segments, SYNTHETIC_BUCKET,
                                           {"minio": server.pid, "synthetic-s3": source.pid})
            row = _archived_row(dag, _prefix(args.objects), args.objects)
            _print_dag(dag)
            results["manifest_vs_listing"] = check_manifest(s3, source, row["archive"], args.objects, args.sample)
            print(f"manifest = listing: {results['manifest_vs_listing']}", flush=True)
            results["verify"] = synthetic_verify(server, bench_env(server), args.objects, row["archive"])
            print(_line("verify", results["verify"]), flush=True)
            _clear(s3, STEM)  # a 10M day's archive is ~15 GB
            _save(results)
            if args.cli == "run":
                env = {k: v for k, v in bench_env(server).items() if k != "AWS_ENDPOINT_URL_S3"}
                results["cli_processes_1"], _ = synthetic_archive_run(server, source, env, args.objects, "processes-1")
                print(_line("CLI --processes 1", results["cli_processes_1"]), flush=True)
                _clear(s3, "scale-synthetic-processes-1/")
    finally:
        server.stop()


def recorded_cli(objects: int) -> dict:
    """The CLI's ``--processes 1`` on the synthetic day of this size, from its committed result."""
    path = RESULTS / f"scale-synthetic-{objects}.json"
    try:
        recorded = json.loads(path.read_text())
        run = recorded["runs"]["processes-1"]
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(f"--cli recorded: no --processes 1 run in {path} ({exc}); run `make bench-scale-10m "
                         f"ARGS='--objects {objects}'` or give --cli run") from exc
    return {**run, "from": str(path.relative_to(ROOT)), "when": recorded["when"], "commit": recorded.get("commit")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--segments", type=int, default=4,
                        help="segment tasks (two workers of concurrency 2 run four at once)")
    parser.add_argument("--source", choices=("seeded", "synthetic"), default="synthetic",
                        help="the day seeded into MinIO (bench/scale.py) or the synthetic endpoint's")
    parser.add_argument("--cli", choices=("run", "recorded"), default="run",
                        help="run the CLI on the same day, or (synthetic) take its committed scale-synthetic-N.json")
    parser.add_argument("--sample", type=int, default=2000, help="synthetic: objects fetched again to check their bytes")
    args = parser.parse_args(argv)
    day_template(args.objects)  # a day no template can name is refused before any work
    if args.cli == "recorded" and args.source != "synthetic":
        parser.error("--cli recorded: only for --source synthetic (bench/results/scale-synthetic-N.json)")
    results: dict = {"objects": args.objects, "source": args.source, **commit(),
                     "when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"), "cpus": os.cpu_count(),
                     "memory_budget_mib": DEFAULT_BUDGET_MIB}
    (synthetic_day if args.source == "synthetic" else seeded_day)(args, results)
    if args.cli == "recorded":
        results["cli_processes_1"] = recorded_cli(args.objects)
    cli, dag = results.get("cli_processes_1"), results["dag"]
    if cli:
        results["dag_vs_cli_processes_1_wall"] = round(dag["wall_s"] / cli["wall_s"], 2)
        results["dag_vs_cli_processes_1_cpu"] = round(dag["tasks_cpu_s"] / cli["client_cpu_s"], 2)
        print(f"DAG on Celery / CLI --processes 1: wall {results['dag_vs_cli_processes_1_wall']:.2f}x, "
              f"CPU of the tasks / the CLI's {results['dag_vs_cli_processes_1_cpu']:.2f}x (CLI: {cli['wall_s']} s, "
              f"{cli['client_cpu_s']} CPU-s, load {cli.get('load_average_1min')}"
              f"{', ' + cli['from'] if 'from' in cli else ''})", flush=True)
    _save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
