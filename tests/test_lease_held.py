"""Every path that writes or deletes holds the prefix's lease through ``with lease.held(...)``
(tasks/protocol/lease.py): renewed every sixth of the TTL for as long as the path runs, released on
every exit. Each writing path is slowed past its TTL at a point of its own (deterministically:
the engine function it calls sleeps); a second run started after the TTL must still find the
prefix taken (ConcurrentRun, exit 3), and the lease must be gone once the path is over. Where
the point is a request (the clean-up's listing of open uploads, a batch of deletes), the proxy in
front of MinIO holds that request instead.
Also: the lease is released when the first state read fails, and a failed --overwrite leaves
the old archive committed."""

from __future__ import annotations

import threading
import time

import pytest

from faultproxy import Fault, is_delete_objects, is_uploads_listing, makes_visible
from helpers import engine_clients, keys_in, open_uploads, seed

TTL = 3.0
PREFIX = "day/"


def spec(src, dst, **kw):
    from s3arch.core.config import ArchiveSpec, S3Url

    return ArchiveSpec(S3Url(src, PREFIX), S3Url(dst, "a/"), storage_class="STANDARD", processes=1,
                       lease_ttl=TTL, **kw)


@pytest.fixture
def day(s3, buckets):
    objects = {f"{PREFIX}{i:03d}.log": b"entry %d\n" % i for i in range(40)}
    seed(s3, buckets[0], objects)
    return objects


def leases(s3, dst) -> list[str]:
    return [k for k in keys_in(s3, dst) if k.endswith(".lease.json")]


def slowed(monkeypatch, owner, name: str, seconds: float) -> threading.Event:
    """``owner.name`` sleeps ``seconds`` before it runs; the event says it was reached."""
    reached = threading.Event()
    original = getattr(owner, name)

    def slow(*args, **kwargs):
        reached.set()
        time.sleep(seconds)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, slow)
    return reached


def stale_cleanup_slowed(proxy, seconds: float) -> threading.Event:
    """The clean-up of dead runs' uploads (commit step 4) takes ``seconds``: the proxy holds its
    listing of the archive's open uploads that long; the event says it was reached."""
    reached = threading.Event()
    proxy.add(Fault("stall", seconds=seconds, count=1, match=lambda r: is_uploads_listing(r, ".tar.gz"),
                    on_inject=lambda r: reached.set()))
    return reached


def outlasts_its_ttl(first, second, reached: threading.Event) -> tuple[object, BaseException]:
    """Run ``first`` (slowed past the TTL) in a thread; once it has run 1.5 TTLs, ``second``
    must fail. Returns first's result and second's error."""
    from s3arch.core.errors import ConcurrentRun

    out: dict = {}

    def run():
        try:
            out["result"] = first()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run)
    started = time.monotonic()
    thread.start()
    assert reached.wait(60), out.get("error")
    time.sleep(max(0.0, started + 1.5 * TTL - time.monotonic()))
    with pytest.raises(ConcurrentRun, match="another run holds this prefix") as taken:
        second()
    assert taken.value.exit_code == 3
    thread.join(120)
    assert "error" not in out, out.get("error")
    return out["result"], taken.value


def test_a_run_outlasting_its_ttl_before_it_streams_keeps_the_prefix(minio, s3, buckets, day, clients, proxy):
    """The clean-up of dead runs' uploads before the stream (step 4) ran without renewal."""
    from s3arch.archive import archive_prefix

    src, dst = buckets
    reached = stale_cleanup_slowed(proxy, 2.5 * TTL)
    proxied = engine_clients(minio, proxy.endpoint_url)
    result, _ = outlasts_its_ttl(lambda: archive_prefix(spec(src, dst), proxied),
                                 lambda: archive_prefix(spec(src, dst, overwrite=True), clients), reached)
    assert result.status == "archived" and result.objects == len(day)
    assert leases(s3, dst) == []


