"""Small prefixes through 40 ms of latency: ours as a fresh process and warm, against `s5cmd cp`.

    python -m bench.startup                      # 2 prefixes of 2,000 objects, 3 alternating runs
    python -m bench.startup --objects 500 --repeat 5 --latency 0

A fresh process pays the interpreter, the imports (botocore, awscrt, the engine) and the
clients' set-up before its first request; a long-lived worker (an Airflow worker, a backfill
of many prefixes in one task) pays them once. So ours runs twice per round: ``s3arch archive``
as a new process on prefix A, and one process that archives prefix A and then prefix B, timed
on B only (the second prefix of one process). `s5cmd cp` copies prefix B to /dev/shm in the
same round. Everything goes through one toxiproxy with ``--latency`` ms (± a quarter) on every
response, in front of a throwaway MinIO that this script seeds and stops. Printed: each run's
wall time, objects/s and client CPU (user + sys of the process; for the warm run, the
process's CPU while it archived B), then medians [min-max] and the ratios of our rates to
s5cmd's. Ratios, not absolute rates: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import date
from pathlib import Path

from bench.bench import S5CMD
from bench.latency import LatencyProxy
from devtools.sample_data import log_lines
from devtools.servers import ROOT, start_minio

SOURCE, DEST = "startup-src", "startup-dst"
PREFIXES = ("day-a/", "day-b/")


def _seed(server, objects: int) -> None:
    """``objects`` log files of ~8 KiB under each prefix, uploaded with s5cmd from /dev/shm,
    once per server: a marker object says the prefixes are complete (the bench's MinIO keeps
    them between invocations)."""
    from bench.bench import ensure_buckets

    s3 = server.client()
    ensure_buckets(s3, SOURCE, DEST)
    marker = f"seeded-{objects}"
    if s3.list_objects_v2(Bucket=DEST, Prefix=marker).get("KeyCount"):
        return
    rng = random.Random(33)
    staging = Path(tempfile.mkdtemp(prefix="s3arch-startup-", dir="/dev/shm"))
    try:
        for prefix in PREFIXES:
            for i in range(objects):
                path = staging / prefix / f"{i % 24:02d}" / f"app-{i:05d}.log"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(log_lines(date(2026, 11, 1), i % 24, 62, rng))
        subprocess.run([str(S5CMD), "--endpoint-url", server.endpoint_url, "cp", f"{staging}/*", f"s3://{SOURCE}/"],
                       env=_env(server), check=True, stdout=subprocess.DEVNULL)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    s3.put_object(Bucket=DEST, Key=marker, Body=b"")


def _env(server, endpoint_url: str | None = None) -> dict:
    # Byte code is written and reused, as in any installed copy: without it every changed module
    # is compiled from source at each start, which this would count as start-up.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(server.env(), PYTHONPATH=str(ROOT))
    if endpoint_url:
        env["AWS_ENDPOINT_URL_S3"] = endpoint_url
    return env


def _timed(argv: list[str], env: dict) -> tuple[float, float, bytes]:
    """(wall s, the CPU of every child waited for so far, its stdout): the caller takes the
    difference around one call. A failed run raises with its stderr."""
    started = time.monotonic()
    process = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = process.communicate()
    wall = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # cumulative: the caller takes differences
    if process.returncode:
        raise RuntimeError(f"{argv[:4]} exited {process.returncode}: {err.decode(errors='replace')[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, out


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fresh(env: dict, prefix: str, dest: str) -> dict:
    before = _cpu_of_children()
    wall, after, out = _timed([sys.executable, "-m", "s3arch", "archive", f"s3://{SOURCE}/{prefix}", dest,
                               "--storage-class", "STANDARD", "--json", "--quiet"], env)
    summary = json.loads(out.decode().strip().splitlines()[-1])
    if summary["status"] != "archived":  # a skip of done work would time nothing
        raise RuntimeError(f"the fresh run into {dest} was {summary['status']}, not archived")
    return {"wall_s": wall, "cpu_s": after - before, "objects": summary["objects"]}


def warm(env: dict, first: str, second: str, dest: str) -> dict:
    out = _timed([sys.executable, "-m", "bench.startup", "--second-prefix-of-one-process", first, second, dest], env)[2]
    return json.loads(out.decode().strip().splitlines()[-1])


def s5cmd(env: dict, endpoint_url: str, prefix: str) -> dict:
    target = Path(tempfile.mkdtemp(prefix="s3arch-startup-s5cmd-", dir="/dev/shm"))
    try:
        before = _cpu_of_children()
        wall, after, _ = _timed([str(S5CMD), "--endpoint-url", endpoint_url, "cp", f"s3://{SOURCE}/{prefix}*",
                                 f"{target}/"], env)
        objects = sum(1 for p in target.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(target, ignore_errors=True)
    return {"wall_s": wall, "cpu_s": after - before, "objects": objects}


def second_prefix_of_one_process(first: str, second: str, dest: str) -> None:
    """The warm run, inside its own process: archive ``first`` (paying every one-time cost),
    then ``second``, timed alone, as a worker's next task would be."""
    from s3arch import ArchiveSpec, S3Url, archive_prefix
    from s3arch.io.s3 import S3Clients

    clients = S3Clients.from_session(None, os.environ["AWS_ENDPOINT_URL_S3"])

    def run(prefix: str) -> int:
        spec = ArchiveSpec(S3Url(SOURCE, prefix), S3Url.parse(dest), storage_class="STANDARD")
        result = archive_prefix(spec, clients)
        if result.status != "archived":  # a skip of done work would time nothing
            raise RuntimeError(f"the warm run of {prefix} into {dest} was {result.status}, not archived")
        return result.objects

    run(first)
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    started = time.monotonic()
    objects = run(second)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"wall_s": wall, "objects": objects,
                      "cpu_s": after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime}))


