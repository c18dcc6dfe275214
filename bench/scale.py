"""Scale, measured instead of projected: a 1,000,000-object day archived with the defaults.

    make bench-scale              # or: .venv/bin/python -m bench.scale [--objects N] [--no-reference]

Seeds (once: a marker object says the day is complete) a day of N small log files of 4-10 KiB
under 24 hourly folders into its own bucket on the bench's MinIO, written as tar batches that
MinIO unpacks (devtools.sample_data.put_extracted). Then, alternating nothing (each run is minutes):
- `s3arch archive` with the defaults (as many processes as CPUs: the prefix is segmented),
- the reference in the same invocation: the same archive with `--processes 1`,
- `s3arch verify` of the archive the default run made,
each printing wall time, objects/s, client CPU per object (the whole process tree: wait4
counts the segment workers the archiver waited for), peak RSS of the process tree, and the
server's CPU. Output: bench/results/scale-N.json.

The seeded day stays on the bench MinIO's data directory (.cache/bench-minio): deleting a
million objects costs about half an hour on this machine's ext4, seeding it again ~10 min.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import datetime, timezone

from bench.bench import DEFAULT_BUDGET_MIB, DEST_BUCKET, RESULTS, bench_env, ensure_buckets, measure, start_bench_minio
from bench.datasets import DAY
from devtools.sample_data import log_lines, put_extracted

SCALE_BUCKET = "bench-scale"
BODY_POOL = 2_000  # distinct log bodies; each object gets its own first line in front of one


def _prefix(objects: int) -> str:
    return f"day-{objects}/"


def _marker(objects: int) -> str:
    return f"_seeded/day-{objects}.json"


def _bodies(rng: random.Random) -> list[bytes]:
    pool = []
    for i in range(BODY_POOL):
        lines = log_lines(DAY, i % 24, 200, rng)
        pool.append(lines[: rng.randint(4 * 1024, 10 * 1024)])
    return pool


def _objects(objects: int):
    rng = random.Random(f"scale-{objects}")
    pool = _bodies(rng)
    prefix = _prefix(objects)
    per_hour = -(-objects // 24)
    for n in range(objects):
        hour, index = divmod(n, per_hour)
        key = f"{prefix}{hour:02d}/app-{index:06d}.log"
        yield key, f"{key} seq={n}\n".encode() + pool[n % BODY_POOL]


def seed_day(s3, objects: int) -> bool:
    """Seed the day unless its marker says it is complete. Returns True if it seeded."""
    ensure_buckets(s3, SCALE_BUCKET)
    try:
        s3.head_object(Bucket=SCALE_BUCKET, Key=_marker(objects))
        return False
    except s3.exceptions.ClientError:
        pass
    # A seeding that was interrupted is finished by writing every batch again: same keys, same bodies.
    written = put_extracted(s3, SCALE_BUCKET, _objects(objects))
    listed = sum(page.get("KeyCount", 0) for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=SCALE_BUCKET, Prefix=_prefix(objects)))
    if listed != objects:
        raise RuntimeError(f"seeding: {written} written, {listed} listed, {objects} expected")
    s3.put_object(Bucket=SCALE_BUCKET, Key=_marker(objects), Body=json.dumps({"objects": listed}).encode())
    return True


def seeded(server, objects: int):
    """The environment of the bench's processes and a client, once the day is seeded."""
    env, s3 = bench_env(server), server.client(max_pool_connections=32)
    started = time.monotonic()
    if seed_day(s3, objects):
        print(f"seeded {objects:,} objects in {time.monotonic() - started:.0f} s", flush=True)
    return env, s3


def _clear(s3, stem: str) -> None:
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=DEST_BUCKET, Prefix=stem)
            for o in page.get("Contents", [])]
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=DEST_BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i:i + 1000]]})


def _figures(result: dict, objects: int) -> dict:
    return {"wall_s": round(result["wall_s"], 1), "objects_per_s": round(objects / result["wall_s"]),
            "client_cpu_ms_per_object": round(1000 * result["cpu_s"] / objects, 3),
            "client_cpu_s": round(result["cpu_s"], 1), "peak_rss_mib": round(result["peak_rss_mib"]),
            "minio_cpu_s": round(result["minio_cpu_s"], 1)}


