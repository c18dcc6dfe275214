"""The engine never hides a bug as weather, never loses an upload to a race, and says what
really happened: each test here names one way it used to get that wrong."""

from __future__ import annotations

import threading
import time

import pytest

import s3arch.produce.pipeline
from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.coordinator import Stopped
from s3arch.core.errors import Cancelled, ConcurrentRun, SourceChanged
from s3arch.core.stops import Cancel
from s3arch.format.manifest import layout_for
from s3arch.stored.manifests import ManifestWriter, read_index

from helpers import keys_in, open_uploads, read_archive, seed


def _spec(src, dst, **kw):
    return ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD", **kw)


def test_a_bug_in_the_pipeline_propagates_as_itself_not_as_a_retryable_error(s3, buckets, clients, monkeypatch):
    src, dst = buckets
    seed(s3, src, {f"day/{i:03d}.log": b"x" * 100 for i in range(20)})

    def broken(*args, **kwargs):
        return {}["no such key"]  # a KeyError in our own code

    monkeypatch.setattr(s3arch.produce.pipeline, "member_name", broken)
    with pytest.raises(KeyError):
        archive_prefix(_spec(src, dst, processes=1), clients)
    assert open_uploads(s3, dst) == []  # and the uploads were still cleaned up
    assert [k for k in keys_in(s3, dst) if not k.endswith(".lease.json")] == []


def test_a_dry_run_sample_of_an_object_changed_since_listing_is_a_typed_error(s3, buckets, clients, monkeypatch):
    import s3arch.archive

    src, dst = buckets
    seed(s3, src, {f"day/{i:03d}.log": b"x" * 100 for i in range(5)})
    real = s3arch.archive.source_pages

    def listed_then_changed(*args, **kwargs):
        for page in real(*args, **kwargs):
            s3.put_object(Bucket=src, Key="day/002.log", Body=b"changed")
            yield page

    monkeypatch.setattr(s3arch.archive, "source_pages", listed_then_changed)
    with pytest.raises(SourceChanged, match="day/002.log"):
        archive_prefix(_spec(src, dst, dry_run=True), clients)


def test_a_dry_run_sample_get_cut_or_stalled_is_asked_again_and_estimates_the_same(s3, buckets, minio, proxy):
    """The sample's GETs go through the data plane; one cut mid-body or stalled past the stall
    timeout is fetched again through the control plane, so the estimate is the fault-free one."""
    from faultproxy import Fault, is_get
    from helpers import engine_clients

    src, dst = buckets
    seed(s3, src, {f"day/{i:03d}.log": (f"GET /app/{i} 200 " * 60).encode() for i in range(40)})
    spec = _spec(src, dst, dry_run=True, stall_timeout=2.0)
    clean = archive_prefix(spec, engine_clients(minio, proxy.endpoint_url))
    cut = proxy.add(Fault("reset", count=3, match=is_get))
    stalled = proxy.add(Fault("stall", seconds=30, count=1, match=is_get))
    started = time.monotonic()
    faulted = archive_prefix(spec, engine_clients(minio, proxy.endpoint_url))
    assert (cut.injected, stalled.injected) == (3, 1)
    assert time.monotonic() - started < 20  # the stalled GET was not waited out
    assert faulted.status == clean.status == "dry_run" and faulted.objects == 40
    assert 0 < faulted.estimated_bytes_out == clean.estimated_bytes_out < faulted.tar_bytes
    assert keys_in(s3, dst) == []


def test_an_upload_cannot_be_created_after_it_was_aborted(s3, buckets, clients):
    """The collector may still be inside write -> submit when the pipeline aborts: the
    upload it would create lazily must be refused, not created unseen and left to bill."""
    from s3arch.io.upload import PartSizer, PartUploader

    _, dst = buckets
    uploader = PartUploader(clients.store, dst, "late.tar.gz", sizer=PartSizer(5 << 20))
    assert uploader.abort() is None
    with pytest.raises(InterruptedError):
        uploader.write(b"x" * (6 << 20))
    assert open_uploads(s3, dst) == []