def test_a_prepare_outlasting_its_ttl_keeps_the_prefix_and_one_upload(s3, buckets, day, clients, monkeypatch):
    """A 10M-key plan took 440 s against the 180 s TTL: a second prepare took the prefix and
    opened a second upload, the first one orphaned."""
    import s3arch.protocol.commit
    from s3arch.archive import prepare_segments

    src, dst = buckets
    reached = slowed(monkeypatch, s3arch.protocol.commit, "plan_segments", 2.5 * TTL)
    result, _ = outlasts_its_ttl(lambda: prepare_segments(spec(src, dst), 2, clients),
                                 lambda: prepare_segments(spec(src, dst), 2, clients), reached)
    assert result.status == "planned" and result.segments == 2
    assert len(open_uploads(s3, dst)) == 1
    assert leases(s3, dst) == []


def test_an_assembly_outlasting_its_ttl_keeps_the_prefix(minio, s3, buckets, day, clients, proxy):
    from s3arch.archive import archive_segment, assemble_segments, prepare_segments

    src, dst = buckets
    assert prepare_segments(spec(src, dst), 2, clients).status == "planned"
    for k in (0, 1):
        archive_segment(spec(src, dst), k, clients)
    reached = stale_cleanup_slowed(proxy, 2.5 * TTL)
    proxied = engine_clients(minio, proxy.endpoint_url)
    result, _ = outlasts_its_ttl(lambda: assemble_segments(spec(src, dst), proxied),
                                 lambda: assemble_segments(spec(src, dst), clients), reached)
    assert result.status == "archived" and result.objects == len(day)
    assert leases(s3, dst) == [] and open_uploads(s3, dst) == []


@pytest.mark.parametrize("path", ["delete-sources", "skip-then-delete"])
def test_a_deletion_outlasting_its_ttl_keeps_the_prefix(s3, buckets, day, clients, monkeypatch, path):
    """delete_sources_only and a re-run with --delete-source of a committed prefix held the
    lease without renewing it (a 1,000,000-object deletion takes about 8 minutes)."""
    import s3arch.protocol.commit
    from s3arch.archive import archive_prefix, delete_sources

    src, dst = buckets
    assert archive_prefix(spec(src, dst), clients).status == "archived"
    reached = slowed(monkeypatch, s3arch.protocol.commit, "delete_archived_sources", 2.5 * TTL)
    if path == "delete-sources":
        first = lambda: delete_sources(spec(src, dst, delete_source=True), clients)  # noqa: E731
    else:
        first = lambda: archive_prefix(spec(src, dst, delete_source=True), clients)  # noqa: E731
    result, _ = outlasts_its_ttl(first, lambda: delete_sources(spec(src, dst, delete_source=True), clients), reached)
    assert result.status == "skipped" and result.deleted == len(day)
    assert keys_in(s3, src) == [] and leases(s3, dst) == []


@pytest.mark.parametrize("path", ["delete-sources", "archive-then-delete"])
def test_a_deletion_that_loses_its_lease_deletes_nothing_more(minio, s3, buckets, day, clients, proxy, monkeypatch,
                                                               path):
    """The deletion ran on after its lease was lost (renewals stopped nothing but the commit):
    another run could hold the prefix meanwhile. Now a lost lease ends it before the next
    batch, as a retryable error that says so."""
    import s3arch.protocol.deletion
    import s3arch.protocol.lease
    from s3arch.archive import archive_prefix, delete_sources
    from s3arch.core.errors import ConcurrentRun, SourceDeletionFailed

    src, dst = buckets
    if path == "delete-sources":
        assert archive_prefix(spec(src, dst), clients).status == "archived"
    monkeypatch.setattr(s3arch.protocol.deletion, "BATCH", 10)
    monkeypatch.setattr(s3arch.protocol.deletion, "RECHECK_BATCH", 10)
    lost = threading.Event()
    lose = s3arch.protocol.lease.Held.lose

    def noted(self, error):
        lose(self, error)
        lost.set()

    monkeypatch.setattr(s3arch.protocol.lease.Held, "lose", noted)
    taker = b'{"owner": "another run"}'

    def taken_over(request):  # another run takes the prefix; the next renewal finds out
        [lease] = leases(s3, dst)
        s3.put_object(Bucket=dst, Key=lease, Body=taker)

    # The first batch of deletes is held on its way until the renewal found the lease taken,
    # then applied: the deletion must send no second batch.
    first_batch = proxy.add(Fault("stall", until=lost, seconds=10 * TTL, count=1,
                                  match=lambda r: is_delete_objects(r, src), on_inject=taken_over))
    run = delete_sources if path == "delete-sources" else archive_prefix
    with pytest.raises(SourceDeletionFailed) as failed:
        run(spec(src, dst, delete_source=True), engine_clients(minio, proxy.endpoint_url))
    assert first_batch.injected == 1 and lost.is_set()
    assert failed.value.exit_code == 3 and isinstance(failed.value.__cause__, ConcurrentRun)
    assert "deleted 10 archived source objects" in str(failed.value)
    assert "lost its lease" in str(failed.value) and "another run took it over" in str(failed.value)
    assert len(keys_in(s3, src)) == len(day) - 10
    [lease] = leases(s3, dst)  # the taker's, left alone by this run's release
    assert s3.get_object(Bucket=dst, Key=lease)["Body"].read() == taker