def archive_run(server, env, objects: int, name: str, extra: tuple = ()) -> tuple[dict, str]:
    s3 = server.client()
    dest = f"s3://{DEST_BUCKET}/scale-{name}/"
    _clear(s3, f"scale-{name}/")
    result = measure([sys.executable, "-m", "s3arch", "archive", f"s3://{SCALE_BUCKET}/{_prefix(objects)}", dest,
                      "--storage-class", "STANDARD", "--json", "--quiet", *extra], env, server.pid)
    summary = json.loads(result.pop("stdout").strip().splitlines()[-1])
    if summary["objects"] != objects:
        raise RuntimeError(f"{name}: archived {summary['objects']} objects of {objects}")
    figures = _figures(result, objects)
    figures.update(segments=summary.get("segments", 1), bytes_in=summary["bytes_in"],
                   bytes_out=summary["bytes_out"])
    return figures, summary["archive"]


def verify_run(server, env, objects: int, archive_url: str) -> dict:
    result = measure([sys.executable, "-m", "s3arch", "verify", archive_url], env, server.pid)
    result.pop("stdout")
    return _figures(result, objects)


def _line(name: str, f: dict) -> str:
    return (f"{name:<22} {f['wall_s']:>7.1f} s  {f['objects_per_s']:>6,} obj/s  "
            f"{f['client_cpu_ms_per_object']:.3f} ms CPU/object  peak RSS {f['peak_rss_mib']:>4} MiB  "
            f"MinIO CPU {f['minio_cpu_s']:.0f} s")


def cli_runs(server, env, objects: int, reference: bool = True) -> dict:
    """The day archived by `s3arch archive` with the defaults, that archive verified, and (with
    ``reference``) the same archive with --processes 1: the figures bench/results/scale-N.json holds."""
    results: dict = {"objects": objects, "when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
                     "load_average_1min_at_start": round(os.getloadavg()[0], 1)}
    results["archive_defaults"], archive_url = archive_run(server, env, objects, "defaults")
    print(_line("archive (defaults)", results["archive_defaults"]), flush=True)
    results["verify"] = verify_run(server, env, objects, archive_url)
    print(_line("verify", results["verify"]), flush=True)
    if reference:
        results["archive_processes_1"], _ = archive_run(server, env, objects, "processes-1", ("--processes", "1"))
        print(_line("archive --processes 1", results["archive_processes_1"]), flush=True)
        ratio = results["archive_defaults"]["wall_s"] / results["archive_processes_1"]["wall_s"]
        results["defaults_vs_processes_1_wall"] = round(ratio, 2)
        print(f"defaults / --processes 1 wall time: {ratio:.2f}", flush=True)
    results["load_average_1min_at_end"] = round(os.getloadavg()[0], 1)
    d = results["archive_defaults"]
    results["memory_budget_mib"] = DEFAULT_BUDGET_MIB
    print(f"defaults' process tree peak RSS {d['peak_rss_mib']} MiB against the {DEFAULT_BUDGET_MIB} MiB budget "
          f"+ 64 MiB: {'within' if d['peak_rss_mib'] <= DEFAULT_BUDGET_MIB + 64 else 'OVER'}", flush=True)
    print(f"archive {d['bytes_out'] / 2**20:,.0f} MiB from {d['bytes_in'] / 2**30:.1f} GiB "
          f"in {d['segments']} segment(s); load average {results['load_average_1min_at_start']} at the start, "
          f"{results['load_average_1min_at_end']} at the end", flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"scale-{objects}.json").write_text(json.dumps(results, indent=1) + "\n")
    return results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--no-reference", action="store_true", help="skip the --processes 1 run")
    args = parser.parse_args(argv)
    server = start_bench_minio()
    try:
        env, _ = seeded(server, args.objects)
        cli_runs(server, env, args.objects, reference=not args.no_reference)
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
