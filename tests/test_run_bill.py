"""The bill of a run (tasks/protocol/bill.py), as the user reads it: every archive result says
which S3 requests the run asked for, by operation, and the CPU-seconds it used, whether the
prefix ran as one pipeline, as segments in worker processes, or as the prepare, segment and
assemble steps of an Airflow run; a dry run's LISTs and sample GETs are on its bill too.

The runs go through the test proxy, which counts what reached the server: with no fault on
the way (no resend), the bill is exactly that, the data plane's GETs included."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from types import SimpleNamespace

import pytest

from faultproxy import Fault, FaultProxy, Request, is_get, is_list
from helpers import ROOT, engine_clients, seed

N = 60  # small objects under day/
PUTS = ("put_object", "upload_part", "create_multipart_upload", "complete_multipart_upload")
SEGMENTS = ("--segments", "2", "--processes", "2", "--segment-min-objects", "10", "--memory-budget", "400MiB")


def seeded(s3, src: str) -> None:
    seed(s3, src, {f"day/{i:03d}.log": b"entry %d\n" % i * (i % 20 + 1) for i in range(N)})


class Wire:
    """What reached the server through ``proxy`` from now on: every request, the GETs (of
    objects and temporaries), the source objects' GETs and the LISTs."""

    def __init__(self, proxy: FaultProxy, src: str):
        def source_get(r: Request) -> bool:
            return is_get(r) and r.key.startswith(f"{src}/day/")

        self._proxy, self._start = proxy, proxy.requests
        # Faults that never fire (rate 0): each counts the requests it matched.
        self._gets, self._source, self._lists = (proxy.add(Fault("status", rate=0.0, match=m))
                                                 for m in (is_get, source_get, is_list))

    def seen(self) -> dict[str, int]:
        return {"requests": self._proxy.requests - self._start, "gets": self._gets.seen,
                "source_gets": self._source.seen, "lists": self._lists.seen}


def archive_measured(env, proxy: FaultProxy, src: str, dst: str, *flags) -> tuple[dict, float]:
    """``s3arch archive SRC/day/ DST/a/ FLAGS --json`` through ``proxy``, in a child process: its
    JSON result, and the CPU-seconds the kernel says the child (with its reaped children) used."""
    args = ["--endpoint-url", proxy.endpoint_url, "archive", f"s3://{src}/day/", f"s3://{dst}/a/",
            "--storage-class", "STANDARD", *flags, "--json"]
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "s3arch", *args], env=env, cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=err)
        assert proc.stdout is not None
        out = proc.stdout.read()
        proc.stdout.close()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        assert proc.returncode == 0, err.read().decode(errors="replace")
    return json.loads(out.decode().strip().splitlines()[-1]), usage.ru_utime + usage.ru_stime


@pytest.mark.parametrize("get_path", ["plain", "crt"])
def test_an_archives_result_is_its_bill_requests_as_the_server_saw_them_and_cpu(cli_env, s3, buckets, proxy,
                                                                                  get_path):
    src, dst = buckets
    seeded(s3, src)
    wire = Wire(proxy, src)
    result, child_cpu = archive_measured({**cli_env, "S3ARCH_GET_PATH": get_path}, proxy, src, dst, "--processes", "1")
    seen = wire.seen()
    requests = result["requests"]
    assert result["status"] == "archived" and result["objects"] == N and result["segments"] == 1
    assert requests["get_object"] == N == seen["gets"] == seen["source_gets"]  # the data plane's, counted
    assert requests["list_objects_v2"] == seen["lists"] >= 1
    assert sum(requests.get(op, 0) for op in PUTS) >= 2  # the archive and its manifest at least
    assert sum(requests.values()) == seen["requests"]  # nothing sent is left off, nothing counted twice
    assert all(n > 0 for n in requests.values())
    # Its own CPU since the run began: more than nothing, less than the whole process.
    assert 0 < result["cpu_s"] <= child_cpu + 0.02


def test_segments_in_worker_processes_bring_their_requests_and_cpu_once(cli_env, s3, buckets, proxy):
    src, dst = buckets
    seeded(s3, src)
    wire = Wire(proxy, src)
    result, child_cpu = archive_measured(cli_env, proxy, src, dst, *SEGMENTS)
    seen = wire.seen()
    requests = result["requests"]
    assert result["segments"] == 2 and result["objects"] == N
    # Every source GET was a worker's: counted once, beside the segments' reads of their
    # temporaries (recorded listing, kept-back bytes, results, records).
    assert seen["source_gets"] == N and requests["get_object"] == seen["gets"] > N
    assert requests["list_objects_v2"] == seen["lists"] >= 1  # the sizing's and the plan's
    assert sum(requests.values()) == seen["requests"]
    # The workers' CPU is the parent's reaped children's: on the bill, within what the kernel says.
    workers_cpu = sum(v for k, v in result["timings"].items() if k.startswith("workers_"))
    assert 0 < workers_cpu <= result["cpu_s"] <= child_cpu + 0.02