def test_compression_refuses_a_block_after_abort_instead_of_dropping_it():
    """A dropped block made a cancelled run end in a retryable 'corrupt' IntegrityError."""
    from s3arch.format.compression import ParallelCompressor, codec_for

    release = threading.Event()
    delivered = []

    def slow_delivery(block):
        release.wait(10)
        delivered.append(block.index)

    compressor = ParallelCompressor(codec_for("gzip", 1), 1, 1, slow_delivery, lambda exc: None)
    abort = threading.Event()
    compressor.submit(0, b"a" * 1000, False, abort)  # takes the only slot until delivered
    abort.set()
    with pytest.raises(InterruptedError):
        compressor.submit(1, b"b" * 1000, False, abort)
    release.set()
    compressor.close(wait=True)
    assert delivered == [0]


def test_a_cancelled_segment_says_cancelled(s3, buckets, clients, monkeypatch):
    """A segment task killed mid-stream (on_kill sets its cancel event) reports Cancelled, not a
    retryable integrity error."""
    from s3arch.archive import archive_segment, prepare_segments
    from s3arch.format.compression import ParallelCompressor, codec_for
    from s3arch.produce.streamed import MemoryPlan

    src, dst = buckets
    seed(s3, src, {f"day/{i:03d}.bin": bytes([i]) * (1 << 20) for i in range(12)})  # 12 blocks
    spec = _spec(src, dst, segments=2, segment_min_objects=1, compress_threads=1)
    assert prepare_segments(spec, 2, clients).status == "planned"
    cancel = Cancel()
    refused = threading.Event()  # the race: the tar writer, waiting on a full queue, is refused its block
    codec = type(codec_for(spec.codec, spec.effective_level))  # what the compressor's threads run
    real_compress, real_submit = codec.compress, ParallelCompressor.submit
    holds = MemoryPlan.for_spec(spec).pending_blocks  # blocks the compressor takes before the writer waits
    offered: list[int] = []

    def held_compress(self, *args):
        refused.wait(30)  # nothing is compressed until the tar writer was refused a block
        return real_compress(self, *args)

    def cancel_once_the_queue_is_full(self, *args):
        offered.append(1)
        if len(offered) > holds:
            cancel.set()
        try:
            return real_submit(self, *args)
        except Stopped:
            refused.set()
            raise

    monkeypatch.setattr(codec, "compress", held_compress)
    monkeypatch.setattr(ParallelCompressor, "submit", cancel_once_the_queue_is_full)
    with pytest.raises(Cancelled):
        archive_segment(spec, 0, clients, cancel=cancel)
    assert refused.is_set(), "no block was offered after the cancel: the race was not reached"


def test_a_slow_lease_renewal_counts_as_time_and_stops_the_holder_before_the_ttl():
    """Renewals that each take longer than the TTL's margin must not look like success: the
    holder is told it lost the lease once 5/6 of the TTL passed, on the clock."""
    from s3arch.protocol.lease import PrefixLease

    class SlowS3:
        def get_object_lock_configuration(self, **kwargs):
            return {}  # no default retention

        def put_object(self, **kwargs):
            if "IfMatch" in kwargs:
                time.sleep(4)  # each renewal answers after 4 s; the TTL is 3 s
            return {"ETag": '"e"'}

    from s3arch.io.store import Store

    lease = PrefixLease(Store(SlowS3()), "b", "k.lease.json", purpose="test", ttl=3.0)
    lease.acquire()  # answered at once: only the renewals are slow
    lost = threading.Event()
    started = time.monotonic()
    lease.keep_alive(lambda error: lost.set())
    assert lost.wait(6), "the holder was never told"
    assert time.monotonic() - started < 3.0  # 5/6 of the TTL, give or take the clock
    # The renewals stopped with the loss: the keep-alive thread has nothing more to renew.


