"""Benchmark: our archiver against the fastest public pipeline, on the same MinIO, alternating.

Reference (what a strong engineer would run today):
    s5cmd cp 's3://SRC/PREFIX*' /dev/shm/dir && tar -C /dev/shm/dir -cf - . | pigz -p 2 -6 | s5cmd pipe s3://DEST/KEY
Ours:
    python -m tasks archive s3://SRC/PREFIX/ s3://DEST/ours/ --storage-class STANDARD --overwrite

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

from bench.datasets import SETS, SOURCE_BUCKET, seed
from devtools.servers import ROOT, start_minio

DEST_BUCKET = "bench-out"
S5CMD = ROOT / ".cache" / "bin" / "s5cmd"
DATA_DIR = ROOT / ".cache" / "bench-minio"
REF_STAGING = Path("/dev/shm/s3arch-bench-ref")
RESULTS = ROOT / "bench" / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")

TARGETS = {  # ratio = our wall time / the reference's
    "small": {"ratio": 0.9, "cpu_ms_per_object": 0.35},
    "medium": {"ratio": 0.5},
    "large": {"ratio": 0.35, "size_vs_ref": 1.15},
}
RSS_LIMIT_MIB = 400


def proc_cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


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


def measure(argv: list[str], env: dict, minio_pid: int) -> dict:
    """Run argv to completion; return wall, client CPU, peak RSS and MinIO CPU."""
    minio_before = proc_cpu_seconds(minio_pid)
    start = time.monotonic()
    process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = RssSampler(process.pid)
    sampler.start()
    stdout_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: stdout_chunks.append(process.stdout.read()), daemon=True)
    reader.start()
    stderr = process.stderr.read()
    _, status, rusage = os.wait4(process.pid, 0)
    wall = time.monotonic() - start
    sampler.done.set()
    sampler.join()
    reader.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(map(str, argv))[:200]} exited {process.returncode}:\n"
                           f"{stderr.decode(errors='replace')[-2000:]}")
    return {"wall_s": wall, "cpu_s": rusage.ru_utime + rusage.ru_stime,
            "peak_rss_mib": max(sampler.peak_tree, sampler.hwm_root) / 2**20,
            "minio_cpu_s": proc_cpu_seconds(minio_pid) - minio_before,
            "stdout": b"".join(stdout_chunks).decode(errors="replace")}


def run_ours(ds, server, env) -> dict:
    result = measure([sys.executable, "-m", "tasks", "archive", f"s3://{SOURCE_BUCKET}/{ds.prefix}",
                      f"s3://{DEST_BUCKET}/ours/", "--storage-class", "STANDARD", "--overwrite",
                      "--json", "--quiet"], env, server.pid)
    summary = json.loads(result.pop("stdout").strip().splitlines()[-1])
    if summary["objects"] != ds.objects:
        raise RuntimeError(f"ours archived {summary['objects']} objects of {ds.objects}")
    result["archive_bytes"] = summary["bytes_out"]
    result["bytes_in"] = summary["bytes_in"]
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


def median(runs: list[dict], field: str) -> float:
    return statistics.median(r[field] for r in runs)


def summarise(ds, ours: list[dict], ref: list[dict]) -> dict:
    o = {f: median(ours, f) for f in ("wall_s", "cpu_s", "peak_rss_mib", "minio_cpu_s", "archive_bytes")}
    r = {f: median(ref, f) for f in ("wall_s", "cpu_s", "peak_rss_mib", "minio_cpu_s", "archive_bytes")}
    bytes_in = ours[0]["bytes_in"]
    return {
        "set": ds.name, "description": ds.description, "objects": ds.objects, "bytes_in": bytes_in,
        "ours": {**o, "objects_per_s": ds.objects / o["wall_s"], "mb_per_s": bytes_in / 1e6 / o["wall_s"],
                 "cpu_ms_per_object": 1000 * o["cpu_s"] / ds.objects, "runs": ours},
        "reference": {**r, "objects_per_s": ds.objects / r["wall_s"], "mb_per_s": bytes_in / 1e6 / r["wall_s"],
                      "cpu_ms_per_object": 1000 * r["cpu_s"] / ds.objects,
                      "staged_in_dev_shm_mib": median(ref, "staged_in_dev_shm_mib"), "runs": ref},
        "ratio": o["wall_s"] / r["wall_s"],
        "size_vs_ref": o["archive_bytes"] / r["archive_bytes"],
    }


def check_targets(results: dict) -> list[str]:
    lines = []
    for name, row in results.items():
        for metric, limit in TARGETS.get(name, {}).items():
            value = row["ours"][metric] if metric == "cpu_ms_per_object" else row[metric]
            lines.append(f"{'PASS' if value <= limit else 'MISS'}  {name:<6} {metric} {value:.3f} (target <= {limit})")
        rss = row["ours"]["peak_rss_mib"]
        lines.append(f"{'PASS' if rss <= RSS_LIMIT_MIB else 'MISS'}  {name:<6} peak RSS {rss:.0f} MiB (target <= {RSS_LIMIT_MIB})")
    if "many" in results and "small" in results:
        flat = results["many"]["ours"]["peak_rss_mib"] / results["small"]["ours"]["peak_rss_mib"]
        lines.append(f"{'PASS' if flat <= 1.2 else 'MISS'}  many/small peak RSS {flat:.2f} (target <= 1.2)")
    return lines


def table(results: dict) -> str:
    header = ("set", "objects", "input", "ours s", "ref s", "ratio", "ours obj/s", "ours MB/s",
              "CPU ms/obj ours/ref", "RSS MiB ours/ref", "size vs ref", "MinIO CPU s ours/ref")
    rows = [header]
    for name, r in results.items():
        o, f = r["ours"], r["reference"]
        rows.append((name, f"{r['objects']:,}", f"{r['bytes_in'] / 2**20:,.0f} MiB", f"{o['wall_s']:.2f}",
                     f"{f['wall_s']:.2f}", f"{r['ratio']:.2f}", f"{o['objects_per_s']:,.0f}",
                     f"{o['mb_per_s']:,.0f}", f"{o['cpu_ms_per_object']:.3f} / {f['cpu_ms_per_object']:.3f}",
                     f"{o['peak_rss_mib']:.0f} / {f['peak_rss_mib']:.0f}", f"{r['size_vs_ref']:.3f}",
                     f"{o['minio_cpu_s']:.1f} / {f['minio_cpu_s']:.1f}"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" +
                     ("\n|" + "|".join("-" * (w + 2) for w in widths) + "|" if i == 0 else "")
                     for i, row in enumerate(rows))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", default="small,medium,large,many")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    unknown = set(names) - SETS.keys()
    if unknown:
        parser.error(f"unknown data set(s) {', '.join(sorted(unknown))}; known: {', '.join(SETS)}")
    if not S5CMD.exists():
        parser.error(f"{S5CMD} is missing: run `make s5cmd`")

    DATA_DIR.mkdir(parents=True, exist_ok=True)
    server = start_minio(data_dir=DATA_DIR, access_key="s3arch-bench", secret_key="s3arch-bench-secret-key")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(server.env(), PYTHONPATH=str(ROOT))
        s3 = server.client(max_pool_connections=32)
        for bucket in (SOURCE_BUCKET, DEST_BUCKET):
            try:
                s3.create_bucket(Bucket=bucket)
            except s3.exceptions.BucketAlreadyOwnedByYou:
                pass
        s5cmd_seed = [str(S5CMD), "--endpoint-url", server.endpoint_url]
        results = {}
        for name in names:
            ds = SETS[name]
            started = time.monotonic()
            if seed(ds, s3, s5cmd_seed, env):
                print(f"seeded {name}: {ds.description} in {time.monotonic() - started:.0f}s", flush=True)
            ours, ref = [], []
            for i in range(args.repeat):  # alternate, so drift on a shared machine hits both
                ours.append(run_ours(ds, server, env))
                ref.append(run_reference(ds, server, env, s3))
                print(f"  {name} #{i + 1}: ours {ours[-1]['wall_s']:.2f}s, reference {ref[-1]['wall_s']:.2f}s",
                      flush=True)
            results[name] = summarise(ds, ours, ref)
        print("\n" + table(results) + "\n")
        print("\n".join(check_targets(results)))
        RESULTS.mkdir(exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = RESULTS / f"{stamp}.json"
        out.write_text(json.dumps({
            "when": stamp, "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "repeat": args.repeat, "results": results, "targets": check_targets(results)}, indent=1))
        print(f"\nresults: {out.relative_to(ROOT)}")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
