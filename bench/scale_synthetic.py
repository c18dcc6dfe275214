"""A day of ten million objects without seeding: the synthetic S3 endpoint's virtual day
(bench/synthetic_s3, bench/synthetic_source.py) archived by the CLI into the bench's MinIO.

    make bench-scale-10m    # or: .venv/bin/python -m bench.scale_synthetic [--objects N]
                            #         [--runs processes-1,defaults] [--sample 2000] [--keep]

Seeding MinIO runs at ~1,150 PUTs/s here (hours for 10M objects); the synthetic endpoint
computes each object from its key instead, and passes every request for another bucket to
MinIO unchanged (``--upstream``), so ``s3arch archive --endpoint-url SYNTHETIC`` reads the
virtual day from it and writes the archive into MinIO through it, as the CLI takes one endpoint.

For each run (``--processes 1``, then the defaults; on this 2-CPU machine with a loopback
endpoint the defaults are one process too, config.default_processes), into its own
destination stem: wall time, objects/s, client CPU-seconds and per object (the whole process
tree: wait4), peak RSS of the process tree, MinIO's and the synthetic server's CPU (the
latter serves the day and passes the archive's upload through), the 1-minute load average
before and after (the machine is shared). Then the archive is verified:
- the manifest's keys, sizes and ETags equal the listing's, record for record, in order (the
  listing read page by page from the synthetic endpoint, parsed here, not by the engine);
- ``--sample`` objects spread over the day fetched again: the MD5 of the bytes served is the
  ETag, their SHA-256 the manifest's (which ``s3arch verify`` checks each member against);
- ``s3arch verify`` (against MinIO): every member read back and checked against the manifest.
Each archive is deleted after its verification unless ``--keep`` (a 10M archive is ~15 GB).
Output: bench/results/scale-synthetic-N.json (saved after each run), with the commit.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import json
import os
import random
import re
import subprocess
import sys
import time
from datetime import datetime, timezone

from bench.bench import (DEFAULT_BUDGET_MIB, DEST_BUCKET, RESULTS, bench_env, measure, proc_cpu_seconds,
                         start_bench_minio)
from bench.scale import _clear, _figures, _line
from bench.synthetic_source import SyntheticSource, list_page_body
from devtools.servers import ROOT

BUCKET, PREFIX = "bench-synthetic", "day/"
RUNS = {"processes-1": ("--processes", "1"), "defaults": ()}
# One entry of the synthetic endpoint's listing page, as it writes it (bench/synthetic_s3/main.go).
ENTRY = re.compile(rb"<Contents><Key>([^<]*)</Key><LastModified>[^<]*</LastModified>"
                   rb"<ETag>&quot;([0-9a-f]{32})&quot;</ETag><Size>(\d+)</Size>")
TOKEN = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")


def _stem(name: str) -> str:
    return f"scale-synthetic-{name}/"


def commit() -> dict:
    """The commit measured, and how many tracked files differed from it. Read-only git calls
    (--no-optional-locks: not even the index's stat cache is written). A tree that is no git
    checkout (an export of a commit, measured while others edit the checkout) names its
    commit in S3ARCH_BENCH_COMMIT."""
    def git(*args: str) -> str | None:
        proc = subprocess.run(["git", "--no-optional-locks", *args], cwd=ROOT, capture_output=True, text=True)
        return proc.stdout.strip() if proc.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if head is None:
        return {"commit": os.environ.get("S3ARCH_BENCH_COMMIT", "unknown"), "uncommitted_tracked_files": None,
                "tree": "not a git checkout"}
    return {"commit": head, "uncommitted_tracked_files": len((git("diff", "--name-only", "HEAD") or "").splitlines())}


def listing(source: SyntheticSource):
    """(key, size, ETag) of every object of the day, from the endpoint's pages in key order."""
    connection = source.connection()
    token = None
    try:
        while True:
            body = list_page_body(connection, source.bucket, source.prefix, token)
            for key, etag, size in ENTRY.findall(body):
                text = key.decode()
                yield (html.unescape(text) if "&" in text else text), int(size), f'"{etag.decode()}"'
            found = TOKEN.search(body)
            if found is None:
                return
            token = found.group(1).decode()
    finally:
        connection.close()


def manifest_records(s3, archive_url: str):
    """The manifest's records, streamed from MinIO (gzip JSON Lines, docs/FORMAT.md)."""
    bucket, key = archive_url.removeprefix("s3://").split("/", 1)
    for suffix in (".tar.gz", ".tar.zst"):
        key = key.removesuffix(suffix)
    body = s3.get_object(Bucket=bucket, Key=key + ".manifest.jsonl.gz")["Body"]
    with gzip.GzipFile(fileobj=body) as lines:
        for line in lines:
            yield json.loads(line)


def check_manifest(s3, source: SyntheticSource, archive_url: str, objects: int, sample: int) -> dict:
    """The manifest against the listing, record for record; then ``sample`` objects fetched
    again against both (MD5 = ETag, SHA-256 = the manifest's)."""
    started = time.monotonic()
    picked = set(random.Random(objects).sample(range(objects), min(sample, objects)))
    kept: list[dict] = []
    listed = listing(source)
    records = manifest_records(s3, archive_url)
    header = next(records)
    if header.get("type") != "header":
        raise RuntimeError(f"the manifest begins with {header!r}")
    compared, summary = 0, None
    for record in records:
        if record["type"] == "summary":
            summary = record
            break
        entry = next(listed, None)
        if entry is None or (record["key"], record["size"], record["etag"]) != entry:
            raise RuntimeError(f"manifest record {compared + 1} is {record['key']!r} ({record['size']} bytes, "
                               f"{record['etag']}); the listing has {entry!r}")
        if compared in picked:
            kept.append(record)
        compared += 1
    left = next(listed, None)
    if left is not None or compared != objects or summary is None or summary["objects"] != objects:
        raise RuntimeError(f"{compared} manifest records of {objects} objects; summary {summary!r}; "
                           f"the listing goes on with {left!r}")
    listed_s = time.monotonic() - started
    connection = source.connection()
    try:
        for record in kept:
            body = source.fetch(record["key"], connection)
            if len(body) != record["size"] or f'"{hashlib.md5(body).hexdigest()}"' != record["etag"] \
                    or hashlib.sha256(body).hexdigest() != record["sha256"]:
                raise RuntimeError(f"{record['key']!r}: the bytes served again differ from the manifest's record")
    finally:
        connection.close()
    return {"records": compared, "bytes": summary["bytes"], "seconds": round(listed_s, 1),
            "sampled_objects": len(kept), "sample_seconds": round(time.monotonic() - started - listed_s, 1)}


def _load() -> float:
    return round(os.getloadavg()[0], 1)


def archive_run(server, source: SyntheticSource, env: dict, objects: int, name: str) -> tuple[dict, str]:
    """The day archived by ``s3arch archive --endpoint-url SYNTHETIC`` with the run's options."""
    s3 = server.client()
    _clear(s3, _stem(name))
    load_before, synthetic_before = _load(), proc_cpu_seconds(source.pid)
    result = measure([sys.executable, "-m", "s3arch", "archive", f"s3://{source.bucket}/{source.prefix}",
                      f"s3://{DEST_BUCKET}/{_stem(name)}", "--storage-class", "STANDARD", "--json", "--quiet",
                      "--endpoint-url", source.endpoint_url, *RUNS[name]], env, server.pid)
    synthetic_cpu = proc_cpu_seconds(source.pid) - synthetic_before
    summary = json.loads(result.pop("stdout").strip().splitlines()[-1])
    if (summary["status"], summary["objects"]) != ("archived", objects):
        raise RuntimeError(f"{name}: {summary['status']}, {summary['objects']} objects of {objects}")
    figures = _figures(result, objects)
    figures.update(synthetic_cpu_s=round(synthetic_cpu, 1), segments=summary.get("segments", 1),
                   bytes_in=summary["bytes_in"], bytes_out=summary["bytes_out"], archive=summary["archive"],
                   load_average_1min={"before": load_before, "after": _load()})
    return figures, summary["archive"]


def verify_run(server, env: dict, objects: int, archive_url: str) -> dict:
    """``s3arch verify`` of the archive, against MinIO where it is."""
    load_before = _load()
    result = measure([sys.executable, "-m", "s3arch", "verify", archive_url, "--json"], env, server.pid)
    report = json.loads(result.pop("stdout").strip().splitlines()[-1])
    if (report["status"], report["objects"]) != ("verified", objects):
        raise RuntimeError(f"s3arch verify {archive_url}: {report}")
    return {**_figures(result, objects), "load_average_1min": {"before": load_before, "after": _load()}}


def _print_run(name: str, f: dict) -> None:
    synthetic = f"  synthetic-s3 CPU {f['synthetic_cpu_s']:,.0f} s" if "synthetic_cpu_s" in f else ""
    print(f"{_line(name, f)}  client CPU {f['client_cpu_s']:,.0f} s{synthetic}  load "
          f"{f['load_average_1min']['before']} -> {f['load_average_1min']['after']}", flush=True)


def _save(results: dict) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"scale-synthetic-{results['objects']}.json").write_text(json.dumps(results, indent=1) + "\n")


