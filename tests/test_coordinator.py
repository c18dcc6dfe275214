"""The stream coordinator (tasks/core/coordinator.py): one status, one exception (the first real
one), cancel one-way from above with the cleanups each resource registered, and one table of
requests in flight that the stall watchdog reads. The last tests drive it through a real
stream: a lost lease cancels it with its own reason, and the fetch budget holds tiny objects
waiting behind a stalled GET."""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timezone

import pytest

from s3arch.core.coordinator import Stopped, StreamCoordinator
from s3arch.core.errors import Cancelled, ConcurrentRun, SourceChanged, TransientError


def test_the_first_real_failure_wins_and_a_stop_signal_is_never_one():
    c = StreamCoordinator("the archive of s3://b/day/")
    assert not c.set_exception(Stopped("compression stopped"))  # a signal, not a cause
    assert c.status == "running" and not c.is_set()
    first = SourceChanged("GET s3://b/day/1.log: object vanished after it was listed")
    assert c.set_exception(first)
    assert not c.set_exception(TransientError("later, and caused by the stop"))
    assert not c.cancel("too late: it failed already")
    assert c.is_set() and c.status == "failed" and c.exception is first
    assert c.failure(Stopped("the tar writer noticed")) is first
    with pytest.raises(Stopped):
        c.raise_if_stopped()


def test_cancel_is_one_way_runs_each_cleanup_once_and_keeps_its_reason():
    c = StreamCoordinator("the archive of s3://b/day/")
    ran = []
    c.add_failure_cleanup(lambda: ran.append("archive upload aborted"))
    c.add_failure_cleanup(lambda: TransientError("abort of the manifest upload failed"))
    lost = ConcurrentRun("the lease was taken over")
    assert c.cancel(lost)
    assert c.status == "cancelled" and c.exception is lost and ran == ["archive upload aborted"]
    assert "cleanup also failed: abort of the manifest upload failed" in lost.__notes__[0]
    assert not c.cancel("again") and not c.set_exception(ValueError("after the cancel"))
    assert c.run_failure_cleanups() == [] and ran == ["archive upload aborted"]
    c.add_failure_cleanup(lambda: ran.append("made after the cancel: aborted at once"))
    assert ran[-1] == "made after the cancel: aborted at once"
    plain = StreamCoordinator("x")
    plain.cancel("stopped by a person")
    assert isinstance(plain.exception, Cancelled) and str(plain.exception) == "stopped by a person"


def test_a_stream_that_ended_well_hands_its_resources_on_and_cannot_be_cancelled():
    c = StreamCoordinator("x")
    ran = []
    c.add_failure_cleanup(lambda: ran.append("aborted"))
    assert c.announce_done()
    assert not c.cancel("lease lost during the commit") and ran == [] and c.exception is None


def test_the_watchdog_cancels_a_stalled_request_once_and_a_cancel_from_above_stops_the_rest_with_its_reason():
    from s3arch.core.stops import Cancel, cancelling

    cancel = Cancel()
    c = StreamCoordinator("x", stall_timeout=0.3)
    cancelled = []
    stalled = c.track("GetObjectTagging s3://b/day/1.log")
    c.cancellable(stalled, lambda: cancelled.append("tagging"))
    moving = c.track("GET s3://b/day/2.log", cancel=lambda: cancelled.append("get"))
    listing = c.track("LIST s3://b/day/ (page 3)")  # a boto3 call: listed, never cancelled
    c.start_watchdog()
    until = time.monotonic() + 1.5  # five stall timeouts, the GET making progress all along
    while time.monotonic() < until:
        moving.progressed()
        time.sleep(0.05)
    assert cancelled == ["tagging"] and c.stalls_cancelled == 1
    assert {r.what for r in c.in_flight()} == {stalled.what, moving.what, listing.what}
    with cancelling(c, cancel, "archiving s3://b/day/"):
        cancel.set("cancelled by a person")
        assert c.wait(2) and isinstance(c.exception, Cancelled)
    assert str(c.exception) == ("cancelled by a person while archiving s3://b/day/: its uploads were aborted "
                                "and nothing was committed")
    assert cancelled == ["tagging", "get"]  # the cancel cancels what is still in flight
    c.stop_watchdog()


