"""What segments cost against one pipeline, per object, on the same day in one invocation.

    .venv/bin/python -m bench.segments_cost [--objects 200000] [--repeat 2] [--segments 2]
                                            [--tree NAME=DIR ...] [--profile DIR] [--out NAME]

The synthetic source's virtual day (bench/synthetic_s3, no seeding; its other buckets passed
to the bench's MinIO) archived by ``s3arch archive``, alternating:
- ``one``: ``--processes 1``, one pipeline;
- ``segments``: ``--processes 2 --segments K --segment-min-objects 1`` (K segments on two
  worker processes, assembled by the parent), at a budget that holds two workers.
Each run: wall, client CPU of the process tree (wait4: the workers the archiver waited for
included) and per object, peak RSS of the tree, MinIO's and the synthetic server's CPU, the
1-minute load average before and after, and the segmented run's phases (plan, slowest segment,
assembly) and its CPU split (workers' start-up, clients, segments; the parent). The ratio is
of medians from this one invocation (the 2 cores are shared: compare ratios, not times).
``--tree NAME=DIR`` (repeatable): the engine imported from DIR (a folder holding ``s3arch``,
e.g. a link to an export's ``tasks``) instead of this checkout's, each tree's runs alternating
with the others' in the same invocation: before and after a change, measured side by side.
``--profile DIR``: one more run of each under ``py-spy record --subprocesses`` (every thread of
every process; collapsed stacks in DIR/NAME.txt; these runs' figures include py-spy's CPU).
Output: bench/results/segments-cost-N.json (or ``--out``), with the commit.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

from bench.bench import DEST_BUCKET, RESULTS, bench_env, measure, proc_cpu_seconds, start_bench_minio
from bench.scale import _clear
from bench.scale_synthetic import commit
from bench.synthetic_source import SyntheticSource

BUCKET, PREFIX, STEM = "bench-synthetic", "day/", "segments-cost/"
PHASES = ("plan_s", "slowest_segment_s", "assemble_archive_s", "assemble_manifest_s")
SPLIT = ("workers_startup_cpu_s", "workers_clients_cpu_s", "workers_segment_cpu_s")


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def run(server, source: SyntheticSource, env: dict, objects: int, extra: tuple, wrapper: tuple = ()) -> dict:
    _clear(server.client(), STEM)
    load, synthetic = _load(), proc_cpu_seconds(source.pid)
    result = measure([*wrapper, sys.executable, "-m", "s3arch", "archive", f"s3://{source.bucket}/{source.prefix}",
                      f"s3://{DEST_BUCKET}/{STEM}", "--storage-class", "STANDARD", "--json", "--quiet",
                      "--endpoint-url", source.endpoint_url, *extra], env, server.pid)
    summary = json.loads([line for line in result.pop("stdout").splitlines() if line.startswith("{")][-1])
    if (summary["status"], summary["objects"]) != ("archived", objects):
        raise RuntimeError(f"{extra}: {summary['status']}, {summary['objects']} objects of {objects}: {summary}")
    timings = summary.get("timings") or {}
    return {"wall_s": round(result["wall_s"], 2), "cpu_s": round(result["cpu_s"], 2),
            "cpu_ms_per_object": round(1000 * result["cpu_s"] / objects, 4),
            "peak_rss_mib": round(result["peak_rss_mib"]), "minio_cpu_s": round(result["minio_cpu_s"], 1),
            "synthetic_cpu_s": round(proc_cpu_seconds(source.pid) - synthetic, 1),
            "segments": summary.get("segments", 1), "bytes_out": summary["bytes_out"],
            "load_average_1min": {"before": load, "after": _load()},
            **{k: round(v, 3) for k, v in timings.items() if isinstance(v, (int, float))}}


def _summary(one: list[dict], seg: list[dict]) -> dict:
    med = {"one": statistics.median(r["cpu_ms_per_object"] for r in one),
           "segments": statistics.median(r["cpu_ms_per_object"] for r in seg)}
    return {
        "cpu_ms_per_object": med, "cpu_ratio": round(med["segments"] / med["one"], 3),
        "cpu_ratios_per_pair": [round(s["cpu_s"] / o["cpu_s"], 3) for o, s in zip(one, seg)],
        "wall_s": {"one": statistics.median(r["wall_s"] for r in one),
                   "segments": statistics.median(r["wall_s"] for r in seg)},
        "wall_ratio": round(statistics.median(r["wall_s"] for r in seg)
                            / statistics.median(r["wall_s"] for r in one), 3),
        "peak_rss_mib": {"one": max(r["peak_rss_mib"] for r in one), "segments": max(r["peak_rss_mib"] for r in seg)},
        "segments_phases_s": {p: statistics.median(r.get(p, 0.0) for r in seg) for p in PHASES},
        "segments_cpu_split_s": {**{p: statistics.median(r.get(p, 0.0) for r in seg) for p in SPLIT},
                                 "parent": round(statistics.median(r["cpu_s"] - sum(r.get(p, 0.0) for p in SPLIT)
                                                                   for r in seg), 2)},
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--segments", type=int, default=2)
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                        help="an engine to measure: DIR holds its s3arch package (default: this checkout's)")
    parser.add_argument("--profile", type=Path, help="also a run of each under py-spy, its stacks in this directory")
    parser.add_argument("--out", help="the result file's name in bench/results (default segments-cost-N.json)")
    args = parser.parse_args(argv)
    kinds = {"one": ("--processes", "1"),
             "segments": ("--processes", "2", "--segments", str(args.segments), "--segment-min-objects", "1",
                          "--memory-budget", "320MiB")}
    results: dict = {"objects": args.objects, "when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"),
                     **commit(), "cpus": os.cpu_count(), "load_average_1min_at_start": _load(),
                     "options": {k: " ".join(v) for k, v in kinds.items()}}
    trees = dict(t.split("=", 1) for t in args.tree) or {"checkout": ""}
    results["trees"] = trees
    results["runs"] = {f"{tree}/{k}": [] for tree in trees for k in kinds}
    out = RESULTS / (args.out or f"segments-cost-{args.objects}.json")
    server = start_bench_minio()
    try:
        with SyntheticSource(objects=args.objects, bucket=BUCKET, prefix=PREFIX, upstream=server) as source:
            env = {k: v for k, v in bench_env(server).items() if k != "AWS_ENDPOINT_URL_S3"}
            if os.environ.get("PYTHONPATH"):  # an export of a commit names its packages' folder first
                env["PYTHONPATH"] = f"{os.environ['PYTHONPATH']}{os.pathsep}{env['PYTHONPATH']}"
            for i in range(args.repeat):
                for (tree, path), (kind, extra) in ((t, k) for t in trees.items() for k in kinds.items()):
                    name = f"{tree}/{kind}"
                    tree_env = {**env, "PYTHONPATH": f"{path}{os.pathsep}{env['PYTHONPATH']}"} if path else env
                    r = run(server, source, tree_env, args.objects, extra)
                    results["runs"][name].append(r)
                    print(f"#{i + 1} {name:<18} {r['wall_s']:>7.1f} s  CPU {r['cpu_s']:>7.1f} s "
                          f"({r['cpu_ms_per_object']:.4f} ms/object)  peak RSS {r['peak_rss_mib']} MiB  "
                          f"load {r['load_average_1min']}"
                          + (f"  plan {r.get('plan_s', 0):.1f} s, slowest segment {r.get('slowest_segment_s', 0):.1f}"
                             f" s, workers' CPU start {r.get('workers_startup_cpu_s', 0):.2f} clients "
                             f"{r.get('workers_clients_cpu_s', 0):.2f} segments {r.get('workers_segment_cpu_s', 0):.1f}"
                             if kind == "segments" else ""), flush=True)
            if args.profile:
                args.profile.mkdir(parents=True, exist_ok=True)
                spy = str(Path(sys.executable).with_name("py-spy"))
                path = next(iter(trees.values()))
                for name, extra in kinds.items():
                    tree_env = {**env, "PYTHONPATH": f"{path}{os.pathsep}{env['PYTHONPATH']}"} if path else env
                    wrapper = (spy, "record", "--subprocesses", "--threads", "--rate", "100", "--format", "raw",
                               "--output", str(args.profile / f"{name}.txt"), "--")
                    results.setdefault("profiled", {})[name] = run(server, source, tree_env, args.objects, extra,
                                                                   wrapper)
    finally:
        server.stop()
    results["summary"] = {tree: _summary(results["runs"][f"{tree}/one"], results["runs"][f"{tree}/segments"])
                          for tree in trees}
    results["load_average_1min_at_end"] = _load()
    RESULTS.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    for tree, t in results["summary"].items():
        print(f"{tree}: CPU per object: one pipeline {t['cpu_ms_per_object']['one']:.4f} ms, {args.segments} segments "
              f"{t['cpu_ms_per_object']['segments']:.4f} ms: {t['cpu_ratio']:.3f}x (pairs {t['cpu_ratios_per_pair']}); "
              f"wall {t['wall_ratio']:.2f}x; peak RSS {t['peak_rss_mib']}; CPU split of the segments "
              f"{t['segments_cpu_split_s']}", flush=True)
    print(f"load {results['load_average_1min_at_start']} -> {results['load_average_1min_at_end']}; "
          f"wrote {out.relative_to(RESULTS.parent.parent)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
