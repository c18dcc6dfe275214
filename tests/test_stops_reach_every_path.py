"""A stop from above reaches the paths no stream's coordinator covers (tasks/core/stops.py): the
prefixes of an Airflow task after the one running, the steps of a run before its stream (bucket
checks, the lease, the late check, stale cleanup), and source deletion. Each test stops one and
checks what a user finds: nothing more run or deleted, no lease left, and a re-run (or the
command the error names) that finishes the work. Also: the hint after a late part's failed
deletion names a command that works."""

from __future__ import annotations

import re
import threading

import pytest

from faultproxy import Fault
from helpers import (TaskInstanceStub, archive_task, cli_archive_day, day_spec, engine_clients, keys_in, open_uploads,
                     run_cli, seed)
from s3arch.archive import archive_prefix

PREFIXES = ["day1/", "day2/", "day3/"]


def from_another_thread(stop) -> None:
    """``stop()`` from outside the run's thread, as Airflow's kill comes, over before the run goes on."""
    thread = threading.Thread(target=stop)
    thread.start()
    thread.join(10)


def on_first_request(clients, operation: str, stop, sent_for=lambda params: True) -> list[dict]:
    """``stop()`` from another thread when the engine is about to send its first ``operation``
    (botocore's name) whose parameters ``sent_for`` accepts; the parameters it was sent with."""
    seen: list[dict] = []

    def hook(params, **_):
        if not seen and sent_for(params):
            seen.append(params)
            from_another_thread(stop)

    clients.control.meta.events.register(f"before-parameter-build.s3.{operation}", hook)
    return seen


def urls_sent(clients) -> list[str]:
    """The URL of each request the engine's control client sends from now on (bucket checks,
    listings, the lease: everything before a stream)."""
    sent: list[str] = []
    clients.control.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.url))
    return sent


def leases(s3, bucket: str) -> list[str]:
    return [key for key in keys_in(s3, bucket) if key.endswith(".lease.json")]


@pytest.mark.parametrize("operation, of_day1, day1", [
    ("PutObject", lambda params: params["Key"].endswith("day1.lease.json"), "failed"),  # beside its first reads
    ("ListMultipartUploads", lambda params: "day1" in params.get("Prefix", ""), "failed"),  # under the lease
    ("DeleteObject", lambda params: params["Key"].endswith("day1.lease.json"), "archived"),  # its lease's release
], ids=["while-day1-takes-its-lease", "in-day1s-stale-cleanup", "after-day1"])
def test_stop_between_prefixes_runs_no_further_prefix_and_leaves_no_lease(s3, buckets, clients, monkeypatch,
                                                                           operation, of_day1, day1):
    from s3arch_airflow.task_rows import ROWS_XCOM_KEY
    from s3arch_airflow.task_stops import KILLED

    src, dst = buckets
    seed(s3, src, {f"{prefix}{i}.log": b"entry %d\n" % i for prefix in PREFIXES for i in range(5)})
    operator = archive_task(monkeypatch, clients, buckets, "S3ArchivePrefixOperator", prefix=PREFIXES)
    killed = on_first_request(clients, operation, operator.on_kill, of_day1)
    sent = urls_sent(clients)
    ti = TaskInstanceStub()
    with pytest.raises(Exception, match=re.escape(f"stopped: {KILLED}: 2 of 3 prefix(es) not run (day2/, day3/)")):
        operator.execute({"ti": ti})
    assert killed, f"day1 never sent its {operation}"
    rows = ti.pushed[ROWS_XCOM_KEY]
    assert [(row["prefix"], row["status"]) for row in rows] == [
        ("day1/", day1), ("day2/", "failed"), ("day3/", "failed")]
    assert [row["error"] for row in rows[1:]] == [f"not run: {KILLED}"] * 2
    if day1 == "failed":  # stopped before it wrote: nothing of it committed
        assert rows[0]["error"] == f"{KILLED} while archiving s3://{src}/day1/: nothing was committed"
    assert [url for url in sent if "day2" in url or "day3" in url] == []  # not a listing, not a lease PUT
    assert keys_in(s3, dst, f"a/{src}/day2") == [] and keys_in(s3, dst, f"a/{src}/day3") == []
    assert leases(s3, dst) == [] and open_uploads(s3, dst) == []


def test_a_run_stopped_before_it_starts_sends_nothing(minio, buckets, proxy):
    from s3arch.core.errors import Cancelled
    from s3arch.core.stops import Cancel

    src, dst = buckets
    cancel = Cancel()
    cancel.set("cancelled by a test")
    with pytest.raises(Cancelled, match=f"cancelled by a test while archiving s3://{src}/day/: nothing was sent"):
        archive_prefix(day_spec(src, dst), engine_clients(minio, proxy.endpoint_url), cancel=cancel)
    assert proxy.requests == 0  # not even the bucket checks


