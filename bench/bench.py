"""Benchmark: our archiver against the fastest public pipeline, on the same MinIO, alternating.

Reference (what a strong engineer would run today):
    s5cmd cp 's3://SRC/PREFIX*' /dev/shm/dir && tar -C /dev/shm/dir -cf - . | pigz -p 2 -6 | s5cmd pipe s3://DEST/KEY
Ours:
    python -m s3arch archive s3://SRC/PREFIX/ s3://DEST/ours/ --storage-class STANDARD  (previous archive removed, untimed)

For every run: wall time, client CPU (user+sys of the whole process tree, from wait4),
peak RSS (sampled from /proc every 20 ms, summed over the process tree; for ours also the
kernel's VmHWM), the archive's size, and MinIO's own CPU time over the run (from /proc), so
the server's share of the machine is visible. Medians over --repeat runs per tool; ratios
are ours/reference. Results are printed and written to bench/results/<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from bench.datasets import SETS, SOURCE_BUCKET, seed
from bench.latency import LatencyProxy
from devtools.servers import ROOT, start_minio

DEST_BUCKET = "bench-out"
S5CMD = ROOT / ".cache" / "bin" / "s5cmd"
DATA_DIR = ROOT / ".cache" / "bench-minio"
REF_STAGING = Path("/dev/shm/s3arch-bench-ref")
RESULTS = ROOT / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

TARGETS = {  # ratio = our wall time / the reference's (median of the alternating pairs)
    "small": {"ratio": 0.9, "cpu_ms_per_object": 0.40},
    "medium": {"ratio": 0.5},
    "large": {"ratio": 0.35, "size_vs_ref": 1.15, "ratio_vs_rclone": 0.6},  # issue 33 (round 4)
}
DEFAULT_BUDGET_MIB = 256
LATENCY_MS, LATENCY_JITTER_MS = 40, 10
RCLONE = ROOT / ".cache" / "bin" / "rclone"


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def tree_cpu_seconds(root: int) -> float:
    """CPU-seconds of a process tree so far: each live process's own and its reaped children's
    (a child's CPU moves into its parent's count when reaped, so nothing is counted twice)."""
    total = 0.0
    for pid in _descendants(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15]) / CLK_TCK
    return total


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


class RssSampler(threading.Thread):
    """Peak of the summed RSS of a process tree, and the root's own VmHWM."""

    def __init__(self, pid: int, interval: float = 0.02):
        super().__init__(daemon=True)
        self.pid, self.interval = pid, interval
        self.peak_tree = 0
        self.hwm_root = 0
        self.done = threading.Event()

    def run(self):
        tree = [self.pid]
        last_scan = 0.0
        while not self.done.is_set():
            if time.monotonic() - last_scan > 0.2:  # new pipeline members appear over time
                tree, last_scan = _descendants(self.pid), time.monotonic()
            total = 0
            for pid in tree:
                try:
                    total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
                    if pid == self.pid:
                        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                            if line.startswith("VmHWM:"):
                                self.hwm_root = max(self.hwm_root, int(line.split()[1]) * 1024)
                except (OSError, ValueError, IndexError):
                    pass
            self.peak_tree = max(self.peak_tree, total)
            self.done.wait(self.interval)

    def exited(self) -> None:
        """The process has exited and is not reaped yet: a last look at what only it holds."""


def measure(argv: list[str], env: dict, minio_pid: int, sampler_for: Callable[[int], RssSampler] = RssSampler) -> dict:
    """Run argv to completion; return wall, client CPU, peak RSS and MinIO CPU. ``sampler_for``
    makes the process's sampler from its PID; its ``exited`` is called once the process has
    exited but is not yet reaped (its /proc entry is still there)."""
    minio_before = proc_cpu_seconds(minio_pid)
    start = time.monotonic()
    process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = sampler_for(process.pid)
    sampler.start()
    stdout_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: stdout_chunks.append(process.stdout.read()), daemon=True)
    reader.start()
    stderr = process.stderr.read()
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
    sampler.exited()
    _, status, rusage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    sampler.done.set()
    sampler.join()
    reader.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(map(str, argv))[:200]} exited {process.returncode}:\n"
                           f"{stderr.decode(errors='replace')[-2000:]}")
    return {"wall_s": wall, "cpu_s": rusage.ru_utime + rusage.ru_stime, "user_s": rusage.ru_utime,
            "sys_s": rusage.ru_stime, "peak_rss_mib": max(sampler.peak_tree, sampler.hwm_root) / 2**20,
            "minio_cpu_s": proc_cpu_seconds(minio_pid) - minio_before,
            "stdout": b"".join(stdout_chunks).decode(errors="replace")}


def _ours_argv(prefix: str, extra: tuple = ()) -> list[str]:
    return [sys.executable, "-m", "s3arch", "archive", f"s3://{SOURCE_BUCKET}/{prefix}",
            f"s3://{DEST_BUCKET}/ours/", "--storage-class", "STANDARD", "--json", "--quiet", *extra]


def _clear_ours(server, ds) -> None:
    """Remove the previous run's archive, untimed: every run is a first run, as a nightly one
    is (an --overwrite run would also count the source once more before starting)."""
    s3 = server.client()
    stem = f"ours/{SOURCE_BUCKET}/{ds.name}"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=DEST_BUCKET, Prefix=stem).get("Contents", [])]
    if keys:
        s3.delete_objects(Bucket=DEST_BUCKET, Delete={"Objects": [{"Key": k} for k in keys]})


