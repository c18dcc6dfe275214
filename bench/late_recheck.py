"""Bench line: the cost of re-running an archived day on which nothing new landed (docs/FORMAT.md,
"Parts"), against the plain skip of the engine before late parts (``--baseline``, default
9cb771a^, the commit before them): a plain re-run, and a late window's re-check
(``archive_prefix(recheck=True)``, which reads the day before taking any lease).

Seeds one day of OBJECTS small objects on a throwaway MinIO and archives it; then, for each of
the two engines (this tree, and the baseline's ``tasks/`` exported with ``git archive`` and
imported as ``s3arch`` from a temporary folder), re-runs the day RUNS times in a fresh process
and counts the control plane's S3 requests by kind and the seconds each re-run took. Both
re-runs report ``skipped``; this tree's first re-check of the day also writes its day index, so
two runs go before the measured runs, as nightly runs would have.

    .venv/bin/python -m bench.late_recheck     # prints the lines, writes bench/results/late-recheck.json
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.servers import start_minio  # noqa: E402

OBJECTS, RUNS = 10_000, 5
PREFIX = "logs/2026/11/21/"
RESULT = ROOT / "bench" / "results" / "late-recheck.json"

# Run in a fresh interpreter whose ``s3arch`` is the engine measured (PYTHONPATH decides).
_MEASURE = """
import collections, json, sys, time, boto3
from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.io.s3 import S3Clients
a = json.loads(sys.argv[1])
session = boto3.Session(aws_access_key_id=a["key"], aws_secret_access_key=a["secret"], region_name="us-east-1")
clients = S3Clients.from_session(session, a["endpoint"])
seen = collections.Counter()
def count(request, **_):
    path = request.url.split("?")[0].split("/", 3)[3]
    query = request.url.partition("?")[2]
    kind = "LIST" if request.method == "GET" and ("list-type" in query or "uploads" in query) else request.method
    seen[kind] += 1
clients.control.meta.events.register("before-send.s3", count)
spec = ArchiveSpec(source=S3Url(a["src"], a["prefix"]), destination=S3Url(a["dst"], "vault/"), storage_class="STANDARD")
options = {"recheck": True} if a["recheck"] else {}
for _ in range(2):  # warm: the archive, connections, and this tree's first re-check writes the day index
    archive_prefix(spec, clients, **options)
runs = []
for _ in range(a["runs"]):
    seen.clear()
    started = time.monotonic()
    result = archive_prefix(spec, clients, **options)
    runs.append({"seconds": time.monotonic() - started, "status": result.status.value, "requests": dict(seen)})
print(json.dumps(runs))
"""


def measure(server, src: str, dst: str, pythonpath: str, recheck: bool = False) -> list[dict]:
    args = {"key": server.access_key, "secret": server.secret_key, "endpoint": server.endpoint_url,
            "src": src, "dst": dst, "prefix": PREFIX, "runs": RUNS, "recheck": recheck}
    out = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(args)], env={"PYTHONPATH": pythonpath,
                         "PATH": "/usr/bin:/bin"}, cwd=ROOT, capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def summary(runs: list[dict]) -> dict:
    return {"status": sorted({r["status"] for r in runs}), "requests": runs[-1]["requests"],
            "seconds_median": round(statistics.median(r["seconds"] for r in runs), 4),
            "seconds": [round(r["seconds"], 4) for r in runs]}


def main(baseline: str = "9cb771a^") -> dict:
    from concurrent.futures import ThreadPoolExecutor

    server = start_minio()
    try:
        s3 = server.client(max_pool_connections=64)
        for bucket in ("src", "dst", "dst-window", "src-base", "dst-base"):
            s3.create_bucket(Bucket=bucket)
        with ThreadPoolExecutor(32) as pool:
            for src in ("src", "src-base"):
                list(pool.map(lambda i: s3.put_object(Bucket=src, Key=f"{PREFIX}{i:05d}.log",
                                                      Body=f"{i} hello\n".encode() * 100), range(OBJECTS)))
        with tempfile.TemporaryDirectory() as tree:
            exported = subprocess.run(["git", "archive", baseline, "tasks"], cwd=ROOT, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", tree], input=exported.stdout, check=True)
            Path(tree, "tasks").rename(Path(tree, "s3arch"))
            base = summary(measure(server, "src-base", "dst-base", tree))
        late = summary(measure(server, "src", "dst", _tree_of_this_checkout()))
        window = summary(measure(server, "src", "dst-window", _tree_of_this_checkout(), recheck=True))
    finally:
        server.stop()
    result = {"objects": OBJECTS, "runs": RUNS, "baseline": baseline, "baseline_skip": base, "late_recheck": late,
              "late_window_recheck": window}
    RESULT.write_text(json.dumps(result, indent=1) + "\n")
    for name, line in (("skip (" + baseline + ")", base), ("re-check (late parts)", late),
                       ("re-check in a late window (recheck=True)", window)):
        print(f"{name}: {OBJECTS:,} objects, nothing new: {line['requests']} in {line['seconds_median']:.3f}s "
              f"(median of {RUNS})")
    return result


def _tree_of_this_checkout() -> str:
    """This checkout's engine as ``s3arch``: a folder holding a link to ``tasks``."""
    folder = Path(tempfile.mkdtemp(prefix="s3arch-tree-"))
    (folder / "s3arch").symlink_to(ROOT / "tasks")
    return str(folder)


if __name__ == "__main__":
    main(*sys.argv[1:2])