def test_the_assemble_steps_result_is_the_whole_segmented_runs_bill(minio, s3, buckets, proxy):
    """Airflow's prepare, segment and assemble steps, each called as its task calls it (here
    in one process): the assembled result counts what every step asked for, once."""
    from s3arch.archive import archive_segment, assemble_segments, prepare_segments
    from s3arch.core.config import ArchiveSpec, S3Url

    src, dst = buckets
    seeded(s3, src)
    spec = ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD", processes=1)
    wire = Wire(proxy, src)
    planned = prepare_segments(spec, 3, engine_clients(minio, proxy.endpoint_url))
    produced = [archive_segment(spec, k, engine_clients(minio, proxy.endpoint_url)) for k in range(3)]
    result = assemble_segments(spec, engine_clients(minio, proxy.endpoint_url), segments=3)
    seen = wire.seen()
    assert planned.status == "planned" and planned.requests["list_objects_v2"] >= 1
    assert [p["status"] for p in produced] == ["produced"] * 3
    assert result.status == "archived" and result.objects == N and result.segments == 3
    requests = result.requests
    assert seen["source_gets"] == N and requests["get_object"] == seen["gets"] > N
    assert requests["list_objects_v2"] == seen["lists"] >= planned.requests["list_objects_v2"]
    # The prepare's lease release, sent after its plan recorded the step's bill, counted in it.
    assert sum(requests.values()) == seen["requests"]
    assert sum(planned.requests.values()) + sum(sum(p["requests"].values()) for p in produced) < sum(
        requests.values())  # the assembly's own on top
    assert result.cpu_s >= planned.cpu_s + sum(p["cpu_s"] for p in produced) - 0.01


def test_the_cli_run_counts_segments_produced_in_this_process_once(monkeypatch, clients, s3, buckets):
    """A segmented CLI run whose workers run in this process (as the tests run them): their
    requests come through the pipe and their records both; the bill takes them once."""
    from helpers import run_segment_workers_inline
    import s3arch.produce.segments.workers as workers
    from s3arch.archive import archive_prefix
    from s3arch.core.config import ArchiveSpec, S3Url

    src, dst = buckets
    seeded(s3, src)
    run_segment_workers_inline(monkeypatch, workers.segment_worker)
    monkeypatch.setattr(workers, "worker_connection", lambda clients, server: {
        "credentials": None, "credentials_pipe": None, "region": clients.region, "endpoint_url": clients.endpoint_url,
        "verify": None, "botocore_config": None, "expected_owner": None})
    monkeypatch.setattr(workers, "worker_session", lambda *a: clients.session)
    spec = ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD", segments=2, processes=2,
                       segment_min_objects=10, memory_budget=400 << 20)
    result = archive_prefix(spec, clients)
    assert result.segments == 2 and result.objects == N
    # GETs: the sources once (a worker's own clients counted them), and the temporaries.
    assert N < result.requests["get_object"] < N + 20


def test_a_dry_run_reports_its_lists_and_sample_gets(cli_env, s3, buckets, proxy):
    src, dst = buckets
    seeded(s3, src)
    wire = Wire(proxy, src)
    result, child_cpu = archive_measured(cli_env, proxy, src, dst, "--dry-run")
    seen = wire.seen()
    requests = result["requests"]
    assert result["status"] == "dry_run" and result["objects"] == N
    assert requests["list_objects_v2"] == seen["lists"] >= 1
    assert requests["get_object"] == seen["source_gets"] == N  # its sample: every object of so small a prefix
    assert not any(op in requests for op in PUTS) and sum(requests.values()) == seen["requests"]
    assert 0 < result["cpu_s"] <= child_cpu + 0.02


def test_the_summary_the_report_and_the_metrics_show_the_bill(monkeypatch):
    import airflow.providers.common.compat.sdk as compat
    from s3arch.cli.archiving import bill_text
    from s3arch_airflow.archive_base import S3ArchiveBaseOperator
    from s3arch_airflow.report import format_table
    from s3arch_airflow.task_rows import result_row

    requests = {"list_objects_v2": 12, "get_object": 1_190, "get_object_tagging": 10, "put_object": 4,
                "upload_part": 14, "create_multipart_upload": 1, "complete_multipart_upload": 1, "head_bucket": 2}
    assert bill_text(SimpleNamespace(requests=requests, cpu_s=3.14)) == \
        "1,234 requests (12 LIST, 1,200 GET, 20 PUT, 2 other), 3.1 CPU-s"
    assert bill_text(SimpleNamespace(requests={}, cpu_s=0.0)) == "0 requests, 0.0 CPU-s"

    row = result_row("day/", "archived", objects=1_200, requests=requests, cpu_s=3.14)
    table = [re.split(r" {2,}", line) for line in format_table([row]).splitlines()]
    shown = dict(zip(table[0], table[2]))
    assert (shown["requests"], shown["CPU s"]) == ("1,234", "3.1")

    sent = []
    monkeypatch.setattr(compat.Stats, "incr", lambda name, count=1, **kw: sent.append((name, count, kw["tags"])))
    monkeypatch.setattr(compat.Stats, "timing", lambda *a, **kw: None)
    operator = SimpleNamespace(storage_class="GLACIER", dag_id="d")
    S3ArchiveBaseOperator._emit_metrics(operator, row)
    assert sum(n for name, n, _ in sent if name == "s3arch.requests") == 1_234
    assert ("s3arch.requests", 12) in [(name, n) for name, n, tags in sent if tags.get("operation") == "list_objects_v2"]
    assert ("s3arch.cpu_seconds", 3.14) in [(name, n) for name, n, _ in sent]
    sent.clear()  # a prepare step's bill is counted in its assemble step's row, not twice
    S3ArchiveBaseOperator._emit_metrics(operator, result_row("day/", "planned", requests=requests, cpu_s=1.0))
    assert not [name for name, _, _ in sent if name in ("s3arch.requests", "s3arch.cpu_seconds")]