class _StalledFirstGet:
    """A data plane whose first GET never answers; every other one answers at once, a
    zero-byte body with a full set of response headers."""

    def __init__(self):
        self.requests = 0

    def get(self, key, *, etag, byte_range, on_body, on_done, on_headers=None):
        self.requests += 1
        if self.requests > 1:
            if on_headers is not None:
                on_headers([("content-type", "text/plain")] + [(f"x-amz-meta-field-{i}", "v" * 60) for i in range(20)])
            on_done(None)
        return self

    def cancel(self):
        pass


def test_tiny_objects_behind_a_stalled_get_are_held_within_the_fetch_budget():
    """The budget counted payload bytes only: zero-byte objects waiting behind one stalled
    GET were all fetched, each holding its piece and its response headers, without limit
    (100,000 here). Each piece now costs a fixed amount on top of its bytes, and its headers
    are dropped once its attributes are read."""
    from s3arch.io.fetching import PIECE_COST, Fetcher
    from s3arch.io.flow import ByteBudget
    from s3arch.io.listed import ListedObject

    class FullBudget(ByteBudget):
        """Sets ``full`` once a reservation has to wait: everything the budget holds is fetched."""

        def __init__(self, cap):
            super().__init__(cap)
            self.full = threading.Event()

        def acquire(self, n, abort):
            if self.used and self.used + n > self.cap:
                self.full.set()
            return super().acquire(n, abort)

    plane = _StalledFirstGet()
    coordinator = StreamCoordinator("x", stall_timeout=3600)
    budget = FullBudget(256 << 10)
    fetcher = Fetcher(plane, "b", budget=budget, concurrency=8, chunk=1 << 20, coordinator=coordinator)
    now = datetime.now(timezone.utc)
    listed = (ListedObject(f"day/{i:06d}.log", 0, '"e"', now) for i in range(100_000))
    consumer = threading.Thread(target=lambda: pytest.raises(Stopped, list, fetcher.pieces(listed)), daemon=True)
    consumer.start()
    assert budget.full.wait(60), "the fetcher never filled its budget"
    waiting = list(fetcher._done.values())
    assert plane.requests <= (256 << 10) // PIECE_COST + 1, plane.requests
    assert budget.used <= budget.cap
    assert waiting and all(p.headers is None and p.captured is not None for p in waiting)
    coordinator.cancel("test over")
    consumer.join(5)
    assert not consumer.is_alive()


def test_a_lost_lease_cancels_a_running_stream_with_its_own_reason_and_nothing_is_left(s3, buckets, clients):
    """What ``with lease.held(...)`` does when the lease is lost: ``coordinator.cancel(the
    lease's error)``. The stream stops promptly, raises that error (not 'stopped', not a
    failure of some stage), and its uploads are aborted."""
    from helpers import keys_in, open_uploads, seed
    from s3arch.format.compression import codec_for
    from s3arch.core.config import ArchiveSpec, S3Url
    from s3arch.format.manifest import layout_for
    from s3arch.produce.pipeline import WholeArchive, stream_archive

    src, dst = buckets
    # Incompressible, and zstd -19 on one thread: about a second a block, so the stream is
    # still running when its first part (5 blocks) has created the upload.
    seed(s3, src, {f"day/{i:03d}.bin": os.urandom(1 << 20) for i in range(16)})
    spec = ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD", processes=1,
                       memory_budget=64 << 20, codec="zstd", level=19, compress_threads=1, min_part_size=5 << 20)
    layout = layout_for(spec.source, spec.destination)
    target = WholeArchive(spec, layout, layout.archive_key(codec_for("zstd", 19).extension))
    coordinator = StreamCoordinator(f"the archive of {spec.source}", stall_timeout=spec.stall_timeout)
    lost = ConcurrentRun("the lease on s3://dst/a/ was taken over by another run")
    outcome: list = []

    def run():
        try:
            outcome.append(stream_archive(spec, clients, target, coordinator=coordinator))
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not open_uploads(s3, dst):
        time.sleep(0.05)
    assert open_uploads(s3, dst), "the stream never started its upload"
    cancelled_at = time.monotonic()
    assert coordinator.cancel(lost)
    worker.join(30)
    stopped_in = time.monotonic() - cancelled_at
    assert outcome and outcome[0] is lost, outcome
    assert stopped_in < 5, stopped_in
    assert open_uploads(s3, dst) == [] and keys_in(s3, dst) == []
