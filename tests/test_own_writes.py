"""A conditional write that S3 applied but whose answer was lost: botocore sends it again,
S3 refuses the resend (412, or 404) as it would refuse another writer, and the run must
recognise the object as its own instead of reporting "another run" (tests/faultproxy.py's
"lost" fault forwards the request, lets the server apply it, then resets the connection)."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import pytest

from faultproxy import Fault, Request, is_complete_upload, is_lease_put, makes_visible
from helpers import engine_clients, keys_in, open_uploads, read_archive, run_cli, seed
from s3arch.protocol.lease import Holder, PrefixLease


def _small_day(s3, src: str) -> dict[str, bytes]:
    """A day whose archive and manifest are each one PutObject (smaller than a part)."""
    objects = {f"day/{i:03d}.log": b"GET /index.html 200 %d\n" % i * 20 for i in range(300)}
    seed(s3, src, objects)
    return objects


def _lease_create(r: Request) -> bool:
    return is_lease_put(r) and r.headers.get("if-none-match") == "*"


def _lease_delete(r: Request) -> bool:
    return r.method == "DELETE" and r.key.endswith(".lease.json")


LOST_ANSWERS = {
    "lease create (PutObject If-None-Match)": _lease_create,
    "archive single PutObject If-None-Match": lambda r: makes_visible(r, "day.tar.gz"),
    "manifest single PutObject If-None-Match": lambda r: makes_visible(r, "day.manifest.jsonl.gz"),
    "lease release (DeleteObject If-Match)": _lease_delete,
}


@pytest.mark.parametrize("request_kind", LOST_ANSWERS)
def test_a_write_whose_answer_was_lost_is_this_runs_own_and_the_day_commits(
        s3, buckets, proxy, cli_env, request_kind, reliability):
    src, dst = buckets
    objects = _small_day(s3, src)
    lost = proxy.add(Fault("lost", count=1, match=LOST_ANSWERS[request_kind]))
    done = run_cli(cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                   "--endpoint-url", proxy.endpoint_url, check=False)
    assert lost.injected == 1
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    # Committed as a winner commits: the manifest index written, no lease or upload left behind.
    assert sorted(keys_in(s3, dst)) == [f"a/{src}/day.manifest-index.json.gz", f"a/{src}/day.manifest.jsonl.gz",
                                        f"a/{src}/day.tar.gz"]
    assert open_uploads(s3, dst) == []
    assert run_cli(cli_env, "verify", f"s3://{dst}/a/{src}/day.tar.gz").returncode == 0
    reliability.record(f"the answer to the {request_kind} lost after the store applied it", "1 request",
                       "the resend's refusal checked against the object there: this run's own; "
                       "committed, exit 0, no lease left")


def test_a_multipart_completion_whose_answer_was_lost_commits(s3, buckets, proxy, cli_env):
    """The same mechanism for CompleteMultipartUpload: an archive of several parts."""
    src, dst = buckets
    objects = {f"day/big-{i}.bin": os.urandom(3 << 20) for i in range(4)}
    seed(s3, src, objects)
    lost = proxy.add(Fault("lost", count=1, match=is_complete_upload))
    done = run_cli(cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                   "--endpoint-url", proxy.endpoint_url, check=False)
    assert lost.injected == 1
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    assert open_uploads(s3, dst) == []


def _lease(minio, proxy, bucket: str, ttl: float = 60.0) -> PrefixLease:
    store = engine_clients(minio, proxy.endpoint_url).store
    return PrefixLease(store, bucket, "a/day.lease.json", purpose="a test's archive", ttl=ttl)


def test_a_lease_renewal_whose_answer_was_lost_keeps_the_lease(s3, buckets, proxy, minio, reliability):
    _, dst = buckets
    lease = _lease(minio, proxy, dst)
    lease.acquire()
    lost = proxy.add(Fault("lost", count=1, match=lambda r: is_lease_put(r) and "if-match" in r.headers))
    lease.renew()  # not "taken over by another run"
    assert lost.injected == 1
    holder = json.loads(s3.get_object(Bucket=dst, Key="a/day.lease.json")["Body"].read())
    assert holder["owner"] == lease.me.owner
    lease.renew()  # the ETag the lost answer carried was adopted: the next renewal's If-Match holds
    lease.release()
    assert keys_in(s3, dst) == []  # released: the next run need not wait out the TTL
    reliability.record("the answer to a lease renewal (PutObject If-Match) lost after the store applied it",
                       "1 request", "the lease read back: this run's owner token and write; renewed, "
                                    "then released")


def test_a_lease_take_over_whose_answer_was_lost_takes_the_lease(s3, buckets, proxy, minio):
    """A lease left by a process of this machine that no longer exists is taken over with
    If-Match on its ETag; that write's lost answer must not read as a live holder."""
    _, dst = buckets
    dead = {**replace(Holder.me("a killed archive"), pid=2 ** 22 + 7, pid_start="1").__dict__,
            "renewed": "2026-11-29T00:00:00+00:00", "ttl_seconds": 60.0}
    s3.put_object(Bucket=dst, Key="a/day.lease.json", Body=json.dumps(dead).encode())
    lease = _lease(minio, proxy, dst)
    lost = proxy.add(Fault("lost", count=1, match=lambda r: is_lease_put(r) and "if-match" in r.headers))
    lease.acquire()
    assert lost.injected == 1
    holder = json.loads(s3.get_object(Bucket=dst, Key="a/day.lease.json")["Body"].read())
    assert holder["owner"] == lease.me.owner
    lease.release()
    assert keys_in(s3, dst) == []


def test_another_runs_lease_is_still_another_run(s3, buckets, proxy, minio):
    """The recognition proves ownership; it does not weaken the lock: a live holder's lease
    refuses this run's create and renewal alike."""
    from s3arch.core.errors import ConcurrentRun

    _, dst = buckets
    holder = _lease(minio, proxy, dst)
    holder.acquire()
    other = _lease(minio, proxy, dst)
    with pytest.raises(ConcurrentRun, match="another run holds this prefix"):
        other.acquire()
    s3.put_object(Bucket=dst, Key="a/day.lease.json", Body=b"{}")  # a third writer replaced it
    with pytest.raises(ConcurrentRun, match="taken over by another run"):
        holder.renew()