def _summary(runs: list[dict]) -> str:
    walls = [r["wall_s"] for r in runs]
    rates = [r["objects"] / r["wall_s"] for r in runs]
    cpus = [1000 * r["cpu_s"] for r in runs]
    return (f"{statistics.median(walls):.2f} s [{min(walls):.2f}-{max(walls):.2f}], "
            f"{statistics.median(rates):,.0f} obj/s [{min(rates):,.0f}-{max(rates):,.0f}], "
            f"CPU {statistics.median(cpus):,.0f} ms [{min(cpus):,.0f}-{max(cpus):,.0f}]")


def startup_line(server, repeat: int, objects: int = 2000, latency: int = 40) -> dict:
    """The rounds on ``server`` (seeded once), through a toxiproxy with ``latency`` ms: per
    round a fresh process on prefix A, the second prefix of one process on B, and `s5cmd cp`
    of B. Returns every run, the ratios of our rates to s5cmd's and their verdicts (issue 33
    item 3: the warm one at least s5cmd's rate; the fresh one reported)."""
    from bench.bench import fmt, verdict

    _seed(server, objects)
    proxy = LatencyProxy(server.endpoint_url.removeprefix("http://"))
    try:
        proxy.set_latency(latency, latency // 4)
        env = _env(server, proxy.endpoint_url)
        results: dict[str, list[dict]] = {"fresh": [], "warm": [], "s5cmd": []}
        a, b = PREFIXES
        invocation = uuid.uuid4().hex[:8]  # every run archives into a new place: a skip would time nothing
        for i in range(repeat):
            for name, run in (("fresh", lambda: fresh(env, a, f"s3://{DEST}/{invocation}/fresh-{i}/")),
                              ("warm", lambda: warm(env, a, b, f"s3://{DEST}/{invocation}/warm-{i}/")),
                              ("s5cmd", lambda: s5cmd(env, proxy.endpoint_url, b))):
                r = run()
                results[name].append(r)
                print(f"  startup #{i + 1} {name:5s}: {r['wall_s']:.2f} s, {r['objects'] / r['wall_s']:,.0f} obj/s, "
                      f"CPU {1000 * r['cpu_s']:,.0f} ms", flush=True)
    finally:
        proxy.stop()
    labels = {"fresh": "ours, a fresh process", "warm": "ours, the second prefix of one process",
              "s5cmd": "s5cmd cp"}
    print(f"startup: {objects:,} objects per prefix through {latency} ms, {repeat} alternating runs:")
    for name, runs in results.items():
        print(f"  {labels[name]:40s} {_summary(runs)}")
    ratios = {name: _ratios(results[name], results["s5cmd"]) for name in ("fresh", "warm")}
    verdicts = [f"{verdict(ratios['warm']['median'] >= 1.0)}  startup the second prefix of one process (a worker's "
                f"next task) / s5cmd cp objects/s through {latency} ms {fmt(ratios['warm'])} (target >= 1.0)",
                f"info  startup a fresh process / s5cmd cp objects/s through {latency} ms {fmt(ratios['fresh'])} "
                "(the interpreter, imports and client set-up before the first request)"]
    return {"objects": objects, "latency_ms": latency, "runs": results, "vs_s5cmd": ratios, "verdicts": verdicts}


def _ratios(ours: list[dict], ref: list[dict]) -> dict:
    """Our rate over s5cmd's, run by run (they alternate)."""
    from bench.bench import spread

    return spread([{"r": (o["objects"] / o["wall_s"]) / (r["objects"] / r["wall_s"])} for o, r in zip(ours, ref)], "r")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=2000, help="objects per prefix (default 2000)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--latency", type=int, default=40, help="ms on every response, ± a quarter (default 40)")
    parser.add_argument("--second-prefix-of-one-process", nargs=3, metavar=("FIRST", "SECOND", "DEST"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.second_prefix_of_one_process:
        second_prefix_of_one_process(*args.second_prefix_of_one_process)
        return 0
    if not S5CMD.exists():
        raise SystemExit(f"{S5CMD} is missing: run `make bench-tools`")
    server = start_minio()
    try:
        line = startup_line(server, args.repeat, args.objects, args.latency)
    finally:
        server.stop()
    print("\n".join(line["verdicts"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
