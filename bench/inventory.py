"""Planning a three-year backfill from an S3 Inventory report of 10,000,000 keys, measured.

    .venv/bin/python -m bench.inventory [--keys N] [--formats CSV,Parquet]

Writes (once per format: the report stays in .cache/inventory-minio) a report of N keys of a
log bucket, spread over 1,096 days (2023-11-01 .. 2026-10-31, 24 hourly folders a day), as S3
writes it (devtools/inventory_reports.py: data files of 1,000,000 rows, manifest.json,
manifest.checksum; writing is not timed). Then `s3arch plan JOB --json` plans every day
from it, and the bench records its wall time, CPU (user+sys), peak RSS (sampled from /proc
every 20 ms), rows/s, the load before and after, and where the wall time went: the main
thread's seconds on a CPU, waiting for one (run queue, /proc/PID/task/TID/schedstat) and
blocked (network, disk, pyarrow's threads). In the same invocation a reference reads the
same data files with the plain tools and nothing else (boto3 GET, gzip + csv, or pyarrow to
Python values), each phase timed, so the planner's cost is a ratio to it. Target: the report
planned within 300 MiB. Output: bench/results/inventory-N.json.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import sys
import tempfile
import threading
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import yaml

from bench.bench import RESULTS, RssSampler, bench_env, ensure_buckets, measure
from bench.scale_synthetic import commit
from devtools.inventory_reports import write_report
from devtools.servers import ROOT, start_minio

DATA_DIR = ROOT / ".cache" / "inventory-minio"
SOURCE, REPORTS = "bench-logs", "bench-inventory"
FIRST_DAY, DAYS = date(2023, 11, 1), 1096  # to 2026-10-31: every day old enough to plan
TARGET_MIB = 300


def _rows(keys: int):
    """(key, size) in key order, as a report's data files hold them."""
    rng = random.Random(keys)
    per_day = keys // DAYS
    for d in range(DAYS):
        day = FIRST_DAY + timedelta(days=d)
        count = per_day + (1 if d < keys % DAYS else 0)
        for i in range(count):
            yield f"logs/{day:%Y/%m/%d}/{i * 24 // count:02d}/app-{i:06d}.log", rng.randint(1024, 16384)


def _location(fmt: str) -> str:
    return f"inventories/{SOURCE}/{fmt.lower()}-all/"


def ensure_report(s3, keys: int, fmt: str) -> float:
    """Write the report unless one of ``keys`` rows is there; returns the seconds writing took."""
    marker = f"_written/{fmt}-{keys}.json"
    try:
        s3.head_object(Bucket=REPORTS, Key=marker)
        return 0.0
    except s3.exceptions.ClientError:
        pass
    started = time.monotonic()
    write_report(s3, REPORTS, _location(fmt), SOURCE, _rows(keys), created=datetime.now(timezone.utc), fmt=fmt)
    s3.put_object(Bucket=REPORTS, Key=marker, Body=b"{}")
    return time.monotonic() - started


def _machine() -> dict:
    """Load averages (1, 5, 15 min) and the kernel's CPU pressure counter (microseconds some
    task waited for a CPU, machine-wide)."""
    some = Path("/proc/pressure/cpu").read_text().splitlines()[0] if Path("/proc/pressure/cpu").exists() else ""
    total = int(some.rsplit("total=", 1)[1]) if "total=" in some else None
    return {"load": [round(x, 2) for x in os.getloadavg()], "cpu_pressure_us": total}


class _Sched(RssSampler):
    """RssSampler that also keeps each thread's last /proc/PID/task/TID/schedstat: nanoseconds
    on a CPU and waiting in the run queue."""

    def __init__(self, pid: int):
        super().__init__(pid)
        self.threads: dict[str, tuple[int, int]] = {}

    def sample(self) -> None:
        try:
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                fields = Path(f"/proc/{self.pid}/task/{tid}/schedstat").read_text().split()
                self.threads[tid] = (int(fields[0]), int(fields[1]))
        except (OSError, ValueError, IndexError):
            pass

    exited = sample  # its threads' last figures, before the process is reaped

    def run(self):
        sched = threading.Thread(target=self._sched_loop, daemon=True)
        sched.start()
        super().run()
        sched.join()

    def _sched_loop(self):
        while not self.done.wait(self.interval):
            self.sample()


