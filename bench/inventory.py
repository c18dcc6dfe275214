"""Planning a three-year backfill from an S3 Inventory report of 10,000,000 keys, measured.

    .venv/bin/python -m bench.inventory [--keys N] [--formats CSV,Parquet]

Writes (once per format: the report stays in .cache/inventory-minio) a report of N keys of a
log bucket, spread over 1,096 days (2023-11-01 .. 2026-10-31, 24 hourly folders a day), as S3
writes it (devtools/inventory_reports.py: data files of 1,000,000 rows, manifest.json,
manifest.checksum). Then `s3arch plan JOB --json` plans every day from it, and the bench
records its wall time, CPU, the peak RSS of its process (sampled from /proc every 20 ms) and
what it read. Target: the whole report planned within 300 MiB. Output:
bench/results/inventory-N.json.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import yaml

from bench.bench import RESULTS, bench_env, ensure_buckets, measure
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


def plan_run(server, env, fmt: str, jobs_file: Path) -> dict:
    result = measure([sys.executable, "-m", "s3arch", "plan", "logs", "--jobs-file", str(jobs_file), "--json",
                      "--inventory", f"s3://{REPORTS}/{_location(fmt)}", "--inventory-max-age-days", "3650"],
                     env, server.pid)
    planned = json.loads(result.pop("stdout").strip().splitlines()[-1])
    source = planned["inventory"]
    return {"wall_s": round(result["wall_s"], 1), "cpu_s": round(result["cpu_s"], 1),
            "peak_rss_mib": round(result["peak_rss_mib"]), "rows": source["rows"], "files": source["files"],
            "bytes_read": source["bytes_read"], "reading_s": source["seconds"], "days": len(planned["days"]),
            "objects": planned["objects"], "bytes": planned["bytes"],
            "rows_per_s": round(source["rows"] / max(source["seconds"], 1e-9))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=10_000_000)
    parser.add_argument("--formats", default="CSV,Parquet")
    args = parser.parse_args(argv)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    server = start_minio(data_dir=DATA_DIR, access_key="s3arch-bench", secret_key="s3arch-bench-secret-key")
    results: dict = {"keys": args.keys, "days": DAYS, "target_peak_rss_mib": TARGET_MIB,
                     "when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
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
                    print(f"{fmt}: wrote a report of {args.keys:,} keys in {written:.0f} s", flush=True)
                row = results[fmt] = plan_run(server, bench_env(server), fmt, jobs_file)
                verdict = "PASS" if row["peak_rss_mib"] <= TARGET_MIB else "MISS"
                print(f"{fmt}: planned {row['days']:,} days, {row['objects']:,} objects from {row['rows']:,} rows "
                      f"in {row['wall_s']} s ({row['rows_per_s']:,} rows/s), CPU {row['cpu_s']} s, peak RSS "
                      f"{row['peak_rss_mib']} MiB (target <= {TARGET_MIB}: {verdict})", flush=True)
                if row["objects"] != args.keys:
                    raise RuntimeError(f"{fmt}: planned {row['objects']:,} objects of {args.keys:,}")
    finally:
        server.stop()
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"inventory-{args.keys}.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
