"""User stories: whatever goes wrong in a stream, the user is told the first real cause.

A stream's stages (listing, fetch, tag and checksum reads, compression, part uploads) run on
many threads; each test here aims one fault at one kind of request through the fault proxy
and checks what a user would see: the exit code (3 try again, 2 fix something, 1 a bug), a
message naming the cause and the key, and nothing left behind. The races these tests guard
against lost the cause in about one run of two, so the first two repeat their run 20 times.
"""

from __future__ import annotations

import random
import threading
import time
from xml.etree import ElementTree

import pytest

import s3arch.io.attributes
import s3arch.io.connections
import s3arch.io.fetching
from faultproxy import Fault, is_get
from helpers import engine_clients, keys_in, open_uploads, read_archive, seed
from s3arch.archive import archive_prefix
from s3arch.core import backoff
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import AccessDenied, ArchiverError, SourceChanged, TransientError
from s3arch.format.manifest import layout_for
from s3arch.stored.manifests import iter_manifest


def is_object_get(r) -> bool:
    return is_get(r) and "tagging" not in r.query


def is_tagging(r) -> bool:
    return r.method == "GET" and "tagging" in r.query


PROXY_SEED = 11  # the conftest proxy's random faults


def _words(rng: random.Random, size: int) -> bytes:
    """Text zstd -19 compresses slowly (about 0.45 s per 256 KiB block here)."""
    words = [bytes(rng.choice(b"abcdefghijklmnop") for _ in range(rng.randrange(3, 9))) for _ in range(2000)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def _spec(src: str, dst: str, **kw) -> ArchiveSpec:
    return ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD", processes=1,
                       memory_budget=64 << 20, **kw)


def _slow_compression(src: str, dst: str) -> ArchiveSpec:
    """`--codec zstd --level 19 --threads 1` (on 256 KiB blocks, to keep the test short): the
    tar writer waits for the compressor nearly all the time, which is where a failure
    reported by a fetch used to be taken for a stop."""
    return _spec(src, dst, codec="zstd", level=19, compress_threads=1, block_size=256 << 10)


def _assert_nothing_left(s3, dst: str) -> None:
    assert open_uploads(s3, dst) == []
    assert [k for k in keys_in(s3, dst) if not k.endswith(".lease.json")] == []


@pytest.mark.slow  # zstd -19 as the bottleneck, five runs per cause: minutes
@pytest.mark.parametrize("status, code, error, exit_code, says", [
    (404, "NoSuchKey", SourceChanged, 3, "vanished after it was listed"),
    (403, "AccessDenied", AccessDenied, 2, "access denied"),
])
def test_one_failed_get_while_compression_is_the_bottleneck_is_reported_as_itself_every_time(
        s3, buckets, minio, proxy, status, code, error, exit_code, says, reliability):
    """A user archives a day; one object's GET answers 404 (deleted after the listing) or 403
    (no permission on that key) while zstd -19 on one thread is the bottleneck. Every run
    must say so, naming the key: not 'was stopped', and never as a permanent error when it
    is worth another try (or the other way round)."""
    src, dst = buckets
    rng = random.Random(5)
    # 8.4 MiB in 96 KiB objects: more than the fetch budget (6 MiB), so the GET of day/078.log
    # goes out about when the tar writer has handed the compressor 4 blocks and waits for it.
    seed(s3, src, {f"day/{i:03d}.log": _words(rng, 96 << 10) for i in range(90)})
    failing = "day/078.log"
    clients = engine_clients(minio, proxy.endpoint_url)
    spec = _slow_compression(src, dst)
    outcomes = []
    started = time.monotonic()
    for run in range(20):
        proxy.clear()
        fault = proxy.add(Fault("status", status=status, code=code, count=1,
                                match=lambda r: is_object_get(r) and r.key == f"{src}/{failing}"))
        with pytest.raises(ArchiverError) as caught:
            archive_prefix(spec, clients)
        assert fault.injected == 1
        message = str(caught.value)
        outcomes.append((type(caught.value).__name__, caught.value.exit_code, message[:100]))
        assert isinstance(caught.value, error), f"run {run + 1}: {outcomes[-1]}"
        assert caught.value.exit_code == exit_code and says in message and failing in message, outcomes[-1]
    took = time.monotonic() - started
    proxy.clear()
    _assert_nothing_left(s3, dst)
    reliability.record(f"one source GET answered {status} {code} while zstd -19 on one thread is the bottleneck",
                       "20 runs", f"every run exit {exit_code}, '{says}' and the key ({took / 20:.1f} s a run)")