def run_ours(ds, server, env, extra: tuple = ()) -> dict:
    _clear_ours(server, ds)
    result = measure(_ours_argv(ds.prefix, extra), env, server.pid)
    summary = json.loads(result.pop("stdout").strip().splitlines()[-1])
    if summary["objects"] != ds.objects:
        raise RuntimeError(f"ours archived {summary['objects']} objects of {ds.objects}")
    result["archive_bytes"] = summary["bytes_out"]
    result["bytes_in"] = summary["bytes_in"]
    result["segments"] = summary.get("segments", 1)
    result.update(summary.get("timings", {}))
    return result


def run_reference(ds, server, env, s3) -> dict:
    s5 = f"{S5CMD} --endpoint-url {server.endpoint_url}"
    staging = REF_STAGING / ds.name
    shutil.rmtree(staging, ignore_errors=True)
    key = f"reference/{ds.name}.tar.gz"
    pipeline = (f"set -euo pipefail; mkdir -p {staging}; "
                f"{s5} cp 's3://{SOURCE_BUCKET}/{ds.prefix}*' {staging}/ >/dev/null && "
                f"tar -C {staging} -cf - . | pigz -p 2 -6 | {s5} pipe s3://{DEST_BUCKET}/{key} >/dev/null")
    try:
        staged = 0
        result = measure(["bash", "-c", pipeline], env, server.pid)
        for dirpath, _, files in os.walk(staging):
            staged += sum(os.stat(os.path.join(dirpath, f)).st_blocks * 512 for f in files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result.pop("stdout")
    result["archive_bytes"] = s3.head_object(Bucket=DEST_BUCKET, Key=key)["ContentLength"]
    result["staged_in_dev_shm_mib"] = staged / 2**20
    return result


def run_rclone(ds, server, env, s3) -> dict:
    """The second reference: `rclone archive create` (v1.72), S3 to S3, no local staging."""
    key = f"rclone/{ds.name}.tar.gz"
    remote = {"RCLONE_CONFIG_BENCH_TYPE": "s3", "RCLONE_CONFIG_BENCH_PROVIDER": "Minio",
              "RCLONE_CONFIG_BENCH_ENDPOINT": server.endpoint_url,
              "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": server.access_key,
              "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": server.secret_key}
    result = measure([str(RCLONE), "archive", "create", f"bench:{SOURCE_BUCKET}/{ds.name}",
                      f"bench:{DEST_BUCKET}/{key}"], {**env, **remote}, server.pid)
    result.pop("stdout")
    result["archive_bytes"] = s3.head_object(Bucket=DEST_BUCKET, Key=key)["ContentLength"]
    return result


def run_s5cmd_cp(ds, server, env, endpoint: str) -> dict:
    """`s5cmd cp` of the prefix to /dev/shm: the fastest public way to fetch small objects."""
    staging = REF_STAGING / f"{ds.name}-cp"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        result = measure(["bash", "-c", f"{S5CMD} --endpoint-url {endpoint} cp "
                          f"'s3://{SOURCE_BUCKET}/{ds.prefix}*' {staging}/ >/dev/null"], env, server.pid)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    result.pop("stdout")
    return result


def spread(runs: list[dict], field: str) -> dict:
    """min, median and max: a swing between invocations shows as noise, not as a result."""
    values = [r[field] for r in runs]
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def ratios(ours: list[dict], ref: list[dict]) -> dict:
    """Spread of the wall-time ratio over the alternating pairs (run i of each)."""
    return spread([{"r": o["wall_s"] / r["wall_s"]} for o, r in zip(ours, ref)], "r")


def fmt(sp: dict, digits: int = 2) -> str:
    return f"{sp['median']:,.{digits}f} [{sp['min']:,.{digits}f}-{sp['max']:,.{digits}f}]"


def side(ds, runs: list[dict], bytes_in: int) -> dict:
    wall = spread(runs, "wall_s")
    out = {f: statistics.median(r[f] for r in runs) for f in runs[0] if isinstance(runs[0][f], (int, float))}
    return {**out, "wall": wall, "objects_per_s": ds.objects / wall["median"],
            "mb_per_s": bytes_in / 1e6 / wall["median"],
            "cpu_ms_per_object": 1000 * out["cpu_s"] / ds.objects,
            "peak_rss": spread(runs, "peak_rss_mib"), "runs": runs}


def summarise(ds, runs: dict[str, list[dict]]) -> dict:
    """``runs``: tool -> its runs; "ours" and "reference" always, "ours_64mib" and "rclone"
    where the set has them."""
    bytes_in = runs["ours"][0]["bytes_in"]
    row = {"set": ds.name, "description": ds.description, "objects": ds.objects, "bytes_in": bytes_in}
    for tool, tool_runs in runs.items():
        row[tool] = side(ds, tool_runs, bytes_in)
    row["ratio"] = ratios(runs["ours"], runs["reference"])
    row["size_vs_ref"] = row["ours"]["archive_bytes"] / row["reference"]["archive_bytes"]
    if "rclone" in runs:
        row["ratio_vs_rclone"] = ratios(runs["ours"], runs["rclone"])
    return row


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def check_targets(results: dict, extra: dict) -> list[str]:
    lines = []
    for name, row in results.items():
        for metric, limit in TARGETS.get(name, {}).items():
            if metric == "cpu_ms_per_object":
                value = row["ours"][metric]
            elif isinstance(row.get(metric), dict):
                value = row[metric]["median"]
            else:
                value = row[metric]
            lines.append(f"{verdict(value <= limit)}  {name:<7} {metric} {value:.3f} (target <= {limit})")
        for tool, budget in (("ours", DEFAULT_BUDGET_MIB), ("ours_64mib", 64)):
            if tool in row:
                rss = row[tool]["peak_rss"]["max"]
                lines.append(f"{verdict(rss <= budget + 64)}  {name:<7} peak RSS at a {budget} MiB budget: "
                             f"{rss:.0f} MiB, worst of {len(row[tool]['runs'])} (target <= budget + 64)")
    if "many" in results and "small" in results:
        flat = results["many"]["ours"]["peak_rss_mib"] / results["small"]["ours"]["peak_rss_mib"]
        lines.append(f"{verdict(flat <= 1.2)}  many/small peak RSS {flat:.2f} (target <= 1.2)")
    if "latency" in extra:
        lat = extra["latency"]
        lines.append(f"{verdict(lat['kept']['median'] >= 0.8)}  latency ours keeps {fmt(lat['kept'])} of its "
                     f"throughput with {LATENCY_MS} ms added (target >= 0.8)")
        lines.append(f"{verdict(lat['vs_s5cmd']['median'] >= 1.0)}  latency ours/s5cmd cp objects/s "
                     f"{fmt(lat['vs_s5cmd'])} (target >= 1.0)")
    if "segments" in extra:
        for name, row in extra["segments"].items():
            lines.append(f"{verdict(row['cpu_growth'] <= 1.15)}  segments {name}: client CPU per object "
                         f"{row['cpu_growth']:.2f}x with 2 segments (target <= 1.15)")
        if {"small", "many"} <= extra["segments"].keys():
            small, many = (extra["segments"][n]["phases_s"]["assemble_archive_s"]["median"] for n in ("small", "many"))
            lines.append(f"{verdict(many <= 2 * small + 0.2)}  segments archive assembly {small:.2f}s at 20,000 "
                         f"objects, {many:.2f}s at 200,000 (target: does not grow with objects)")
    if "plan" in extra:
        for name, target in (("local", 100_000), ("latency", 50_000)):
            rate = extra["plan"][name]["keys_per_s"]
            lines.append(f"{verdict(rate['median'] >= target)}  plan    1,000,000 keys listed and planned "
                         f"{'with ' + str(LATENCY_MS) + ' ms' if name == 'latency' else 'locally'}: "
                         f"{fmt(rate, 0)} keys/s (target >= {target:,})")
        cpu = extra["plan"]["local"]["cpu_us_per_key"]
        lines.append(f"{verdict(cpu['median'] <= PLAN_CPU_US_PER_KEY)}  plan    client CPU per listed and planned key "
                     f"{fmt(cpu, 1)} us (target <= {PLAN_CPU_US_PER_KEY})")
    for name in ("restore", "startup", "listing", "ownwork", "scale"):
        if name in extra:
            lines += extra[name]["verdicts"]
    if "getpath" in extra:
        paths = extra["getpath"]
        crt = paths["crt_meta_request"]["cpu_ms_per_object"]["median"]
        for name in ("plain", "obstore", "boto3"):
            lines.append(f"info  get path {name} / CRT meta-request client CPU per small GET: "
                         f"{paths[name]['cpu_ms_per_object']['median'] / crt:.2f}x "
                         f"({paths[name]['cpu_ms_per_object']['median']:.3f} vs {crt:.3f} ms)")
    if "fixed" in extra:
        trips = extra["fixed"]["round_trips"]
        lines.append(f"{verdict(round(trips['median']) <= 8)}  fixed cost {fmt(trips, 1)} sequential round trips per "
                     f"prefix (target <= 8)")
    if "latency" in extra:
        dry = extra["latency"]["dry_vs_run"]
        lines.append(f"{verdict(dry['with']['median'] <= 1.5)}  dry run / real run {fmt(dry['without'])} without "
                     f"latency, {fmt(dry['with'])} with (target: a dry run costs no more than the listing plus a "
                     "bounded sample: <= 1.5)")
    if "metadata" in extra:
        meta = extra["metadata"]
        lines.append(f"{verdict(meta['rate_with_vs_without']['median'] >= 0.9)}  metadata objects/s with attributes "
                     f"(10% tagged) vs without {fmt(meta['rate_with_vs_without'])} (target >= 0.9)")
        lines.append(f"{verdict(meta['cpu_growth'] <= 1.15)}  metadata client CPU per object {meta['cpu_growth']:.2f}x "
                     f"with attributes (target <= 1.15)")
    if "size" in extra:
        size = extra["size"]
        lines.append(f"{verdict(size['ratio']['median'] <= 0.5)}  size    gzip level {size['level']} (no larger "
                     f"than pigz -6: {size['size_vs_ref']:.3f}) time vs reference {fmt(size['ratio'])} (target <= 0.5)")
    return lines


def table(results: dict) -> str:
    header = ("set", "objects", "input", "ours s", "ref s", "ratio", "vs rclone", "ours obj/s", "ours MB/s",
              "CPU ms/obj ours/ref", "RSS MiB ours/ref", "64 MiB budget: s, RSS", "size vs ref")
    rows = [header]
    for name, r in results.items():
        o, f = r["ours"], r["reference"]
        small = r.get("ours_64mib")
        rows.append((name, f"{r['objects']:,}", f"{r['bytes_in'] / 2**20:,.0f} MiB", fmt(o["wall"]),
                     fmt(f["wall"]), fmt(r["ratio"]), fmt(r["ratio_vs_rclone"]) if "ratio_vs_rclone" in r else "-",
                     f"{o['objects_per_s']:,.0f}", f"{o['mb_per_s']:,.0f}",
                     f"{o['cpu_ms_per_object']:.3f} / {f['cpu_ms_per_object']:.3f}",
                     f"{o['peak_rss']['max']:.0f} / {f['peak_rss']['max']:.0f}",
                     f"{small['wall']['median']:.2f}, {small['peak_rss']['max']:.0f}" if small else "-",
                     f"{r['size_vs_ref']:.3f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" +
                     ("\n|" + "|".join("-" * (w + 2) for w in widths) + "|" if i == 0 else "")
                     for i, row in enumerate(rows))


def run_dry(ds, server, env) -> dict:
    """``--dry-run`` of the set: the listing and a bounded, parallel sample (of a prefix not
    archived yet, as the run it previews)."""
    _clear_ours(server, ds)
    result = measure(_ours_argv(ds.prefix, ("--dry-run",)), env, server.pid)
    summary = json.loads(result.pop("stdout").strip().splitlines()[-1])
    if summary["status"] != "dry_run" or summary["objects"] != ds.objects:
        raise RuntimeError(f"dry run: {summary}")
    return result


def latency_line(ds, server, env, repeat: int) -> dict:
    """Ours with and without LATENCY_MS per response, and `s5cmd cp` with it, all through the
    same toxiproxy in front of the same MinIO, alternating; ours' dry run likewise."""
    proxy = LatencyProxy(server.endpoint_url.split("://", 1)[1])
    try:
        via = {**env, "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}
        plain, slow, s5, dry_plain, dry_slow = [], [], [], [], []
        for i in range(repeat):
            proxy.set_latency(0)
            plain.append(run_ours(ds, server, via))
            dry_plain.append(run_dry(ds, server, via))
            proxy.set_latency(LATENCY_MS, LATENCY_JITTER_MS)
            slow.append(run_ours(ds, server, via))
            dry_slow.append(run_dry(ds, server, via))
            s5.append(run_s5cmd_cp(ds, server, env, proxy.endpoint_url))
            print(f"  latency #{i + 1}: ours {plain[-1]['wall_s']:.2f}s without, {slow[-1]['wall_s']:.2f}s with "
                  f"{LATENCY_MS} ms; s5cmd cp {s5[-1]['wall_s']:.2f}s with; dry run {dry_plain[-1]['wall_s']:.2f}s "
                  f"without, {dry_slow[-1]['wall_s']:.2f}s with", flush=True)
    finally:
        proxy.stop()
    kept = spread([{"r": p["wall_s"] / s["wall_s"]} for p, s in zip(plain, slow)], "r")
    vs = spread([{"r": c["wall_s"] / s["wall_s"]} for c, s in zip(s5, slow)], "r")
    line = {"set": ds.name, "latency_ms": LATENCY_MS, "jitter_ms": LATENCY_JITTER_MS, "kept": kept, "vs_s5cmd": vs,
            "ours_objects_per_s": {k: ds.objects / v for k, v in spread(slow, "wall_s").items()},
            "ours_no_latency_objects_per_s": {k: ds.objects / v for k, v in spread(plain, "wall_s").items()},
            "s5cmd_objects_per_s": {k: ds.objects / v for k, v in spread(s5, "wall_s").items()},
            "dry_vs_run": {"without": spread([{"r": d["wall_s"] / r["wall_s"]} for d, r in zip(dry_plain, plain)], "r"),
                           "with": spread([{"r": d["wall_s"] / r["wall_s"]} for d, r in zip(dry_slow, slow)], "r")},
            "runs": {"ours_no_latency": plain, "ours": slow, "s5cmd_cp": s5, "dry_no_latency": dry_plain,
                     "dry": dry_slow}}
    print(f"latency ({ds.name}, {LATENCY_MS}±{LATENCY_JITTER_MS} ms per response): ours "
          f"{line['ours_objects_per_s']['median']:,.0f} obj/s with, {line['ours_no_latency_objects_per_s']['median']:,.0f} "
          f"without (kept {fmt(kept)}); s5cmd cp {line['s5cmd_objects_per_s']['median']:,.0f} obj/s with "
          f"(ours/s5cmd {fmt(vs)})", flush=True)
    print(f"dry run ({ds.name}): {fmt(line['dry_vs_run']['without'])} of the real run's time without latency, "
          f"{fmt(line['dry_vs_run']['with'])} with", flush=True)
    return line


FIXED_COST_LATENCY_MS = 200


def fixed_cost_line(server, env, repeat: int) -> dict:
    """Sequential round trips a prefix costs beyond its objects: the one-object set through
    toxiproxy with no delay and with FIXED_COST_LATENCY_MS on every response, alternating;
    the difference in wall time over the delay is the number of round trips one after the
    other (its one LIST and one GET included), whatever the code believes it sends."""
    ds = SETS["single"]
    proxy = LatencyProxy(server.endpoint_url.split("://", 1)[1])
    try:
        via = {**env, "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}
        plain, slow = [], []
        for i in range(repeat):
            proxy.set_latency(0)
            plain.append(run_ours(ds, server, via))
            proxy.set_latency(FIXED_COST_LATENCY_MS)
            slow.append(run_ours(ds, server, via))
            print(f"  fixed cost #{i + 1}: {plain[-1]['wall_s']:.2f}s without, {slow[-1]['wall_s']:.2f}s with "
                  f"{FIXED_COST_LATENCY_MS} ms", flush=True)
    finally:
        proxy.stop()
    trips = spread([{"n": (s["wall_s"] - p["wall_s"]) * 1000 / FIXED_COST_LATENCY_MS} for p, s in zip(plain, slow)], "n")
    print(f"fixed cost: {fmt(trips, 1)} sequential round trips per archived prefix (one LIST and one GET "
          f"included)", flush=True)
    return {"latency_ms": FIXED_COST_LATENCY_MS, "round_trips": trips, "runs": {"without": plain, "with": slow}}


def segments_line(names: list[str], server, env, repeat: int) -> dict:
    """Each set at --processes 1 (one pipeline) and --processes 2 (two segments, assembled),
    alternating: client CPU per object, wall time, and the phases of the segmented run."""
    line = {}
    for name in names:
        ds = SETS[name]
        one, two = [], []
        for i in range(min(repeat, SLOW_SETS.get(name, repeat))):
            one.append(run_ours(ds, server, env, ("--processes", "1")))
            # 320 MiB: a budget that holds two workers (and their interpreters) besides the assembler
            two.append(run_ours(ds, server, env, ("--processes", "2", "--segment-min-objects", "1",
                                                  "--memory-budget", "320MiB")))
            print(f"  segments {name} #{i + 1}: 1 process {one[-1]['wall_s']:.2f}s, 2 segments {two[-1]['wall_s']:.2f}s "
                  f"(plan {two[-1]['plan_s']:.2f}s, slowest segment {two[-1]['slowest_segment_s']:.2f}s, assembly "
                  f"{two[-1]['assemble_archive_s']:.2f}s + manifest {two[-1]['assemble_manifest_s']:.2f}s)", flush=True)
        row = {"objects": ds.objects, "cpu_ms_per_object": {
            "one": 1000 * statistics.median(r["cpu_s"] for r in one) / ds.objects,
            "two": 1000 * statistics.median(r["cpu_s"] for r in two) / ds.objects},
            "wall_s": {"one": spread(one, "wall_s"), "two": spread(two, "wall_s")},
            "objects_per_s": {"one": ds.objects / spread(one, "wall_s")["median"],
                              "two": ds.objects / spread(two, "wall_s")["median"]},
            "peak_rss_mib": {"one": spread(one, "peak_rss_mib")["max"], "two": spread(two, "peak_rss_mib")["max"]},
            "phases_s": {f: spread(two, f) for f in ("plan_s", "slowest_segment_s", "assemble_archive_s",
                                                   "assemble_manifest_s")},
            "runs": {"one": one, "two": two}}
        row["cpu_growth"] = row["cpu_ms_per_object"]["two"] / row["cpu_ms_per_object"]["one"]
        # Where the second process's CPU goes (issue 33 item 4): each worker reports its own by
        # phase; the parent (its start, the plan, assembly and the manifest merge) is the rest.
        split = {f"workers_{p}": statistics.median(r.get(f"workers_{p}_cpu_s", 0.0) for r in two)
                 for p in ("startup", "clients", "segment")}
        split["parent"] = statistics.median(r["cpu_s"] - sum(r.get(f"workers_{p}_cpu_s", 0.0)
                                                            for p in ("startup", "clients", "segment")) for r in two)
        split["one_process"] = statistics.median(r["cpu_s"] for r in one)
        row["cpu_split_s"] = split
        line[name] = row
        print(f"segments ({name}): CPU {row['cpu_ms_per_object']['one']:.3f} -> {row['cpu_ms_per_object']['two']:.3f} "
              f"ms/object ({row['cpu_growth']:.2f}x), {row['objects_per_s']['one']:,.0f} -> "
              f"{row['objects_per_s']['two']:,.0f} obj/s, RSS {row['peak_rss_mib']['one']:.0f} -> "
              f"{row['peak_rss_mib']['two']:.0f} MiB", flush=True)
        print(f"  CPU split of 2 segments: workers' interpreter and imports {split['workers_startup']:.2f}s, their "
              f"clients {split['workers_clients']:.2f}s, their segments {split['workers_segment']:.2f}s; parent (start, "
              f"plan, assembly, manifest merge) {split['parent']:.2f}s; one process in all {split['one_process']:.2f}s",
              flush=True)
    return line


PLAN_OBJECTS = 1_000_000


def _synthetic_listing_server(objects: int, upstream: str) -> tuple[subprocess.Popen, str]:
    """The test fault proxy's synthetic listing in a process of its own (its CPU is not ours):
    ``synthetic/`` answers at once, ``distant/`` 40 ± 10 ms late, like S3 from a nearby region.
    Everything else goes to ``upstream``."""
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
            "from faultproxy import FaultProxy\n"
            f"p = FaultProxy({upstream!r}, max_lifetime=3600)\n"
            f"p.synthesize_listing('bench-src', 'synthetic/', {objects})\n"
            f"p.synthesize_listing('bench-src', 'distant/', {objects}, latency={LATENCY_MS / 1000}, "
            f"jitter={LATENCY_JITTER_MS / 1000})\n"
            "print(p.endpoint_url, flush=True)\ntime.sleep(3600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def plan_line(server, repeat: int) -> dict:
    """The segment plan of a 1,000,000-object prefix (a synthetic listing, served page by page,
    never stored) into 8 segments, with and without 40 ms on every page, alternating with one
    LIST after another of the same prefix (round 2's plan): keys/s and client CPU per key."""
    import boto3

    from s3arch.core.config import ArchiveSpec, S3Url
    from s3arch.io.listing import iter_pages
    from s3arch.produce.segments import plan_segments
    from s3arch.io.s3 import S3Clients

    proc, endpoint = _synthetic_listing_server(PLAN_OBJECTS, server.endpoint_url)
    line: dict = {"objects": PLAN_OBJECTS, "runs": []}
    try:
        session = boto3.Session(aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
                                region_name=server.region)
        clients = S3Clients.from_session(session, endpoint_url=endpoint)

        def timed(work) -> tuple[float, float]:
            cpu, started = time.process_time(), time.monotonic()
            work()
            return time.monotonic() - started, time.process_time() - cpu

        for i in range(repeat):
            for prefix, delay in (("synthetic/", 0), ("distant/", LATENCY_MS)):
                spec = ArchiveSpec(S3Url("bench-src", prefix), S3Url(DEST_BUCKET, "plan/"), processes=8)
                plan_s, plan_cpu = timed(lambda: plan_segments(spec, clients.store, "plan.tar.gz", 8))
                one_s, one_cpu = timed(lambda: sum(map(len, iter_pages(clients.store, "bench-src", prefix))))
                run = {"delay_ms": delay, "plan_keys_per_s": PLAN_OBJECTS / plan_s,
                       "plan_cpu_us_per_key": 1e6 * plan_cpu / PLAN_OBJECTS,
                       "sequential_keys_per_s": PLAN_OBJECTS / one_s,
                       "sequential_cpu_us_per_key": 1e6 * one_cpu / PLAN_OBJECTS}
                line["runs"].append(run)
                print(f"  plan #{i + 1} at {delay} ms: {run['plan_keys_per_s']:,.0f} keys/s "
                      f"({run['plan_cpu_us_per_key']:.1f} us CPU/key); one LIST after another "
                      f"{run['sequential_keys_per_s']:,.0f} keys/s ({run['sequential_cpu_us_per_key']:.1f} us/key)",
                      flush=True)
    finally:
        proc.kill()
    for delay, name in ((0, "local"), (LATENCY_MS, "latency")):
        runs = [r for r in line["runs"] if r["delay_ms"] == delay]
        line[name] = {"keys_per_s": spread(runs, "plan_keys_per_s"),
                      "cpu_us_per_key": spread(runs, "plan_cpu_us_per_key"),
                      "vs_sequential": {"median": statistics.median(r["plan_keys_per_s"] / r["sequential_keys_per_s"]
                                                                    for r in runs)}}
        print(f"plan ({name}): {fmt(line[name]['keys_per_s'], 0)} keys/s, "
              f"{line[name]['vs_sequential']['median']:.2f}x one LIST after another", flush=True)
    return line


GET_PATH_OBJECTS = 5_000
PLAN_CPU_US_PER_KEY = 10  # issue 33 item 5


def scale_line() -> dict:
    """The 1,000,000-object day is minutes of seeding and three runs of 10-15 minutes: its own
    target (``make bench-scale``). The bench prints its last measurement, dated, from the file
    that run wrote, so one invocation shows every line; a missing file is said, not invented."""
    found = sorted(RESULTS.glob("scale-[0-9]*.json"), key=lambda p: int(p.stem.split("-")[1]))  # the largest day
    if not found:
        return {"verdicts": ["info  scale   not measured on this machine: run `make bench-scale`"]}
    result = json.loads(found[-1].read_text())
    d, v, one = result["archive_defaults"], result["verify"], result["archive_processes_1"]
    line = (f"info  scale   {result['objects']:,} objects (`make bench-scale`, {result['when']}, "
            f"{found[-1].relative_to(ROOT)}): defaults {d['wall_s']:.0f} s, {d['client_cpu_ms_per_object']:.3f} ms "
            f"CPU/object, {d['peak_rss_mib']:.0f} MiB; --processes 1 {one['wall_s']:.0f} s, "
            f"{one['client_cpu_ms_per_object']:.3f} ms, {one['peak_rss_mib']:.0f} MiB; verify {v['wall_s']:.0f} s, "
            f"{v['peak_rss_mib']:.0f} MiB")
    print(line[6:], flush=True)
    return {"from": str(found[-1].relative_to(ROOT)), "measured": result, "verdicts": [line]}


def get_path_line(ds, server, repeat: int) -> dict:
    """Client CPU per small GET on the CRT meta-requests the archiver uses, obstore and boto3,
    alternating, on the first 5,000 objects of ``small`` (bench/get_paths.py)."""
    from bench.get_paths import PATHS

    s3 = server.client()
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(
        Bucket=SOURCE_BUCKET, Prefix=f"{ds.name}/", PaginationConfig={"MaxItems": GET_PATH_OBJECTS})
        for o in page.get("Contents", [])]
    runs: dict[str, list[dict]] = {name: [] for name in PATHS}
    for i in range(repeat):
        for name, fetch in PATHS.items():
            run = fetch(server, SOURCE_BUCKET, keys)
            run["cpu_ms_per_object"] = 1000 * run["cpu_s"] / len(keys)
            run["objects_per_s"] = len(keys) / run["wall_s"]
            runs[name].append(run)
        print(f"  get paths #{i + 1}: " + ", ".join(f"{name} {r[-1]['cpu_ms_per_object']:.3f} ms CPU/object "
                                                  f"({r[-1]['objects_per_s']:,.0f}/s)" for name, r in runs.items()),
              flush=True)
    sizes = {name: {r["bytes"] for r in rs} for name, rs in runs.items()}
    assert len(set().union(*sizes.values())) == 1, f"the paths fetched different bytes: {sizes}"
    line = {"objects": len(keys), "in_flight": 32,
            **{name: {"cpu_ms_per_object": spread(rs, "cpu_ms_per_object"), "objects_per_s": spread(rs, "objects_per_s"),
                      "runs": rs} for name, rs in runs.items()}}
    for name in PATHS:
        print(f"get path {name}: {fmt(line[name]['cpu_ms_per_object'], 3)} ms CPU/object, "
              f"{fmt(line[name]['objects_per_s'], 0)} objects/s", flush=True)
    return line


def size_line(ds, server, env, reference: dict, repeat: int) -> dict:
    """The lowest gzip level whose archive is no larger than pigz -6's, then its time
    against the reference pipeline's runs of the same invocation."""
    ref_bytes = reference["archive_bytes"]
    tried = {}
    for level in range(1, 10):
        run = run_ours(ds, server, env, ("--level", str(level)))
        tried[level] = run["archive_bytes"] / ref_bytes
        print(f"  size: level {level}: {tried[level]:.3f} of pigz -6 in {run['wall_s']:.2f}s", flush=True)
        if run["archive_bytes"] <= ref_bytes:
            break
    runs = [run] + [run_ours(ds, server, env, ("--level", str(level))) for _ in range(repeat - 1)]
    ratio = spread([{"r": r["wall_s"] / f["wall_s"]} for r, f in zip(runs, reference["runs"])], "r")
    print(f"size ({ds.name}): gzip level {level} is {tried[level]:.3f} of pigz -6's size, time "
          f"{fmt(ratio)} of the reference", flush=True)
    return {"set": ds.name, "level": level, "size_vs_ref": tried[level], "sizes_tried": tried, "ratio": ratio,
            "runs": runs}


def metadata_line(server, env, repeat: int) -> dict:
    """The small set against the same bytes carrying attributes (the tagged set: content type,
    cache control and user metadata on every object, two tags on every tenth), alternating:
    what capturing them costs in objects/s and client CPU per object."""
    plain_ds, tagged_ds = SETS["small"], SETS["tagged"]
    plain, tagged = [], []
    for i in range(repeat):
        plain.append(run_ours(plain_ds, server, env))
        tagged.append(run_ours(tagged_ds, server, env))
        print(f"  metadata #{i + 1}: without {plain[-1]['wall_s']:.2f}s, with {tagged[-1]['wall_s']:.2f}s", flush=True)
    rate = spread([{"r": p["wall_s"] / t["wall_s"]} for p, t in zip(plain, tagged)], "r")
    cpu = {name: 1000 * statistics.median(r["cpu_s"] for r in runs) / plain_ds.objects
           for name, runs in (("without", plain), ("with", tagged))}
    line = {"objects": plain_ds.objects, "rate_with_vs_without": rate, "cpu_ms_per_object": cpu,
            "cpu_growth": cpu["with"] / cpu["without"],
            "objects_per_s": {"without": plain_ds.objects / spread(plain, "wall_s")["median"],
                              "with": plain_ds.objects / spread(tagged, "wall_s")["median"]},
            "runs": {"without": plain, "with": tagged}}
    print(f"metadata: {line['objects_per_s']['with']:,.0f} obj/s with attributes and 10% tagged, "
          f"{line['objects_per_s']['without']:,.0f} without ({fmt(rate)}); client CPU {cpu['with']:.3f} vs "
          f"{cpu['without']:.3f} ms/object ({line['cpu_growth']:.2f}x)", flush=True)
    return line


LINES = {"latency": "day2k", "size": "medium", "segments": "small", "plan": "small", "getpath": "small",
         "metadata": "tagged", "fixed": "single", "restore": "small",
         # these seed their own data on the bench's server (or need none): "single" is a no-op
         "startup": "single", "listing": "single", "ownwork": "single", "scale": "single"}  # line -> its data set
SLOW_SETS = {"many": 3}  # at most this many runs: 200,000 objects take minutes per run


def ensure_buckets(s3, *buckets: str) -> None:
    """Create each bucket unless it exists (the bench's MinIO keeps them between runs)."""
    for bucket in buckets:
        try:
            s3.create_bucket(Bucket=bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass


def start_bench_minio():
    """The bench's MinIO on its data directory (the seeded sets survive between runs), with
    the source and destination buckets."""
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    server = start_minio(data_dir=DATA_DIR, access_key="s3arch-bench", secret_key="s3arch-bench-secret-key")
    try:
        ensure_buckets(server.client(), SOURCE_BUCKET, DEST_BUCKET)
    except BaseException:
        server.stop()
        raise
    return server


def bench_env(server) -> dict:
    """The environment of the processes a bench runs: the server's credentials, no others."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(server.env(), PYTHONPATH=str(ROOT))
    return env


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="small,medium,large,many,latency,size,metadata,fixed,segments,plan,getpath,"
                                          "restore,startup,listing,ownwork,scale",
                        help=f"data sets ({', '.join(SETS)}) and lines ({', '.join(LINES)}) to run")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--segments-on", default="small,many", help="the data sets the segments line runs on")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    unknown = set(names) - SETS.keys() - LINES.keys()
    if unknown:
        parser.error(f"unknown data set(s) {', '.join(sorted(unknown))}; known: {', '.join([*SETS, *LINES])}")
    for tool in (S5CMD, RCLONE):
        if not tool.exists():
            parser.error(f"{tool} is missing: run `make bench-tools`")

    server = start_bench_minio()
    try:
        env, s3 = bench_env(server), server.client(max_pool_connections=32)
        s5cmd_seed = [str(S5CMD), "--endpoint-url", server.endpoint_url]
        results, extra = {}, {}
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        RESULTS.mkdir(exist_ok=True)
        out = RESULTS / f"{stamp}.json"

        def save(targets: list[str]) -> None:  # after every line too: an interrupted run keeps what it measured
            out.write_text(json.dumps({
                "when": stamp, "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                "repeat": args.repeat, "results": results, "lines": extra, "targets": targets}, indent=1))

        for name in names:
            save([])
            ds = SETS[LINES.get(name, name)]
            started = time.monotonic()
            if seed(ds, s3, s5cmd_seed, env):
                print(f"seeded {ds.name}: {ds.description} in {time.monotonic() - started:.0f}s", flush=True)
            repeat = min(args.repeat, SLOW_SETS.get(ds.name, args.repeat))
            if name == "latency":
                extra[name] = latency_line(ds, server, env, repeat)
                continue
            if name == "segments":
                on = [n.strip() for n in args.segments_on.split(",") if n.strip()]
                for set_name in on:
                    if seed(SETS[set_name], s3, s5cmd_seed, env):
                        print(f"seeded {set_name}", flush=True)
                extra[name] = segments_line(on, server, env, args.repeat)
                continue
            if name == "plan":
                extra[name] = plan_line(server, repeat)
                continue
            if name == "getpath":
                extra[name] = get_path_line(ds, server, repeat)
                continue
            if name == "restore":
                from bench.restore_to_s3 import restore_line  # it imports this module

                extra[name] = restore_line(ds, server, env, repeat)
                continue
            if name == "startup":
                from bench.startup import startup_line  # it imports this module

                extra[name] = startup_line(server, repeat)
                continue
            if name == "listing":
                from bench.listing import listing_line

                extra[name] = listing_line(server, repeat)
                continue
            if name == "ownwork":
                from bench.ownwork import ownwork_line

                extra[name] = ownwork_line(repeat)
                continue
            if name == "scale":
                extra[name] = scale_line()
                continue
            if name == "fixed":
                extra[name] = fixed_cost_line(server, env, repeat)
                continue
            if name == "metadata":
                if seed(SETS["small"], s3, s5cmd_seed, env):
                    print("seeded small", flush=True)
                extra[name] = metadata_line(server, env, repeat)
                continue
            if name == "size":
                reference = results.get(ds.name, {}).get("reference") or side(
                    ds, [run_reference(ds, server, env, s3) for _ in range(repeat)], 0)
                extra[name] = size_line(ds, server, env, reference, repeat)
                continue
            runs = {"ours": [], "reference": [], "ours_64mib": []}
            if name == "large":
                runs["rclone"] = []
            for i in range(repeat):  # alternate, so drift on a shared machine hits every tool
                runs["ours"].append(run_ours(ds, server, env))
                runs["reference"].append(run_reference(ds, server, env, s3))
                runs["ours_64mib"].append(run_ours(ds, server, env, ("--memory-budget", "64MiB")))
                if "rclone" in runs:
                    runs["rclone"].append(run_rclone(ds, server, env, s3))
                print(f"  {name} #{i + 1}: " + ", ".join(f"{tool} {r[-1]['wall_s']:.2f}s" for tool, r in runs.items()),
                      flush=True)
            results[name] = summarise(ds, runs)
        targets = check_targets(results, extra)
        if results:
            print("\n" + table(results) + "\n")
        print("times are median [min-max] of the runs; ratios are ours/reference per alternating pair\n")
        print("\n".join(targets))
        save(targets)
        print(f"\nresults: {out.relative_to(ROOT)}")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
