"""Every way a run stops before its end (tasks/core/stops.py), one test each, asserting what the
user reads and that nothing is left behind: a person (Ctrl-C), Airflow's ``on_kill`` (an archive
task and a prepare task), a lost lease, and the stall watchdog, which stops a request, never the
run. (A task whose supervisor is gone: tests/test_airflow_dag.py.) Each stop is sent while the
archive's upload is open, and the test waits for the stop to reach the stream's coordinator
(an event, not a sleep) before the stream goes on."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

import pytest

from helpers import TaskInstanceStub, archive_task, keys_in, open_uploads, seed

PREFIX = "day/"
STOP_AT = 40  # the member the stop is sent at: with 1 MiB members, parts are uploaded by then


def spec(src, dst, **kw):
    from s3arch.core.config import ArchiveSpec, S3Url

    return ArchiveSpec(S3Url(src, PREFIX), S3Url(dst, "a/"), storage_class="STANDARD", processes=1, **kw)


@pytest.fixture
def day(s3, buckets):
    seed(s3, buckets[0], {f"{PREFIX}{i:03d}.bin": os.urandom(1 << 20) for i in range(48)})


def killed_row(operator) -> str:
    """Run ``operator``, killed on the way; the error its row reads."""
    from s3arch_airflow.task_rows import ROWS_XCOM_KEY

    ti = TaskInstanceStub()
    with pytest.raises(Exception, match="cancelled by Airflow"):
        operator.execute({"ti": ti})
    [row] = ti.pushed[ROWS_XCOM_KEY]
    assert row["status"] == "failed"
    return row["error"]


def archive_upload_opened(s3, bucket: str, timeout: float = 60) -> bool:
    """Whether MinIO shows an upload of an archive (``.tar.gz``) open in ``bucket`` within
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(u["Key"].endswith(".tar.gz") for u in open_uploads(s3, bucket)):
            return True
        time.sleep(0.05)
    return False


def stop_when_streaming(monkeypatch, stop: Callable[[], None], s3, bucket: str) -> None:
    """``stop()`` runs once the archive's upload is open in ``bucket`` (as MinIO lists it)
    and the tar writer begins member ``STOP_AT``; the stream goes on from there, as it would
    after a stop from another thread."""
    from s3arch.format.tarwriter import TarStream

    begun = []
    begin = TarStream.begin

    def begin_and_stop(self, *args):
        begun.append(1)
        if len(begun) == STOP_AT:
            assert archive_upload_opened(s3, bucket), "the archive's upload was never created"
            stop()
        return begin(self, *args)

    monkeypatch.setattr(TarStream, "begin", begin_and_stop)


def cancels_seen(monkeypatch) -> threading.Event:
    """Set once a coordinator was cancelled from above: the stop reached the stream."""
    from s3arch.core.coordinator import StreamCoordinator

    seen, cancel = threading.Event(), StreamCoordinator.cancel

    def cancel_and_tell(self, reason="cancelled"):
        done = cancel(self, reason)
        seen.set()
        return done

    monkeypatch.setattr(StreamCoordinator, "cancel", cancel_and_tell)
    return seen