def _tagged_day(s3, src: str, count: int = 40) -> dict[str, bytes]:
    objects = {f"day/{i:03d}.log": b"line %d\n" % i * (i + 1) for i in range(count)}
    for key, body in objects.items():
        s3.put_object(Bucket=src, Key=key, Body=body, Tagging=f"team=logs&n={key[4:7]}")
    return objects


def _archived_tags(clients, src: str, dst: str) -> dict[str, dict]:
    layout = layout_for(S3Url(src, "day/"), S3Url(dst, "a/"))
    return {r["key"]: r.get("tags") for r in iter_manifest(clients.store, layout) if r.get("type") == "object"}


def test_stalled_tag_reads_are_cancelled_and_retried_and_the_prefix_archives(s3, buckets, minio, proxy, reliability):
    """2 of 40 GetObjectTagging requests never answer: the watchdog that cancels stalled GETs
    cancels them too, they are sent again, and the day archives with every tag."""
    src, dst = buckets
    objects = _tagged_day(s3, src)
    fault = proxy.add(Fault("stall", seconds=90, count=2, match=is_tagging))
    clients = engine_clients(minio, proxy.endpoint_url)
    started = time.monotonic()
    result = archive_prefix(_spec(src, dst, stall_timeout=2.0), clients)
    took = time.monotonic() - started
    assert fault.injected == 2 and took < 30, took
    assert result.objects == len(objects)
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    tags = _archived_tags(engine_clients(minio), src, dst)
    assert tags == {k: {"team": "logs", "n": k[4:7]} for k in objects}
    reliability.record("2 of 40 GetObjectTagging requests stall (never answer)", "stall timeout 2 s",
                       f"cancelled and retried; archived with every tag in {took:.0f} s")


@pytest.mark.slow  # waits out the server's keep-alive: 38 s
def test_stalls_longer_than_the_servers_keep_alive_leave_no_dead_connection_to_fail_on(
        s3, buckets, minio, proxy, reliability):
    """2 of 400 GetObjectTagging requests stall past MinIO's 30 s keep-alive: meanwhile every
    pooled connection idles, and the server closes its side (the proxy, as a load balancer
    would, answers the next request on one with a reset: ``reconnect_stale`` off). The
    cancelled tag reads are sent again on connections that work, and the day archives."""
    assert not proxy.reconnect_stale
    src, dst = buckets
    objects = _tagged_day(s3, src, 400)
    fault = proxy.add(Fault("stall", seconds=90, count=2, after=200, match=is_tagging))
    started = time.monotonic()
    result = archive_prefix(_spec(src, dst, stall_timeout=34.0), engine_clients(minio, proxy.endpoint_url))
    took = time.monotonic() - started
    assert fault.injected == 2 and result.objects == len(objects)
    assert _archived_tags(engine_clients(minio), src, dst) == {k: {"team": "logs", "n": k[4:7]} for k in objects}
    reliability.record("2 of 400 GetObjectTagging requests stall past the server's 30 s keep-alive",
                       "stall timeout 34 s, stale connections reset by the proxy",
                       f"resent on live connections; archived with every tag in {took:.0f} s")


