"""S3 answering 503 SlowDown for a long while (it re-partitions a prefix): the run backs off
for as long as it lasts, with fewer GETs in flight, and finishes slower instead of failing.

Before (issue 31): with every source GET answered 503 SlowDown for 20-30 s the run gave up
after about a second, exit 3: the CRT client's shared retry budget drained at once with 64
requests in flight, and the fetcher added two more tries 0.2 s and 0.4 s apart.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from faultproxy import Fault, is_get
from helpers import keys_in, open_uploads, read_archive, run_cli, seed
from s3arch.core import backoff
from s3arch.core.backoff import Backoff


PROXY_SEED = 31  # the conftest proxy's random faults


@pytest.mark.slow
def test_a_prefix_throttled_for_30_seconds_archives_slower_instead_of_failing(s3, buckets, proxy, cli_env,
                                                                             reliability):
    src, dst = buckets
    objects = {f"day/{i // 100:02d}/{i:05d}.log": (b"event %d\n" % i) * (i % 40 + 1) for i in range(300)}
    seed(s3, src, objects)
    # Every GET of a source object (not the listing, not the archive's own reads) answered
    # 503 SlowDown, with S3's XML body, for 30 s from the first one.
    fault = proxy.add(Fault("status", status=503, window=30.0,
                            match=lambda r: is_get(r) and r.key.startswith(f"{src}/day/")))
    started = time.monotonic()
    proc = run_cli(cli_env, "--endpoint-url", proxy.endpoint_url, "archive", f"s3://{src}/day/", f"s3://{dst}/a/",
                   "--storage-class", "STANDARD", "--concurrency", "64", "--json", check=False)
    took = time.monotonic() - started
    stderr = proc.stderr.decode(errors="replace")
    stdout = proc.stdout.decode(errors="replace").strip()
    print(f"\narchive: exit {proc.returncode} in {took:.1f} s, {fault.injected} throttled answers: "
          f"{(stderr.strip() or stdout)[-300:]}")
    assert fault.injected > 100  # the fault really lasted (the CRT client's retries hit it too)
    assert proc.returncode == 0, stderr
    result = json.loads(stdout.splitlines()[-1])
    print(f"summary: {result['throttled']} throttled requests, {result['gets']} GETs")
    assert result["status"] == "archived" and result["objects"] == len(objects)
    assert took >= 25  # it waited the throttling out
    # The summary counts the throttled answers the engine saw (each after the CRT client's own retries).
    assert 0 < result["throttled"] <= fault.injected
    verify = run_cli(cli_env, "verify", f"s3://{dst}/a/{src}/day.tar.gz", check=False)
    assert verify.returncode == 0, verify.stderr.decode(errors="replace")
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    reliability.record("every source GET answered 503 SlowDown for 30 s",
                       f"{fault.injected} throttled answers",
                       f"backed off, fewer GETs in flight; archived and verified in {took:.0f} s, "
                       f"{result['throttled']} throttled requests in the summary")


def test_the_in_flight_limit_halves_on_a_throttle_and_grows_back_slowly():
    from s3arch.io.flow import InFlightLimit

    now = [100.0]
    limit = InFlightLimit(64, clock=lambda: now[0])
    assert limit.limit == 64
    limit.throttled()
    assert limit.limit == 32
    limit.throttled()  # the same burst of answers: one cut per cooldown
    assert limit.limit == 32
    for _ in range(6):
        now[0] += 1.0
        limit.throttled()
    assert limit.limit == 1  # never below one
    now[0] += 1.0
    limit.throttled()
    assert limit.limit == 1
    for _ in range(10):
        limit.succeeded()
    assert 2 <= limit.limit <= 11  # additive: about one more per limit's worth of successes
    for _ in range(10_000):
        limit.succeeded()
    assert limit.limit == 64  # never above the configured concurrency


def test_the_in_flight_limit_holds_requests_to_it_and_lets_retries_go_first():
    from s3arch.io.flow import InFlightLimit

    limit = InFlightLimit(2, clock=lambda: 0.0)
    assert limit.acquire(timeout=0.01) and limit.acquire(timeout=0.01)
    assert not limit.acquire(timeout=0.01)
    limit.release()
    limit.throttled()  # 2 -> 1 while one is held: nothing more goes out until it is released
    assert limit.limit == 1 and not limit.acquire(timeout=0.01)
    limit.release()
    assert limit.acquire(timeout=0.01, retry=True)
    limit.release()
    import threading

    got = []
    limit.acquire(timeout=0.01)
    waiter = threading.Thread(target=lambda: got.append(limit.acquire(timeout=2.0, retry=True)))
    waiter.start()
    time.sleep(0.1)
    assert not limit.acquire(timeout=0.05)  # a new request waits behind the retry
    limit.release()
    waiter.join()
    assert got == [True]


def test_the_throttled_count_goes_to_the_task_row_and_the_metrics(monkeypatch):
    """StatsD (Airflow's Stats) gets ``s3arch.throttled`` per prefix, beside ``s3arch.objects``."""
    from types import SimpleNamespace

    import airflow.providers.common.compat.sdk as compat
    from s3arch_airflow.archive_base import S3ArchiveBaseOperator
    from s3arch_airflow.task_rows import result_row

    sent = []
    monkeypatch.setattr(compat.Stats, "incr", lambda name, count=1, **kw: sent.append((name, count)))
    monkeypatch.setattr(compat.Stats, "timing", lambda *a, **kw: None)
    row = result_row("day/", "archived", objects=300, throttled=41)
    S3ArchiveBaseOperator._emit_metrics(SimpleNamespace(storage_class="GLACIER", dag_id="d"), row)
    assert ("s3arch.throttled", 41) in sent and ("s3arch.objects", 300) in sent
    assert result_row("day/", "archived")["throttled"] == 0
    from s3arch_airflow.report import format_table

    table = format_table([row, result_row("day2/", "archived", throttled=1)])
    assert "S3 answered 42 request(s) 503 SlowDown" in table
    assert "throttled" not in format_table([result_row("day3/", "archived")])


@pytest.mark.slow
def test_listing_pages_and_uploads_throttled_past_botocores_retries_are_waited_out(s3, buckets, proxy, minio,
                                                                                   reliability):
    """The control plane (boto3): botocore's standard retries (here 2 attempts, so its own give
    up within a second) and then the engine's backoff until the throttle budget runs out.
    Before: the lease's PUT failed with SlowDown after botocore's 2 attempts (Throttled, exit 3)."""
    from faultproxy import is_list
    from helpers import engine_clients
    from s3arch.archive import archive_prefix
    from s3arch.core.config import ArchiveSpec, S3Url
    from s3arch.io.throttling import throttled

    src, dst = buckets
    objects = {f"day/{i:03d}.log": b"line %d\n" % i for i in range(50)}
    seed(s3, src, objects)
    listing = proxy.add(Fault("status", status=503, window=4.0, match=is_list))
    writes = proxy.add(Fault("status", status=503, window=4.0,
                             match=lambda r: r.method in ("PUT", "POST") and r.key.startswith(f"{dst}/")))
    clients = engine_clients(minio, proxy.endpoint_url, max_attempts=2)
    started = time.monotonic()
    result = archive_prefix(ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD"), clients)
    took = time.monotonic() - started
    print(f"\ncontrol plane: archived in {took:.1f} s, {listing.injected} listing and {writes.injected} write "
          f"answers 503, {result.throttled} counted")
    assert listing.injected >= 3 and writes.injected >= 3
    assert took >= 7
    assert result.throttled >= listing.injected + writes.injected - 2 and throttled(clients.control) > 0
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    reliability.record("every listing page, then every write to the destination, answered 503 SlowDown for 4 s "
                       "(botocore limited to 2 attempts)", f"{listing.injected + writes.injected} throttled answers",
                       f"waited out with growing backoff; archived in {took:.0f} s")


class _ScriptedPlane:
    """A data plane whose GETs answer from a script: each GET of a key takes the next answer
    (an error, or None for the object's bytes), on a thread of its own as CRT's callbacks do."""

    def __init__(self, answers):
        import collections
        import threading

        self.answers = collections.defaultdict(list, {k: list(v) for k, v in answers.items()})
        self.sent = collections.Counter()
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()

    def get(self, key, *, etag, byte_range, on_body, on_done, on_headers=None):
        import threading

        with self._lock:
            self.sent[key] += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            answer = self.answers[key].pop(0) if self.answers[key] else None

        def reply():
            time.sleep(0.01)
            with self._lock:
                self.in_flight -= 1
            if answer is None:
                if on_headers is not None:
                    on_headers([])
                on_body(b"x" * 8)
            on_done(answer)

        threading.Thread(target=reply, daemon=True).start()
        return SimpleCancel()


class SimpleCancel:
    def cancel(self):
        pass


def _fetch(plane, keys, monkeypatch, budget=60.0, concurrency=8, cooldown=1.0, failed=None):
    from datetime import datetime, timezone

    import s3arch.io.fetching as fetching
    from s3arch.core.coordinator import StreamCoordinator
    from s3arch.io.listed import ListedObject

    monkeypatch.setattr(backoff, "THROTTLED", Backoff(base=0.02, cap=0.2, retries=None))  # the same growth, in ms
    monkeypatch.setenv("S3ARCH_THROTTLE_BUDGET", str(budget))
    coordinator = StreamCoordinator("test")
    fetcher = fetching.Fetcher(plane, "src", budget=fetching.ByteBudget(1 << 20), concurrency=concurrency,
                               chunk=1 << 20, coordinator=coordinator)
    fetcher.limit = fetching.InFlightLimit(concurrency, cooldown=cooldown)
    if failed is not None:
        failed.append(coordinator)
    now = datetime.now(timezone.utc)
    objects = [ListedObject(k, 8, '"e"', now) for k in keys]
    return fetcher, [p.obj.key for p in fetcher.pieces(objects)]


def test_a_throttled_get_is_retried_past_the_fault_attempts_and_other_errors_keep_theirs(monkeypatch):
    from s3arch.core.errors import AccessDenied, Throttled, TransientError
    from s3arch.core.coordinator import Stopped

    slow = Throttled("GET s3://src/a: SlowDown")
    plane = _ScriptedPlane({"a": [slow] * 12, "b": [TransientError("reset")] * 2})
    fetcher, got = _fetch(plane, ["a", "b", "c"], monkeypatch)
    assert got == ["a", "b", "c"]
    assert plane.sent["a"] == 13 and fetcher.throttled == 12  # 12 throttles: no count limit
    assert plane.sent["b"] == 3  # a fault: the 3 tries of before
    # A fault that lasts fails after 3 tries; a 403 is not retried.
    plane = _ScriptedPlane({"a": [TransientError("reset")] * 3})
    with pytest.raises(Stopped):
        _fetch(plane, ["a"], monkeypatch)
    assert plane.sent["a"] == 3
    plane = _ScriptedPlane({"a": [AccessDenied("GET s3://src/a: denied")]})
    with pytest.raises(Stopped):
        _fetch(plane, ["a"], monkeypatch)
    assert plane.sent["a"] == 1


def test_throttling_that_outlasts_the_budget_fails_naming_it(monkeypatch):
    from s3arch.core.coordinator import Stopped
    from s3arch.core.errors import Throttled

    plane = _ScriptedPlane({"a": [Throttled("GET s3://src/a: SlowDown")] * 10_000})
    started = time.monotonic()
    failed: list = []
    with pytest.raises(Stopped):
        _fetch(plane, ["a"], monkeypatch, budget=1.0, failed=failed)
    took = time.monotonic() - started
    error = failed[0].exception
    assert isinstance(error, Throttled) and error.exit_code == 3
    assert "longer than the throttle budget (1 s, --throttle-budget)" in str(error), error
    assert 1.0 <= took < 5
    assert 5 < plane.sent["a"] < 10_000


def test_gets_in_flight_shrink_while_s3_throttles(monkeypatch):
    from s3arch.core.errors import Throttled

    keys = [f"k{i:03d}" for i in range(200)]
    slow = Throttled("SlowDown")
    plane = _ScriptedPlane({k: [slow] * 3 for k in keys[:40]})  # the first 40 throttled three times each
    fetcher, got = _fetch(plane, keys, monkeypatch, concurrency=32, cooldown=0.005)
    assert got == keys and fetcher.throttled == 120
    assert fetcher.limit.lowest <= 4  # halved, burst after burst
    assert plane.most_in_flight <= 32
    assert fetcher.limit.limit > fetcher.limit.lowest  # and grown back after


@pytest.mark.slow
def test_a_segmented_archive_counts_what_its_segments_waited_out(minio, s3, buckets, clients, proxy, monkeypatch):
    """Each segment's throttled GETs travel in its result to the assembled archive's summary.
    The CRT client's own retries are turned off here so that a 3 s throttle reaches the engine."""
    import s3arch.io.fetching
    import s3arch.io.crt
    from helpers import engine_clients
    from s3arch.archive import archive_segment, assemble_segments, prepare_segments
    from s3arch.core.config import ArchiveSpec, S3Url

    src, dst = buckets
    prefix = "events/"
    objects = {f"{prefix}{i:04d}.log": b"id=%d ok\n" % i for i in range(300)}
    seed(s3, src, objects)
    monkeypatch.setattr(s3arch.io.crt, "crt_retry_config", lambda s3, io: s3.S3RetryConfig(retry_mode=s3.S3RetryMode.NONE))
    monkeypatch.setattr(backoff, "THROTTLED", replace(backoff.THROTTLED, cap=2.0))  # pauses up to 2 s, not 20
    spec = ArchiveSpec(S3Url(src, prefix), S3Url(dst, "v/"), storage_class="STANDARD", processes=1)
    assert prepare_segments(spec, 2, clients).segments == 2
    fault = proxy.add(Fault("status", status=503, window=3.0,
                            match=lambda r: is_get(r) and r.key.startswith(f"{src}/{prefix}")))
    produced = archive_segment(spec, 0, engine_clients(minio, proxy.endpoint_url))
    assert fault.injected > 0 and produced["throttled"] >= fault.injected // 2
    archive_segment(spec, 1, clients)
    result = assemble_segments(spec, clients)
    assert result.status == "archived" and result.throttled == produced["throttled"]
    assert read_archive(s3, dst, f"v/{src}/events.tar.gz") == objects


@pytest.mark.parametrize("segmented", [False, True], ids=["one-pipeline", "segment-workers"])
@pytest.mark.slow
def test_throttle_budget_flag_is_the_budget_the_run_honours(s3, buckets, proxy, cli_env, segmented):
    """--throttle-budget 3 with S3ARCH_THROTTLE_BUDGET=900 in the environment: every source GET
    throttled for good fails the run with exit 3 after seconds, not 15 minutes, naming the
    budget; segment worker processes honour it too, and a segment that spent the budget is not
    started again (it would wait the budget out again, three times over)."""
    src, dst = buckets
    objects = {f"day/{i:03d}.log": b"event %d\n" % i for i in range(40)}
    seed(s3, src, objects)
    fault = proxy.add(Fault("status", status=503, match=lambda r: is_get(r) and r.key.startswith(f"{src}/day/")))
    segments = ("--processes", "2", "--segments", "2", "--segment-min-objects", "1") if segmented else ()
    started = time.monotonic()
    proc = run_cli({**cli_env, "S3ARCH_THROTTLE_BUDGET": "900"}, "--endpoint-url", proxy.endpoint_url, "archive",
                   f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD", "--throttle-budget", "3",
                   *segments, check=False)
    took = time.monotonic() - started
    stderr = proc.stderr.decode(errors="replace")
    print(f"\nexit {proc.returncode} after {took:.1f} s, {fault.injected} throttled answers: {stderr.strip()[-300:]}")
    assert proc.returncode == 3, stderr
    assert "longer than the throttle budget (3 s, --throttle-budget)" in stderr
    assert fault.injected > 0 and 3 <= took < 120
    # Nothing committed and no upload left open (a segmented run's recorded listing stays under
    # .segments/ for the next run of the prefix to clean up, as after any failed segmented run).
    assert [k for k in keys_in(s3, dst) if ".segments/" not in k] == [] and open_uploads(s3, dst) == []


def _cli_exit(argv: list[str], capsys) -> tuple[int, str]:
    """``s3arch ARGV`` run in this process (``s3arch.cli.main``, what ``python -m s3arch``
    exits with): its exit code and what it wrote to stderr."""
    from s3arch.cli import main

    try:
        code = main(argv)
    except SystemExit as refused:  # argparse's own refusals
        code = refused.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-5", "soon", "nan", "inf"])
def test_a_throttle_budget_that_is_not_a_positive_number_exits_2_naming_it(cli_env, value, monkeypatch, capsys):
    """In this process (the refusal comes before any request: no interpreter per case); the
    CLI's own process exits the same way (the last case, once)."""
    for name, setting in cli_env.items():
        monkeypatch.setenv(name, setting)
    monkeypatch.delenv("S3ARCH_THROTTLE_BUDGET", raising=False)
    for argv in (["archive", "s3://src-x/day/", "s3://dst-x/a/", "--throttle-budget", value],
                 ["--throttle-budget", value, "ls", "s3://dst-x/a/b.tar.gz"]):
        code, stderr = _cli_exit(argv, capsys)
        assert code == 2, (argv, stderr)
        assert f"--throttle-budget {value!r} must be a number of seconds > 0" in stderr, stderr
    monkeypatch.setenv("S3ARCH_THROTTLE_BUDGET", value)
    code, stderr = _cli_exit(["archive", "s3://src-x/day/", "s3://dst-x/a/"], capsys)
    assert code == 2 and f"S3ARCH_THROTTLE_BUDGET {value!r} must be a number of seconds > 0" in stderr, stderr
    if value == "inf":
        proc = run_cli({**cli_env, "S3ARCH_THROTTLE_BUDGET": value}, "archive", "s3://src-x/day/", "s3://dst-x/a/",
                       check=False)
        stderr = proc.stderr.decode(errors="replace")
        assert proc.returncode == 2 and f"S3ARCH_THROTTLE_BUDGET {value!r} must be a number of seconds > 0" in stderr


def test_a_jobs_or_operators_throttle_budget_is_the_specs_and_a_bad_one_names_the_job():
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import job_from_dict

    body = {"source": "s3://src-x", "prefix_template": "logs/{date:%Y/%m/%d}/", "destination": "s3://dst-x/"}
    from s3arch_airflow.operators import S3ArchivePrefixOperator

    job = job_from_dict("j", {**body, "throttle_budget": 45})
    assert job.spec_for("logs/2026/01/31/").throttle_budget == 45.0
    operator = S3ArchivePrefixOperator(task_id="a", source_bucket="src-x", prefix="logs/2026/01/31/",
                                       destination="s3://dst-x/", options=job.operator_args)
    assert operator._spec("logs/2026/01/31/") == job.spec_for("logs/2026/01/31/")
    templated = S3ArchivePrefixOperator(task_id="b", source_bucket="src-x", prefix="p/", destination="s3://dst-x/",
                                        options={"throttle_budget": "30"})  # as a rendered template gives it
    assert templated._spec("p/").throttle_budget == 30.0
    with pytest.raises(BadArgument, match=r"job 'j': throttle_budget -1 must be a number of seconds > 0"):
        job_from_dict("j", {**body, "throttle_budget": -1})