def test_ctrl_c_aborts_the_uploads_and_the_cli_says_interrupted_and_exits_130(s3, buckets, day, minio,
                                                                               monkeypatch, capsys):
    import s3arch.cli as cli

    src, dst = buckets
    for name, value in minio.env().items():
        monkeypatch.setenv(name, value)

    def ctrl_c():
        raise KeyboardInterrupt

    stop_when_streaming(monkeypatch, ctrl_c, s3, dst)
    assert cli.main(["archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                     "--processes", "1", "--quiet"]) == 130
    assert "interrupted; uploads in progress were aborted" in capsys.readouterr().err
    assert open_uploads(s3, dst) == [] and keys_in(s3, dst) == []  # no upload, archive, manifest or lease


def test_on_kill_stops_an_archive_task_with_airflows_reason_and_leaves_nothing(s3, buckets, day, clients,
                                                                               monkeypatch):
    from s3arch_airflow.task_stops import KILLED

    src, dst = buckets
    operator = archive_task(monkeypatch, clients, buckets, "S3ArchivePrefixOperator", prefix=PREFIX)
    seen = cancels_seen(monkeypatch)

    def kill():
        operator.on_kill()  # what Airflow's SIGTERM handler calls, on this thread
        assert seen.wait(10)

    stop_when_streaming(monkeypatch, kill, s3, dst)
    assert killed_row(operator) == (
        f"{KILLED} while archiving s3://{src}/{PREFIX}: its uploads were aborted and nothing was committed")
    assert open_uploads(s3, dst) == [] and keys_in(s3, dst) == []


def test_on_kill_stops_a_prepare_task_before_it_plans_or_opens_an_upload(s3, buckets, day, clients, monkeypatch):
    """The prepare task ran its plan without the task's cancel: a killed prepare went on,
    opened the archive's upload and wrote plan.json."""
    import s3arch.protocol.commit as commit
    from s3arch_airflow.task_stops import KILLED

    src, dst = buckets
    operator = archive_task(monkeypatch, clients, buckets, "S3PrepareSegmentsOperator", prefix=PREFIX, segments=2)
    plan_segments = commit.plan_segments

    def killed_while_planning(spec, store, archive_key, count, stop, listed=None):
        def kill_then_stop():
            operator.on_kill()
            assert stop.__self__.wait(10), "the kill never reached the plan"  # the plan's coordinator
            stop()

        return plan_segments(spec, store, archive_key, count, stop=kill_then_stop, listed=listed)

    monkeypatch.setattr(commit, "plan_segments", killed_while_planning)
    assert killed_row(operator) == (
        f"{KILLED} while planning the segments of s3://{src}/{PREFIX}: nothing was written")
    # Nothing planned: no upload open, no plan.json, no lease left.
    assert open_uploads(s3, dst) == [] and keys_in(s3, dst) == []


def test_a_lost_lease_stops_the_run_with_the_leases_own_reason(s3, buckets, day, clients, monkeypatch):
    from s3arch.archive import archive_prefix
    from s3arch.core.errors import ConcurrentRun
    from s3arch.format.manifest import layout_for

    src, dst = buckets
    the_spec = spec(src, dst, lease_ttl=3.0)  # renewed every 0.5 s
    lease_key = layout_for(the_spec.source, the_spec.destination).lease_key
    seen = cancels_seen(monkeypatch)

    def taken_over():
        s3.put_object(Bucket=dst, Key=lease_key, Body=b'{"owner": "another run"}')  # its ETag is not ours
        assert seen.wait(10), "the lost lease never reached the stream"

    stop_when_streaming(monkeypatch, taken_over, s3, dst)
    with pytest.raises(ConcurrentRun, match="was taken over by another run; nothing was committed") as lost:
        archive_prefix(the_spec, clients)
    assert lost.value.exit_code == 3
    assert open_uploads(s3, dst) == [] and keys_in(s3, dst) == [lease_key]  # the other run's lease, kept


def test_the_stall_watchdog_cancels_a_stalled_request_and_never_the_run():
    """A stalled request is cancelled and sent again by its sender; only a fault that outlasts
    the retries fails the run (tests/test_failure_causes.py: stalled tag and checksum reads)."""
    from s3arch.core.coordinator import StreamCoordinator

    coordinator = StreamCoordinator("the archive of s3://b/day/", stall_timeout=0.2)
    cancelled = threading.Event()
    coordinator.track("GetObjectTagging s3://b/day/1.log", cancel=cancelled.set)
    coordinator.start_watchdog()
    try:
        assert cancelled.wait(5)
        assert coordinator.status == "running" and coordinator.exception is None and not coordinator.is_set()
    finally:
        coordinator.stop_watchdog()


def test_a_cancel_set_before_the_stream_starts_stops_it_at_once_with_its_reason():
    """No race with the thread that waits for a cancel: one already set stops the stream
    before its first step (a prepare cancelled at once opened no upload only by luck)."""
    from s3arch.core.coordinator import StreamCoordinator
    from s3arch.core.stops import Cancel, cancelling

    cancel = Cancel()
    cancel.set("cancelled by a person")
    coordinator = StreamCoordinator("the archive of s3://b/day/")
    with cancelling(coordinator, cancel, "archiving s3://b/day/"):
        assert coordinator.is_set()
    assert str(coordinator.exception) == ("cancelled by a person while archiving s3://b/day/: its uploads were "
                                          "aborted and nothing was committed")