def test_a_tag_read_reset_8_times_in_a_row_is_sent_again_and_the_day_archives(s3, buckets, minio, proxy,
                                                                             reliability):
    """One object's GetObjectTagging is reset mid-body 8 times in a row: its connection (tag
    reads go over the plain awscrt.http connections) sends it again, as a GET, with
    backoff.CONNECTION's 9 tries, and the day archives with every tag (it used to fail the
    prefix: tag reads were not retried)."""
    src, dst = buckets
    objects = _tagged_day(s3, src)
    fault = proxy.add(Fault("reset", count=8, match=lambda r: is_tagging(r) and r.key == f"{src}/day/004.log"))
    clients = engine_clients(minio, proxy.endpoint_url)
    started = time.monotonic()
    result = archive_prefix(_spec(src, dst), clients)
    took = time.monotonic() - started
    assert fault.injected == 8 and result.objects == len(objects)
    assert _archived_tags(engine_clients(minio), src, dst) == {k: {"team": "logs", "n": k[4:7]} for k in objects}
    reliability.record("one GetObjectTagging reset mid-body 8 times in a row (its connection tries 9)",
                       f"{fault.injected} resets", f"sent again with the GETs' backoff; archived with every tag "
                                                   f"in {took:.0f} s")


def test_a_tagging_body_that_does_not_parse_fails_the_run_instead_of_hanging_it(s3, buckets, clients, monkeypatch):
    """The tag set is parsed on CRT's thread, which swallows what a callback raises: the
    piece never settled and the run waited forever. Now the run fails with the parse error
    (ours to look at: exit 1), and leaves nothing behind."""
    src, dst = buckets
    _tagged_day(s3, src, count=10)
    real = s3arch.io.attributes.parse_tagging
    calls = []

    def cut_short(body: bytes) -> dict:
        calls.append(threading.current_thread().name)
        return real(body[: len(body) // 2] if len(calls) == 4 else body)

    monkeypatch.setattr(s3arch.io.attributes, "parse_tagging", cut_short)
    outcome: list[BaseException | None] = []

    def run():
        try:
            archive_prefix(_spec(src, dst), clients)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the run hung on a parse error raised on CRT's thread"
    assert isinstance(outcome[0], ElementTree.ParseError), outcome
    _assert_nothing_left(s3, dst)


# -- the checksum follow-up: an object fetched in ranges gets its checksum from a HEAD ----------

RANGED = 256 << 10  # the ranged-GET threshold these tests set (large_object_chunk): above it, ranged GETs


def is_checksum_head(r) -> bool:
    """The fetcher's HeadObject for the checksum a ranged GET lacks (it asks for the checksum)."""
    return r.method == "HEAD" and "x-amz-checksum-mode" in r.headers


def _checksum_heads(src: str, key: str = "day/"):
    return lambda r: is_checksum_head(r) and r.key.startswith(f"{src}/{key}")


def _ranged_day(s3, src: str, count: int = 6) -> dict[str, bytes]:
    """``count`` objects just above the ranged threshold (two ranged GETs each), each with
    its own SHA256 checksum, which S3 returns on a HEAD but not on a ranged GET."""
    rng = random.Random(30)
    objects = {f"day/{i:03d}.bin": rng.randbytes(RANGED + 4096 + i) for i in range(count)}
    for key, body in objects.items():
        s3.put_object(Bucket=src, Key=key, Body=body, ChecksumAlgorithm="SHA256")
    return objects


def _ranged(src: str, dst: str, **kw) -> ArchiveSpec:
    return _spec(src, dst, large_object_chunk=RANGED, **kw)


def _archived_checksums(clients, src: str, dst: str) -> dict[str, dict | None]:
    layout = layout_for(S3Url(src, "day/"), S3Url(dst, "a/"))
    return {r["key"]: r.get("checksum") for r in iter_manifest(clients.store, layout) if r.get("type") == "object"}


def _source_checksums(s3, src: str, keys) -> dict[str, dict]:
    """Each object's checksum as the source reports it (HeadObject with ChecksumMode=ENABLED)."""
    out = {}
    for key in keys:
        head = s3.head_object(Bucket=src, Key=key, ChecksumMode="ENABLED")
        out[key] = {"algorithm": "SHA256", "value": head["ChecksumSHA256"],
                    **({"type": head["ChecksumType"]} if "ChecksumType" in head else {})}
    return out


def _assert_archived_with_checksums(s3, minio, src: str, dst: str, result, objects: dict[str, bytes]) -> None:
    assert result.status == "archived" and result.objects == len(objects)
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    assert _archived_checksums(engine_clients(minio), src, dst) == _source_checksums(s3, src, objects)


def test_stalled_checksum_reads_are_cancelled_and_retried_and_the_prefix_archives(s3, buckets, minio, proxy,
                                                                                   reliability):
    """6 objects just above the ranged threshold: their ranged GETs carry no checksum, so each
    is followed by a HeadObject for it. 2 of those 6 HEADs never answer: the watchdog that
    cancels stalled GETs cancels them too, they are sent again, and the day archives with
    every object's checksum, as the source reports it."""
    src, dst = buckets
    objects = _ranged_day(s3, src)
    fault = proxy.add(Fault("stall", seconds=90, count=2, match=_checksum_heads(src)))
    clients = engine_clients(minio, proxy.endpoint_url)
    started = time.monotonic()
    result = archive_prefix(_ranged(src, dst, stall_timeout=2.0), clients)
    took = time.monotonic() - started
    assert fault.injected == 2 and took < 15, took
    assert fault.seen == len(objects) + 2  # one HEAD per object, and the two stalled ones again
    _assert_archived_with_checksums(s3, minio, src, dst, result, objects)
    reliability.record("2 of 6 checksum HEADs (objects fetched in ranges) stall (never answer)", "stall timeout 2 s",
                       f"cancelled and retried; archived with every checksum in {took:.0f} s")


@pytest.mark.parametrize("kind, status, count, says", [
    # As many as the data plane's 8 resends of one request: the last one passes.
    ("status", 500, 8, "answered 500 InternalError 8 times in a row"),
    # A HEAD's answer has no body, so no error code: a bare 503 is throttling, waited out.
    ("status", 503, 3, "answered 503 (SlowDown) 3 times in a row"),
    ("drop", None, 8, "reset before any answer 8 times in a row"),
], ids=["500", "503", "reset"])
def test_a_checksum_read_that_fails_a_few_times_is_sent_again_and_the_prefix_archives(
        s3, buckets, minio, proxy, reliability, kind, status, count, says):
    """One object's checksum HEAD fails ``count`` times in a row: the data plane sends it again
    with the GETs' backoff (throttling is waited out), and the day archives with every
    checksum."""
    src, dst = buckets
    objects = _ranged_day(s3, src)
    fault = proxy.add(Fault(kind, status=status or 503, count=count, match=_checksum_heads(src, "day/002.bin")))
    clients = engine_clients(minio, proxy.endpoint_url)
    started = time.monotonic()
    result = archive_prefix(_ranged(src, dst), clients)
    took = time.monotonic() - started
    assert fault.injected == count and took < 30, took
    _assert_archived_with_checksums(s3, minio, src, dst, result, objects)
    reliability.record(f"one object's checksum HEAD {says}", f"{fault.injected} failures",
                       f"sent again with the GETs' backoff; archived with every checksum in {took:.0f} s")


def test_a_checksum_read_failing_past_the_retries_fails_the_run_as_retryable_naming_the_key(
        s3, buckets, minio, proxy, reliability):
    """One object's checksum HEAD answers 500 every time: after the data plane's resends (and
    no second round of them by the fetcher: one layer resends a fault) the run ends with the
    retryable error (exit 3, try again) naming the HEAD and the key, commits nothing and leaves
    no upload open."""
    src, dst = buckets
    _ranged_day(s3, src)
    failing = "day/003.bin"
    fault = proxy.add(Fault("status", status=500, match=_checksum_heads(src, failing)))
    clients = engine_clients(minio, proxy.endpoint_url)
    started = time.monotonic()
    with pytest.raises(ArchiverError) as caught:
        archive_prefix(_ranged(src, dst), clients)
    took = time.monotonic() - started
    error, message = caught.value, str(caught.value)
    assert type(error) is TransientError and error.exit_code == 3, (type(error).__name__, message)
    assert f"HeadObject s3://{src}/{failing}" in message and "500" in message, message
    assert fault.injected == backoff.CONNECTION.tries, fault.injected
    _assert_nothing_left(s3, dst)
    reliability.record("one object's checksum HEAD answers 500 every time", f"{fault.injected} answers",
                       f"exit 3 naming the HEAD and the key after {took:.0f} s; nothing committed, no upload open")