@pytest.fixture
def archived_day_with_a_late_object(s3, buckets, clients):
    """``day/`` archived, then an object arrived: a re-run archives it as the day's part 2."""
    src, dst = buckets
    seed(s3, src, {f"day/{i:02d}.log": b"entry %d\n" % i for i in range(20)})
    assert archive_prefix(day_spec(src, dst), clients).status == "archived"
    s3.put_object(Bucket=src, Key="day/late.log", Body=b"arrived after the day was archived")
    return src, dst


@pytest.mark.parametrize("operation, bucket", [
    ("ListObjectsV2", "src"),  # the late check before the lease
    ("ListMultipartUploads", "dst"),  # the late check and stale cleanup under the lease
], ids=["before-the-lease", "under-the-lease"])
def test_a_stop_in_the_late_check_of_a_committed_day_writes_no_part(s3, archived_day_with_a_late_object, clients,
                                                                    operation, bucket):
    from s3arch.core.errors import Cancelled
    from s3arch.core.stops import Cancel

    src, dst = archived_day_with_a_late_object
    cancel = Cancel()
    on_first_request(clients, operation, lambda: cancel.set("cancelled by a test"),
                     lambda params: params["Bucket"] == {"src": src, "dst": dst}[bucket])
    sent = urls_sent(clients)
    with pytest.raises(Cancelled, match=f"cancelled by a test while archiving s3://{src}/day/: nothing was committed"):
        archive_prefix(day_spec(src, dst), clients, cancel=cancel)
    assert [url for url in sent if "part-0002" in url] == []  # the part not started: not even its cleanup
    assert [key for key in keys_in(s3, dst) if ".part-" in key] == [] and leases(s3, dst) == []
    again = archive_prefix(day_spec(src, dst), clients)
    assert (again.status, again.part, again.late) == ("archived", 2, 1)


def test_stop_during_source_deletion_deletes_no_further_batch(s3, buckets, day, clients, cli_env):
    from s3arch.core.errors import Cancelled, SourceDeletionFailed
    from s3arch.core.stops import Cancel
    from s3arch.protocol.deletion import RECHECK_BATCH

    src, dst = buckets
    cancel = Cancel()
    # The first batch of the sources (the probe's DeleteObjects goes to the destination).
    on_first_request(clients, "DeleteObjects", lambda: cancel.set("cancelled by a test"),
                     lambda params: params["Bucket"] == src)
    with pytest.raises(SourceDeletionFailed, match=re.escape(
            f"cancelled by a test while deleting the archived sources of s3://{src}/day/: no further batch "
            "was deleted")) as stopped:
        archive_prefix(day_spec(src, dst, delete_source=True), clients, cancel=cancel)
    assert isinstance(stopped.value.__cause__, Cancelled)
    left = keys_in(s3, src)
    # The batch under way when the stop came was deleted, no other (MinIO: batches of RECHECK_BATCH).
    assert len(left) == len(day) - RECHECK_BATCH
    assert leases(s3, dst) == []
    result = cli_archive_day(cli_env, src, dst, "--delete-source", check=True)
    assert (result["status"], result["deleted"]) == ("skipped", len(left)) and keys_in(s3, src) == []


def test_failed_late_part_deletion_hint_names_a_command_that_works(s3, archived_day_with_a_late_object, minio, proxy,
                                                                   cli_env):
    from s3arch.core.errors import SourceDeletionFailed

    src, dst = archived_day_with_a_late_object
    proxy.add(Fault("status", status=403, code="AccessDenied",
                    match=lambda r: r.method == "POST" and "delete" in r.query and r.key.split("/")[0] == src))
    with pytest.raises(SourceDeletionFailed) as failed:
        archive_prefix(day_spec(src, dst, delete_source=True), engine_clients(minio, proxy.endpoint_url))
    assert f"a/{src}/day.part-0002.manifest.jsonl.gz" in keys_in(s3, dst)  # the late part is committed
    hinted = re.search(r"`s3arch (delete-sources [^`]+)`", str(failed.value))
    assert hinted, str(failed.value)
    assert run_cli(cli_env, *hinted.group(1).split()).returncode == 0
    assert keys_in(s3, src) == []


def test_a_stop_reaches_the_sizing_listing_which_lists_no_further_page(s3, buckets, clients):
    """A run sizes its source in a thread of its own (could it use segments?) while its
    pipeline starts: stopped from above, that thread lists no further page."""
    from s3arch.core.config import S3Url
    from s3arch.core.errors import Cancelled
    from s3arch.core.stops import Cancel
    from s3arch.produce.segments import SizingListing

    src, _ = buckets
    seed(s3, src, {f"big/{i:05d}.log": b"x" for i in range(3_000)})
    cancel = Cancel()
    listed = on_first_request(clients, "ListObjectsV2", lambda: cancel.set("marked failed"),
                              sent_for=lambda params: params.get("Prefix") == "big/")
    sizing = SizingListing(clients.store.bound(cancel), S3Url(src, "big/"), min_objects=10_000, min_bytes=1 << 40)
    with pytest.raises(Cancelled) as stopped:
        sizing.result()
    assert str(stopped.value).startswith("marked failed while list s3://")
    assert len(listed) == 1 and clients.store.sent.counts().get("list_objects_v2", 0) <= 1