def test_the_loser_of_a_manifest_race_leaves_the_winners_index(s3, buckets, clients):
    _, dst = buckets
    layout = layout_for(S3Url("src", "day/"), S3Url(dst, "a/"))

    def writer(tag):
        manifest = ManifestWriter(clients.store, layout, {"source": {"bucket": "src", "prefix": "day/"},
                                                             "tag": tag})
        manifest.add_object({"type": "object", "key": f"day/{tag}", "size": 1})
        return manifest

    winner, loser = writer("winner"), writer("loser")
    winner.complete({"objects": 1, "bytes": 1})
    winner.write_index()
    with pytest.raises(ConcurrentRun):
        loser.complete({"objects": 1, "bytes": 1})
    assert loser.abort() is None
    assert read_index(clients.store, layout)["header"]["tag"] == "winner"


def test_step_4_aborts_the_records_upload_a_killed_large_segment_left(s3, buckets, clients):
    """A segmented run died while a large segment streamed its records (a multipart upload of
    its own): the next run's step 4 aborts it with the run's archive upload."""
    from s3arch.archive import prepare_segments
    from s3arch.produce.segments import read_plan

    src, dst = buckets
    seed(s3, src, {f"day/{i:03d}.log": b"x" * 100 for i in range(20)})
    spec = _spec(src, dst, processes=1)
    assert prepare_segments(spec, 2, clients).status == "planned"
    layout = layout_for(spec.source, spec.destination)
    plan = read_plan(clients.store, layout)
    s3.create_multipart_upload(Bucket=dst, Key=plan.temp_key(layout, 1, ".manifest.jsonl.gz"))
    assert len(open_uploads(s3, dst)) == 2

    result = archive_prefix(spec, clients)
    assert result.status == "archived" and result.stale_uploads_aborted == 2
    assert open_uploads(s3, dst) == []
    assert [k for k in keys_in(s3, dst) if ".segments/" in k] == []


def test_the_index_is_written_before_the_lease_is_released(s3, buckets, minio, proxy):
    """The index belongs to the run whose manifest won, and only while it holds the lease:
    released earlier, an --overwrite starting at once could have its new index replaced by
    this run's late one. The index PUT is held 2 s; the lease's DELETE must come after."""
    from faultproxy import Fault

    from helpers import engine_clients

    src, dst = buckets
    seed(s3, src, {f"day/{i}.log": b"x" * 50 for i in range(10)})
    seen: list = []
    proxy.add(Fault("status", rate=0.0, match=lambda r: seen.append((time.monotonic(), r.method, r.key)) or False))
    proxy.add(Fault("stall", seconds=2, count=1,
                    match=lambda r: r.method == "PUT" and r.key.endswith(".manifest-index.json.gz")))
    assert archive_prefix(_spec(src, dst), engine_clients(minio, proxy.endpoint_url)).status == "archived"
    index_put = next(t for t, method, key in seen if method == "PUT" and key.endswith(".manifest-index.json.gz"))
    lease_delete = next(t for t, method, key in seen if method == "DELETE" and key.endswith(".lease.json"))
    assert lease_delete - index_put >= 1.9
    assert not [k for k in keys_in(s3, dst) if k.endswith(".lease.json")]


@pytest.mark.slow
def test_a_prefix_that_proves_large_after_the_pipeline_started_is_archived_as_segments(s3, buckets, clients,
                                                                                         monkeypatch):
    """The pipeline starts on the first page while the prefix is still being sized; when the
    sizing shows it is large, the pipeline stops and the run goes on as segments. Stopping the
    pipeline must not abort the segments: the run commits, byte for byte."""
    import s3arch.produce.producers
    import s3arch.produce.segments.sizing
    from s3arch.format.tarwriter import TarStream

    src, dst = buckets
    objects = {f"day/{i:05d}.log": f"line {i}\n".encode() * (i % 7 + 1) for i in range(1_500)}  # two pages
    seed(s3, src, objects)
    real_pages = s3arch.produce.segments.sizing.source_pages
    streaming = threading.Event()  # the pipeline streams the first page's members
    real_begin = TarStream.begin

    def signalling_begin(self, *args):
        streaming.set()
        return real_begin(self, *args)

    def sizing_waits_after_the_first_page(*args, **kwargs):
        for n, page in enumerate(real_pages(*args, **kwargs)):
            if n == 1 and threading.current_thread().name == "s3arch-sizing":
                streaming.wait(60)  # the second page, the one that proves the prefix large, comes after
            yield page

    monkeypatch.setattr(TarStream, "begin", signalling_begin)
    monkeypatch.setattr(s3arch.produce.segments.sizing, "source_pages", sizing_waits_after_the_first_page)
    stopped = []  # what the pipeline raised when it stopped
    real_stream = s3arch.produce.producers.stream_archive

    def recording_stream(*args, **kwargs):
        try:
            return real_stream(*args, **kwargs)
        except BaseException as raised:
            stopped.append(type(raised))
            raise

    monkeypatch.setattr(s3arch.produce.producers, "stream_archive", recording_stream)
    result = archive_prefix(_spec(src, dst, processes=2, segment_min_objects=1_200, memory_budget=320 << 20), clients)
    assert streaming.is_set() and stopped and stopped[0].__name__ == "PrefixIsLarge", \
        "the pipeline never started before the sizing"
    assert (result.status, result.segments, result.objects) == ("archived", 2, len(objects))
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    assert open_uploads(s3, dst) == []