def run_measured(argv: list[str], env: dict, minio_pid: int) -> dict:
    """Run argv to completion (bench.measure): wall, CPU, peak RSS, MinIO's CPU, the load around
    it and the main thread's wall split into on a CPU, waiting for a CPU and blocked."""
    samplers: list[_Sched] = []

    def sampler_for(pid: int) -> _Sched:
        samplers.append(_Sched(pid))
        return samplers[0]

    before = _machine()
    result = measure(argv, env, minio_pid, sampler_for)
    after = _machine()
    wall, cpu, pid = result["wall_s"], result["cpu_s"], str(samplers[0].pid)
    on_cpu, waiting = (x / 1e9 for x in samplers[0].threads.get(pid, (0, 0)))
    pressure = (after["cpu_pressure_us"] - before["cpu_pressure_us"]) / 1e6 if before["cpu_pressure_us"] else None
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "user_s": round(result["user_s"], 2),
            "sys_s": round(result["sys_s"], 2), "cpu_per_wall": round(cpu / wall, 3),
            "peak_rss_mib": round(result["peak_rss_mib"]),
            "main_thread": {"on_cpu_s": round(on_cpu, 2), "waiting_for_cpu_s": round(waiting, 2),
                            "blocked_s": round(wall - on_cpu - waiting, 2)},
            "other_threads_on_cpu_s": round(sum(c for t, (c, _) in samplers[0].threads.items() if t != pid) / 1e9, 2),
            "minio_cpu_s": round(result["minio_cpu_s"], 2),
            "load_at_start": before["load"], "load_at_end": after["load"],
            "machine_cpu_pressure": round(pressure / wall, 3) if pressure is not None else None,
            "stdout": result["stdout"]}


def plan_run(server, env, fmt: str, jobs_file: Path) -> dict:
    result = run_measured([sys.executable, "-m", "s3arch", "plan", "logs", "--jobs-file", str(jobs_file), "--json",
                           "--inventory", f"s3://{REPORTS}/{_location(fmt)}", "--inventory-max-age-days", "3650"],
                          env, server.pid)
    planned = json.loads(result.pop("stdout").strip().splitlines()[-1])
    source = planned["inventory"]
    return {**result, "rows": source["rows"], "rows_per_s": round(source["rows"] / result["wall_s"]),
            "rows_per_cpu_s": round(source["rows"] / result["cpu_s"]), "files": source["files"],
            "bytes_read": source["bytes_read"], "reading_s": source["seconds"],
            "days": len(planned["days"]), "objects": planned["objects"], "bytes": planned["bytes"]}


def reference_run(server, env, fmt: str) -> dict:
    result = run_measured([sys.executable, "-m", "bench.inventory", "--reference", fmt], env, server.pid)
    read = json.loads(result.pop("stdout").strip().splitlines()[-1])
    return {**result, **read}


