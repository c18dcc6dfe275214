"""Restore to S3: `s3arch extract ARCHIVE --to s3://...` against `s5cmd cp DIR/ s3://...` of the
same files from a local directory (issue 33 item 8: >= 0.8 of s5cmd's objects/s at 0 and at
40 ms per response).

The data set (``small`` by default: 20,000 log files of ~8 KiB) is archived once into the
bench's MinIO and copied once to /dev/shm for s5cmd; then, through one toxiproxy without and
with latency, each run of ours is followed by a run of s5cmd (alternating, so drift on a
shared machine hits both), each into a prefix emptied beforehand (untimed). Prints objects/s,
client CPU per object and peak RSS, median [min-max], and ours/s5cmd objects/s per pair.

    .venv/bin/python -m bench.restore_to_s3 [--set small] [--repeat 3]
    bench/run --sets restore              # the same, as a line of the whole bench
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from bench.bench import (DEST_BUCKET, LATENCY_JITTER_MS, LATENCY_MS, S5CMD, bench_env, fmt, measure, spread,
                         start_bench_minio, verdict)
from bench.datasets import SETS, SOURCE_BUCKET, seed
from bench.latency import LatencyProxy
from devtools.servers import ROOT

TARGET = 0.8  # ours/s5cmd objects/s
STAGING = Path("/dev/shm/s3arch-bench-restore")


def _archived(ds, env) -> str:
    """The data set's archive, made once: a second `archive` of the prefix finds it and skips."""
    subprocess.run([sys.executable, "-m", "s3arch", "archive", f"s3://{SOURCE_BUCKET}/{ds.prefix}",
                    f"s3://{DEST_BUCKET}/restore-archive/", "--storage-class", "STANDARD", "--json", "--quiet"],
                   env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return f"s3://{DEST_BUCKET}/restore-archive/{SOURCE_BUCKET}/{ds.prefix.rstrip('/')}.tar.gz"


def _empty(server, prefix: str) -> None:
    subprocess.run([str(S5CMD), "--endpoint-url", server.endpoint_url, "rm", f"s3://{DEST_BUCKET}/{prefix}*"],
                   env=bench_env(server), check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_extract(ds, server, env, archive: str) -> dict:
    _empty(server, "restore-ours/")
    result = measure([sys.executable, "-m", "s3arch", "extract", archive, "--to", f"s3://{DEST_BUCKET}/restore-ours/",
                      "--json"], env, server.pid)
    summary = json.loads(result.pop("stdout").strip().splitlines()[-1])
    if summary["objects"] != ds.objects:
        raise RuntimeError(f"ours extracted {summary['objects']} objects of {ds.objects}")
    return result


def run_s5cmd_upload(ds, server, env, endpoint: str) -> dict:
    """One timed `s5cmd cp`; once more if it failed (on this loaded machine MinIO has answered
    a few of its 256 concurrent PUTs with 400 IncompleteBody), saying so."""
    for attempt in (1, 2):
        _empty(server, "restore-s5cmd/")
        try:
            result = measure(["bash", "-c", f"{S5CMD} --endpoint-url {endpoint} cp {STAGING}/ "
                              f"s3://{DEST_BUCKET}/restore-s5cmd/ >/dev/null"], env, server.pid)
            break
        except RuntimeError as exc:
            if attempt == 2:
                raise
            print(f"  s5cmd cp failed, run again: {str(exc).splitlines()[-1][:200]}", flush=True)
    result.pop("stdout")
    return result


def _side(ds, runs: list[dict]) -> dict:
    wall = spread(runs, "wall_s")
    return {"objects_per_s": {"median": ds.objects / wall["median"], "min": ds.objects / wall["max"],
                              "max": ds.objects / wall["min"]},
            "cpu_ms_per_object": spread([{"v": r["cpu_s"] * 1000 / ds.objects} for r in runs], "v"),
            "peak_rss_mib": spread(runs, "peak_rss_mib"),
            "minio_cpu_ms_per_object": spread([{"v": r["minio_cpu_s"] * 1000 / ds.objects} for r in runs], "v")}


def restore_line(ds, server, env, repeat: int) -> dict:
    archive = _archived(ds, env)
    shutil.rmtree(STAGING, ignore_errors=True)
    subprocess.run([str(S5CMD), "--endpoint-url", server.endpoint_url, "cp", f"s3://{SOURCE_BUCKET}/{ds.prefix}*",
                    f"{STAGING}/"], env=env, check=True, stdout=subprocess.DEVNULL)
    proxy = LatencyProxy(server.endpoint_url.split("://", 1)[1])
    line: dict = {"set": ds.name, "objects": ds.objects, "latency_jitter_ms": LATENCY_JITTER_MS, "verdicts": []}
    try:
        via = {**env, "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}
        for ms in (0, LATENCY_MS):
            proxy.set_latency(ms, LATENCY_JITTER_MS if ms else 0)
            ours, s5 = [], []
            for i in range(repeat):
                ours.append(run_extract(ds, server, via, archive))
                s5.append(run_s5cmd_upload(ds, server, env, proxy.endpoint_url))
                print(f"  restore {ms} ms #{i + 1}: ours {ours[-1]['wall_s']:.2f}s, s5cmd cp {s5[-1]['wall_s']:.2f}s",
                      flush=True)
            ratio = spread([{"r": s["wall_s"] / o["wall_s"]} for o, s in zip(ours, s5)], "r")
            row = {"ours": _side(ds, ours), "s5cmd": _side(ds, s5), "ours_vs_s5cmd": ratio,
                   "runs": {"ours": ours, "s5cmd": s5}}
            line[f"{ms}ms"] = row
            for tool in ("ours", "s5cmd"):
                side = row[tool]
                print(f"restore {ms} ms {tool:<6} {fmt(side['objects_per_s'], 0)} objects/s, client CPU "
                      f"{fmt(side['cpu_ms_per_object'], 3)} ms/object, peak RSS {fmt(side['peak_rss_mib'], 0)} MiB, "
                      f"MinIO CPU {fmt(side['minio_cpu_ms_per_object'], 3)} ms/object", flush=True)
            line["verdicts"].append(f"{verdict(ratio['median'] >= TARGET)}  restore ours/s5cmd cp objects/s at {ms} ms "
                                    f"{fmt(ratio)} (target >= {TARGET})")
            print(line["verdicts"][-1], flush=True)
    finally:
        proxy.stop()
        shutil.rmtree(STAGING, ignore_errors=True)
    return line


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default="small", choices=sorted(SETS))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if not S5CMD.exists():
        parser.error(f"{S5CMD} is missing: run `make bench-tools`")
    server = start_bench_minio()
    try:
        env, ds = bench_env(server), SETS[args.set]
        seed(ds, server.client(max_pool_connections=32), [str(S5CMD), "--endpoint-url", server.endpoint_url], env)
        line = restore_line(ds, server, env, args.repeat)
        print("\nobjects/s, CPU and RSS: median [min-max] of the runs; ratios: per alternating pair\n")
        print("\n".join(line["verdicts"]))
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
