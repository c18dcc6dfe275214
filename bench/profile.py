"""Where the client's CPU goes: one run of ours on a data set under py-spy (sampled, every
thread that is on a CPU), each sample put in the pipeline stage its innermost engine frame
belongs to, printed as a table of CPU seconds, shares and (for many objects) ms per object.

    python -m bench.profile --set many        # client CPU per small object, stage by stage
    python -m bench.profile --set large       # the time split: fetch, hash, compress, upload

py-spy sees Python threads only: the CRT's own event-loop threads (TLS, HTTP parsing) show up
only while they call back into Python. What it cannot see is the process's CPU (from wait4,
py-spy attached from outside so its own CPU is not counted) minus the sampled total, printed
as its own row rather than spread over the others.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.bench import S5CMD, _clear_ours, _ours_argv, bench_env, start_bench_minio
from bench.datasets import SETS, seed
from devtools.servers import ROOT

RATE = 200  # samples per second per thread
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^()]*):(?P<line>\d+)\)$")

# (stage, test on an engine frame's module, function and source line). The stages are tried
# on the engine frames from the innermost outwards, so the S3 client glue that a GET or a part
# upload goes through counts for the stage that called it; only a stack without any of them
# falls to the generic rows.
STAGES = [
    ("hash (SHA-256 per object)", lambda m, f, src: "hasher" in src or "sha256" in src),
    ("compress", lambda m, f, src: m == "compression"),
    ("upload (parts, manifest, index PUTs)", lambda m, f, src: m == "upload"),
    ("fetch (GETs and their callbacks)", lambda m, f, src: m in ("fetching", "connections", "dataplane")),
    ("tar headers and member names", lambda m, f, src: m == "tarwriter"),
    ("listing (requests, page parsing)", lambda m, f, src: m == "listing"),
    ("manifest records", lambda m, f, src: m == "manifest" or f == "_record"),
    ("object attributes from headers", lambda m, f, src: m == "attributes"),
    ("segments (plan, workers, assembly)", lambda m, f, src: m.startswith("segments")),
]
GENERIC = [
    ("member loop (pipeline hand-over)", lambda m, f, src: m == "pipeline"),
    ("commit protocol, lease, control plane", lambda m, f, src: True),
]
STARTUP = "start-up: imports, clients' set-up"
NATIVE_CALLBACK = "CRT native code calling into Python"
OTHER = "other (threading, logging, interpreter)"
UNSEEN_WITHOUT_GIL = "CPU without the GIL: CRT's native threads, compression and hashing of large buffers"
UNSEEN = "not sampled: native threads (CRT I/O, TLS, HTTP), the start before py-spy attached"


class Sources:
    """Source lines of the engine's modules, read once."""

    def __init__(self):
        self._files: dict[str, list[str]] = {}

    def line(self, path: str, number: int) -> str:
        if path not in self._files:
            try:
                self._files[path] = Path(path).read_text().splitlines()
            except OSError:
                self._files[path] = []
        lines = self._files[path]
        return lines[number - 1] if 0 < number <= len(lines) else ""


def engine_module(path: str) -> str | None:
    """``tasks/produce/segments/plan.py`` -> ``segments.plan``; None outside the engine."""
    parts = Path(path).parts
    if "tasks" not in parts:
        return None
    rel = parts[len(parts) - 1 - parts[::-1].index("tasks") + 1:]
    return ".".join(rel)[: -len(".py")] if rel else None


def _starting(function: str, path: str) -> bool:
    """An import in progress, or botocore building a client (its models and endpoint rules
    loaded from JSON): what a process pays once, whichever stage it happens under."""
    return "importlib._bootstrap" in path or (function == "create_client" and path.endswith("botocore/session.py"))


def stage_of(frames: list[tuple[str, str, int]], sources: Sources) -> str:
    """The stage of one stack (outermost frame first)."""
    if any(_starting(function, path) for function, path, _ in frames):
        return STARTUP
    engine = [(engine_module(path), function, sources.line(path, line))
              for function, path, line in reversed(frames) if engine_module(path) is not None]
    for rules in (STAGES, GENERIC):
        for module, function, src in engine:
            for stage, test in rules:
                if test(module, function, src):
                    return stage
    if any(function == "<module>" for function, _, _ in frames):
        return STARTUP
    if any("awscrt" in path for _, path, _ in frames):
        return NATIVE_CALLBACK
    return OTHER


def parse_raw(text: str) -> Counter:
    """py-spy's raw (collapsed) output -> samples per stack, frames outermost first."""
    stacks: Counter = Counter()
    for row in text.splitlines():
        stack, _, count = row.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = []
        for frame in stack.split(";"):
            m = FRAME.match(frame.strip())
            if m:
                frames.append((m["function"], m["file"], int(m["line"])))
        stacks[tuple(frames)] += int(count)
    return stacks