def _against_smaller(results: dict) -> None:
    """Per-object time, CPU and peak RSS against the largest smaller day measured before."""
    smaller = []
    for path in RESULTS.glob("scale-synthetic-*.json"):
        try:
            other = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if other.get("objects", 0) < results["objects"] and other.get("runs"):
            smaller.append(other)
    if not smaller:
        return
    other = max(smaller, key=lambda r: r["objects"])
    for name, run in results["runs"].items():
        before = other["runs"].get(name)
        if before:
            print(f"{name}: {other['objects']:,} -> {results['objects']:,} objects: wall per object x"
                  f"{run['wall_s'] / run['objects'] / (before['wall_s'] / before['objects']):.2f}, CPU per object x"
                  f"{run['client_cpu_ms_per_object'] / before['client_cpu_ms_per_object']:.2f}, peak RSS "
                  f"{before['peak_rss_mib']} -> {run['peak_rss_mib']} MiB (from {other['when']}, load "
                  f"{before['load_average_1min']} then)", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=10_000_000)
    parser.add_argument("--runs", default=",".join(RUNS), help=f"which CLI runs, in order ({', '.join(RUNS)})")
    parser.add_argument("--sample", type=int, default=2000, help="objects fetched again to check their bytes")
    parser.add_argument("--keep", action="store_true", help="keep each archive in the bench MinIO")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.runs.split(",") if n.strip()]
    if not names or set(names) - RUNS.keys():
        parser.error(f"--runs: choose from {', '.join(RUNS)}")

    results: dict = {"objects": args.objects, "when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
                     **commit(), "cpus": os.cpu_count(), "load_average_1min_at_start": _load(),
                     "memory_budget_mib": DEFAULT_BUDGET_MIB, "runs": {}}
    tree = results.get("tree") or f"{results['uncommitted_tracked_files']} tracked files changed"
    print(f"commit {results['commit']} ({tree}), "
          f"{args.objects:,} objects, load average {results['load_average_1min_at_start']}", flush=True)
    server = start_bench_minio()
    try:
        with SyntheticSource(objects=args.objects, bucket=BUCKET, prefix=PREFIX, upstream=server) as source:
            results["source"] = {"server": "bench/synthetic_s3", "bucket": BUCKET, "prefix": PREFIX,
                                 "size_min": source.size_min, "size_max": source.size_max, "seed": source.seed,
                                 "per_host": source.per_host}
            # Only --endpoint-url names an endpoint: nothing goes around the synthetic server.
            env = {k: v for k, v in bench_env(server).items() if k != "AWS_ENDPOINT_URL_S3"}
            s3 = server.client()
            for name in names:
                run, archive_url = archive_run(server, source, env, args.objects, name)
                run["objects"] = args.objects
                results["runs"][name] = run
                _print_run(f"archive {name}", run)
                run["manifest_vs_listing"] = check_manifest(s3, source, archive_url, args.objects, args.sample)
                print(f"  manifest = listing: {run['manifest_vs_listing']}", flush=True)
                run["verify"] = verify_run(server, bench_env(server), args.objects, archive_url)
                _print_run("  s3arch verify", run["verify"])
                if not args.keep:
                    _clear(s3, _stem(name))
                _save(results)
    finally:
        server.stop()
    results["load_average_1min_at_end"] = _load()
    for name, run in results["runs"].items():
        print(f"{name}: {run['wall_s']:,.1f} s wall, {run['client_cpu_s']:,.1f} CPU-s, {run['objects_per_s']:,} obj/s, "
              f"{run['client_cpu_ms_per_object']:.3f} ms CPU/object, peak RSS {run['peak_rss_mib']} MiB "
              f"({'within' if run['peak_rss_mib'] <= DEFAULT_BUDGET_MIB + 64 else 'OVER'} the {DEFAULT_BUDGET_MIB} MiB "
              f"budget + 64), {run['segments']} segment(s), archive {run['bytes_out'] / 2**20:,.0f} MiB from "
              f"{run['bytes_in'] / 2**30:,.1f} GiB; load {run['load_average_1min']}; verified", flush=True)
    print(f"commit {results['commit']}; load average {results['load_average_1min_at_start']} at the start, "
          f"{results['load_average_1min_at_end']} at the end", flush=True)
    _against_smaller(results)
    _save(results)
    print(f"wrote {(RESULTS / f'scale-synthetic-{args.objects}.json').relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