def test_the_lease_is_released_when_the_first_state_read_fails(minio, s3, buckets, day, clients, proxy):
    """The lease is taken beside the first read of the prefix's state; that read failing left
    it behind, and the next run waited out the TTL (ConcurrentRun)."""
    from s3arch.archive import archive_prefix
    from s3arch.core.errors import AccessDenied

    src, dst = buckets
    # 403 to the manifest's HEAD and to the listing that tells a missing key from a denied
    # one (a 403 for a key the listing shows missing is taken as missing, issue 31).
    refused = proxy.add(Fault("status", status=403, code="AccessDenied",
                              match=lambda r: r.method in ("GET", "HEAD") and (
                                  "manifest" in r.key or "manifest" in r.query.get("prefix", [""])[0])))
    with pytest.raises(AccessDenied):
        archive_prefix(spec(src, dst), engine_clients(minio, proxy.endpoint_url))
    assert refused.injected
    assert leases(s3, dst) == []
    assert archive_prefix(spec(src, dst), clients).status == "archived"  # at once, no ConcurrentRun


def test_a_failed_overwrite_keeps_the_old_archive_committed(minio, s3, buckets, day, clients, proxy):
    """--overwrite deleted the old manifest first: a run that then failed to complete its
    archive left the old archive without a manifest (unguarded: a plain re-run archived
    afresh, readers found nothing). The old manifest goes only once the new archive is in."""
    from s3arch.archive import archive_prefix
    from s3arch.core.errors import AccessDenied

    src, dst = buckets
    assert archive_prefix(spec(src, dst), clients).status == "archived"
    before = sorted(keys_in(s3, dst))
    s3.put_object(Bucket=src, Key=f"{PREFIX}999-late.log", Body=b"late\n")
    refused = proxy.add(Fault("status", status=403, code="AccessDenied",
                              match=lambda r: makes_visible(r, "day.tar.gz")))
    with pytest.raises(AccessDenied):
        archive_prefix(spec(src, dst, overwrite=True), engine_clients(minio, proxy.endpoint_url))
    assert refused.injected
    assert sorted(keys_in(s3, dst)) == before and open_uploads(s3, dst) == []
    again = archive_prefix(spec(src, dst), clients)  # the old archive is part 1; the late object part 2
    assert (again.status, again.part, again.late) == ("archived", 2, 1)


def test_a_prepare_can_be_cancelled_and_writes_no_upload_or_plan(s3, buckets, day, clients):
    """prepare_segments could not be stopped (a killed Airflow task's plan ran on). Now its
    cancel event stops the plan between pages, before it opens an upload or writes plan.json."""
    from s3arch.archive import prepare_segments
    from s3arch.core.errors import Cancelled
    from s3arch.core.stops import Cancel

    src, dst = buckets
    cancel = Cancel()
    cancel.set()
    with pytest.raises(Cancelled, match="cancelled while planning"):
        prepare_segments(spec(src, dst), 2, clients, cancel=cancel)
    assert open_uploads(s3, dst) == [] and leases(s3, dst) == []
    assert [k for k in keys_in(s3, dst) if k.endswith("plan.json")] == []