def profile(set_name: str, rate: int, gil: bool = False) -> dict:
    ds = SETS[set_name]
    server = start_bench_minio()
    try:
        env, s3 = bench_env(server), server.client()
        if seed(ds, s3, [str(S5CMD), "--endpoint-url", server.endpoint_url], env):
            print(f"seeded {ds.name}", flush=True)
        _clear_ours(server, ds)
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "profile.txt"
            started = time.monotonic()
            ours = subprocess.Popen(_ours_argv(ds.prefix), env=env, cwd=ROOT, stdout=subprocess.PIPE)
            # Attached rather than launching ours, so that wait4 gives ours' CPU without py-spy's.
            spy = subprocess.Popen([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(ours.pid),
                                    "--format", "raw", "--rate", str(rate), "--nonblocking", "--output", str(raw),
                                    *(["--gil"] if gil else [])],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            stdout = ours.stdout.read()
            _, status, usage = os.wait4(ours.pid, 0)
            wall = time.monotonic() - started
            spy_err, _ = spy.communicate(timeout=60)  # its stdout and stderr together
            if os.waitstatus_to_exitcode(status) or not raw.exists():
                raise RuntimeError(f"the profiled run failed (exit {os.waitstatus_to_exitcode(status)}); "
                                   f"py-spy said: {spy_err.decode(errors='replace')[-2000:]}")
            summary = json.loads(stdout.decode().strip().splitlines()[-1])
            stacks = parse_raw(raw.read_text())
            # py-spy's own account (samples taken, errors, falling behind), for the reader to judge.
            spy_said = [line for line in spy_err.decode(errors="replace").splitlines() if line.strip()][-3:]
    finally:
        server.stop()
    # On two busy cores py-spy takes fewer samples than it was asked for (it reports how many
    # it took): each one stands for wall / samples seconds of a thread's time, not 1 / rate.
    taken = next((int(m[1]) for line in spy_said if (m := re.search(r"Samples: (\d+)", line))), 0)
    per_sample = wall / taken if taken else 1 / rate
    sources = Sources()
    seconds: Counter = Counter()
    for frames, count in stacks.items():
        seconds[stage_of(list(frames), sources)] += count * per_sample
    return {"set": set_name, "objects": summary["objects"], "bytes_in": summary["bytes_in"], "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime, "rate_hz": rate, "gil_only": gil, "samples": taken, "py_spy": spy_said, "stages_s": dict(seconds.most_common())}


def table(result: dict) -> str:
    """Seconds per stage, and the process's CPU that the samples do not account for. With
    ``gil_only`` the stages are seconds the GIL was held, and the rest is CPU spent without it."""
    stages = dict(result["stages_s"])
    sampled = sum(stages.values())
    unseen = UNSEEN_WITHOUT_GIL if result.get("gil_only") else UNSEEN
    if result["cpu_s"] > sampled:
        stages[unseen] = result["cpu_s"] - sampled
    else:  # sampling noise: the samples say more than the process used; shares stay right
        stages = {stage: s * result["cpu_s"] / sampled for stage, s in stages.items()}
    total = sum(stages.values())
    objects = result["objects"]
    unit = "GIL held s" if result.get("gil_only") else "CPU s"
    rows = [f"| stage | {unit} | share | ms per object |", "|---|---|---|---|"]
    for stage, s in sorted(stages.items(), key=lambda kv: -kv[1]):
        rows.append(f"| {stage} | {s:.2f} | {100 * s / total:.1f}% | {1000 * s / objects:.3f} |")
    rows.append(f"| **process CPU** | **{total:.2f}** | | **{1000 * total / objects:.3f}** |")
    return "\n".join(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--set", default="many", choices=sorted(SETS))
    parser.add_argument("--rate", type=int, default=RATE)
    parser.add_argument("--reprint", metavar="JSON", help="print the table of an earlier profile's results file")
    parser.add_argument("--gil", action="store_true",
                        help="sample only the thread holding the GIL: the Python side's own time, no thread "
                             "counted while it waits for the GIL (the table's rows are then shares of GIL time)")
    args = parser.parse_args(argv)
    result = json.loads(Path(args.reprint).read_text()) if args.reprint else profile(args.set, args.rate, args.gil)
    print(f"{result['objects']:,} objects, {result['bytes_in'] / 2**20:,.0f} MiB in {result['wall_s']:.1f} s "
          f"under py-spy at {result['rate_hz']} Hz, client CPU {result['cpu_s']:.2f} s\n")
    print("py-spy: " + " / ".join(result["py_spy"]) + "\n")
    print(table(result))
    if not args.reprint:
        out = ROOT / "bench" / "results" / f"profile-{result['set']}{'-gil' if args.gil else ''}.json"
        out.write_text(json.dumps(result, indent=1))
        print(f"\nresults: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
