"""The real engine through a fault-injecting proxy in front of MinIO: transient faults are
absorbed, short bodies are never archived, persistent faults fail the prefix cleanly."""

from __future__ import annotations

import os
import random
import time

import pytest

from faultproxy import Fault, FaultProxy, is_complete_upload, is_get, is_upload_part
from helpers import engine_clients, keys_in, open_uploads, read_archive, run_cli, seed
from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import TransientError
from s3arch.io.s3 import S3Clients


@pytest.fixture
def proxy(minio):
    p = FaultProxy(minio.endpoint_url, seed=7)
    yield p
    p.stop()


def clients_via(proxy, minio, **config) -> S3Clients:
    return engine_clients(minio, proxy.endpoint_url, **config)


@pytest.fixture
def source(s3, buckets):
    """400 objects: most small, a few large enough to be fetched as ranged pieces."""
    src, _ = buckets
    rng = random.Random(3)
    objects = {f"day/{i // 100:02d}/obj-{i:04d}.log": (b"line %d " % i) * rng.randrange(10, 2000)
               for i in range(400)}
    objects.update({f"day/big-{i}.bin": os.urandom(3 << 20) for i in range(3)})
    seed(s3, src, objects)
    return objects


def archive(clients, buckets, **spec):
    src, dst = buckets
    return archive_prefix(ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD",
                                      memory_budget=64 << 20, large_object_chunk=1 << 20, **spec), clients)


def assert_complete(s3, buckets, objects):
    src, dst = buckets
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    assert f"a/{src}/day.manifest.jsonl.gz" in keys_in(s3, dst)
    assert open_uploads(s3, dst) == []


def assert_nothing_committed(s3, buckets):
    src, dst = buckets
    assert keys_in(s3, dst) == []
    assert open_uploads(s3, dst) == []


def test_transient_5xx_and_resets_on_8_percent_of_requests_are_absorbed(s3, buckets, source, proxy, minio,
                                                                      reliability):
    faults = [proxy.add(Fault("status", status=503, rate=0.04)),
              proxy.add(Fault("status", status=500, rate=0.02)),
              proxy.add(Fault("reset", rate=0.02, match=is_get))]
    result = archive(clients_via(proxy, minio), buckets)
    assert_complete(s3, buckets, source)
    assert all(f.injected > 0 for f in faults), [(f.kind, f.injected) for f in faults]
    injected = sum(f.injected for f in faults)
    reliability.record("503 SlowDown 4% + 500 2% of all requests, resets mid-body on 2% of GETs",
                       f"{injected} faults in {proxy.requests} requests",
                       f"archived, {result.objects} objects byte for byte, no upload left")


def test_truncated_bodies_are_refetched_and_never_archived_short(s3, buckets, source, proxy, minio, reliability):
    fault = proxy.add(Fault("truncate", count=12, match=is_get))
    archive(clients_via(proxy, minio), buckets)
    assert fault.injected == 12
    assert_complete(s3, buckets, source)
    reliability.record("GET body cut short (half sent, connection closed)", f"{fault.injected} bodies",
                       "detected by length, re-fetched; archive byte for byte")


def test_stalled_get_is_cancelled_and_retried(s3, buckets, source, proxy, minio, reliability):
    fault = proxy.add(Fault("stall", seconds=60, count=2, match=is_get))
    started = time.monotonic()
    archive(clients_via(proxy, minio), buckets, stall_timeout=2.0)
    took = time.monotonic() - started
    assert fault.injected == 2 and took < 30
    assert_complete(s3, buckets, source)
    reliability.record("GET response stalled for 60 s", f"{fault.injected} GETs, stall timeout 2 s",
                       f"cancelled and retried; archived in {took:.0f} s")


@pytest.mark.parametrize("call, match", [("UploadPart", is_upload_part),
                                          ("CompleteMultipartUpload", is_complete_upload)])
def test_persistent_multipart_failure_fails_prefix_aborts_upload_and_writes_no_manifest(
        s3, buckets, source, proxy, minio, call, match, reliability):
    fault = proxy.add(Fault("status", status=500, match=match))
    with pytest.raises(TransientError) as caught:
        archive(clients_via(proxy, minio, max_attempts=3), buckets)
    assert fault.injected >= 3
    message = str(caught.value)
    assert "InternalError" in message and "try again later" in message
    proxy.clear()
    assert_nothing_committed(s3, buckets)
    reliability.record(f"every {call} answered 500", f"{fault.injected} requests",
                       f"prefix failed (retryable): {message[:80]}...; upload aborted, no manifest")


def test_a_completion_whose_answer_was_lost_is_recognised_as_this_runs_own_and_committed(
        s3, buckets, source, proxy, cli_env, reliability):
    """The store completed the upload but its answer never arrived: botocore sends the
    completion again, and the store answers as for another writer (412, or NoSuchUpload).
    The object there has this upload's size and checksum, so the run commits it."""
    src, dst = buckets
    parts = proxy.add(Fault("status", status=500, count=2, match=is_upload_part))
    lost = proxy.add(Fault("reset", at=0, count=1, match=is_complete_upload))
    done = run_cli(cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                   "--endpoint-url", proxy.endpoint_url, check=False)
    assert (parts.injected, lost.injected) == (2, 1)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert_complete(s3, buckets, source)
    assert run_cli(cli_env, "verify", f"s3://{dst}/a/{src}/day.tar.gz").returncode == 0
    reliability.record("500 on 2 UploadParts, then the CompleteMultipartUpload's answer lost after the store did it",
                       "2 + 1 requests", "its own object recognised by size and CRC32C, committed: exit 0, "
                                         "verify passes")