@pytest.mark.slow
def test_a_prefix_that_proves_large_while_compression_is_the_bottleneck_stops_the_pipeline_as_large(
        s3, buckets, clients, monkeypatch):
    """The same switch with zstd -19 on one thread: the tar writer is waiting on the compressor
    when the sizing says "large". That stop used to read as a cancel (``Cancelled``, exit 2:
    the run failed instead of going on as segments, in about half the runs); the pipeline
    raises the listing's ``PrefixIsLarge`` every time, its uploads aborted. Five runs."""
    import random

    from s3arch.format.compression import ParallelCompressor, codec_for
    from s3arch.io.listing import iter_pages
    from s3arch.format.manifest import layout_for
    from s3arch.produce.pipeline import WholeArchive, stream_archive
    from s3arch.produce.segments import PrefixIsLarge
    from s3arch.produce.streamed import MemoryPlan

    src, dst = buckets
    rng = random.Random(2)
    words = [bytes(rng.choice(b"abcdefghijklmnop") for _ in range(rng.randrange(3, 9))) for _ in range(2000)]
    seed(s3, src, {f"day/{i:05d}.log": b" ".join(rng.choice(words) for _ in range(500))[:3 << 10]
                   for i in range(600)})  # 2.1 MiB of tar: 8 blocks of about 0.45 s at zstd -19
    spec = _spec(src, dst, processes=1, codec="zstd", level=19, compress_threads=1, block_size=256 << 10,
                 memory_budget=64 << 20)
    layout = layout_for(spec.source, spec.destination)
    target = WholeArchive(spec, layout, layout.archive_key(codec_for("zstd", 19).extension))
    first_page = next(iter_pages(clients.store, src, "day/"))
    holds = MemoryPlan.for_spec(spec).pending_blocks  # blocks the compressor takes before the writer waits
    assert holds < 8
    codec = type(codec_for("zstd", 19))  # what the compressor's threads run
    real_compress, real_submit = codec.compress, ParallelCompressor.submit
    offered: list[int] = []
    writer_waits, said_large = threading.Event(), threading.Event()

    def held_compress(self, *args):
        said_large.wait(30)  # compression stays the bottleneck until the sizing has spoken
        return real_compress(self, *args)

    def counting_submit(self, *args):
        offered.append(1)
        if len(offered) > holds:  # every slot is taken: this block waits on the compressor
            writer_waits.set()
        return real_submit(self, *args)

    def sized_large_once_the_writer_waits():
        yield first_page
        writer_waits.wait(60)
        said_large.set()
        raise PrefixIsLarge()

    monkeypatch.setattr(codec, "compress", held_compress)
    monkeypatch.setattr(ParallelCompressor, "submit", counting_submit)
    for run in range(5):
        offered.clear()
        writer_waits.clear()
        said_large.clear()
        with pytest.raises(BaseException) as caught:
            stream_archive(spec, clients, target, listed=sized_large_once_the_writer_waits())
        assert writer_waits.is_set(), f"run {run + 1}: the tar writer never waited on the compressor"
        assert isinstance(caught.value, PrefixIsLarge), f"run {run + 1}: {caught.value!r}"
    assert open_uploads(s3, dst) == []