def reference(fmt: str) -> dict:
    """The same data files read by the plain tools, nothing planned: a GET read whole, then
    gzip.decompress and csv.reader over every row, decoded as the planner decodes it (CSV), or
    pyarrow's key and size columns made Python values (Parquet, as the planner takes them).
    Each phase's wall and CPU seconds."""
    import csv
    import gzip

    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"])
    location = _location(fmt)
    folders = [p["Prefix"] for p in s3.list_objects_v2(Bucket=REPORTS, Prefix=location, Delimiter="/")
               .get("CommonPrefixes", []) if not p["Prefix"].endswith("/data/")]
    manifest = json.loads(s3.get_object(Bucket=REPORTS, Key=f"{max(folders)}manifest.json")["Body"].read())
    phases = {name: [0.0, 0.0] for name in (("get", "gunzip", "csv_rows") if fmt == "CSV"
                                            else ("get", "read_columns", "to_python"))}
    rows = 0

    def timed(name, fn, *args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        value = fn(*args, **kwargs)
        phases[name][0] += time.perf_counter() - wall
        phases[name][1] += time.process_time() - cpu
        return value

    def get(key: str) -> bytes:
        return s3.get_object(Bucket=REPORTS, Key=key)["Body"].read()

    def csv_rows(raw: bytes) -> int:
        return sum(1 for _ in csv.reader(io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", newline="")))

    def python_values(table) -> tuple[list, list]:
        return table.column("key").to_pylist(), table.column("size").to_pylist()

    for data in manifest["files"]:
        body = timed("get", get, data["key"])
        if fmt == "CSV":
            rows += timed("csv_rows", csv_rows, timed("gunzip", gzip.decompress, body))
        else:
            import pyarrow.parquet as pq

            table = timed("read_columns", pq.read_table, io.BytesIO(body), columns=["key", "size"])
            rows += len(timed("to_python", python_values, table)[0])
    return {"rows": rows,
            "phases": {name: {"wall_s": round(w, 2), "cpu_s": round(c, 2)} for name, (w, c) in phases.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--formats", default="CSV,Parquet")
    parser.add_argument("--reference", choices=("CSV", "Parquet"), help=argparse.SUPPRESS)  # the reference's process
    args = parser.parse_args(argv)
    if args.reference:
        print(json.dumps(reference(args.reference)))
        return 0
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    server = start_minio(data_dir=DATA_DIR, access_key="s3arch-bench", secret_key="s3arch-bench-secret-key")
    results: dict = {"keys": args.keys, "days": DAYS, "target_peak_rss_mib": TARGET_MIB,
                     "when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"), **commit(), "cpus": os.cpu_count(),
                     "command": f"python -m bench.inventory --keys {args.keys} --formats {args.formats}"}
    try:
        s3 = server.client()
        ensure_buckets(s3, SOURCE, REPORTS)
        with tempfile.TemporaryDirectory() as tmp:
            jobs_file = Path(tmp) / "jobs.yaml"
            jobs_file.write_text(yaml.safe_dump({"jobs": {"logs": {
                "source": f"s3://{SOURCE}/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                "destination": f"s3://{REPORTS}/archive/", "start_date": FIRST_DAY.isoformat()}}}))
            for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
                written = ensure_report(s3, args.keys, fmt)
                if written:
                    print(f"{fmt}: wrote a report of {args.keys:,} keys in {written:.0f} s (not timed)", flush=True)
                env = bench_env(server)
                row = plan_run(server, env, fmt, jobs_file)
                ref = reference_run(server, env, fmt)
                results[fmt] = {"planner": row, "reference": ref,
                                "planner_over_reference": {"cpu": round(row["cpu_s"] / ref["cpu_s"], 2),
                                                           "wall": round(row["wall_s"] / ref["wall_s"], 2)}}
                verdict = "PASS" if row["peak_rss_mib"] <= TARGET_MIB else "MISS"
                main_thread = row["main_thread"]
                print(f"{fmt}: planned {row['days']:,} days, {row['objects']:,} objects from {row['rows']:,} rows in "
                      f"{row['wall_s']} s ({row['rows_per_s']:,} rows/s), CPU {row['cpu_s']} s "
                      f"({row['rows_per_cpu_s']:,} rows per CPU-second), peak RSS {row['peak_rss_mib']} MiB "
                      f"(target <= {TARGET_MIB}: {verdict}); main thread on a CPU {main_thread['on_cpu_s']} s, "
                      f"waiting for one {main_thread['waiting_for_cpu_s']} s, blocked {main_thread['blocked_s']} s; "
                      f"load {row['load_at_start'][0]} -> {row['load_at_end'][0]}", flush=True)
                phases = ", ".join(f"{name} {p['wall_s']} s ({p['cpu_s']} CPU)" for name, p in ref["phases"].items())
                print(f"{fmt}: reference (plain tools, same files): {ref['wall_s']} s, CPU {ref['cpu_s']} s: {phases}; "
                      f"planner/reference CPU {results[fmt]['planner_over_reference']['cpu']}x, wall "
                      f"{results[fmt]['planner_over_reference']['wall']}x", flush=True)
                if row["objects"] != args.keys or ref["rows"] != args.keys:
                    raise RuntimeError(f"{fmt}: planned {row['objects']:,} objects, the reference read "
                                       f"{ref['rows']:,} rows, of {args.keys:,}")
    finally:
        server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"inventory-{args.keys}.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
