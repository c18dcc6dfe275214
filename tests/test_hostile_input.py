"""Hostile and odd input: keys that are unsafe as paths, control characters, 1,024-byte keys,
a million-entry prefix, and every access problem a user can configure wrongly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from helpers import (ROOT, engine_clients, keys_in, minio_user, open_uploads, put_exact_key, read_archive, run_json,
                     seed)
from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.format.manifest import layout_for
from s3arch.stored.manifests import iter_manifest


pytestmark = pytest.mark.slow  # a million-entry listing and hostile keys through GNU tar


LONG_KEY = "p/" + "/".join(["seg-" + "é" * 60] * 8)  # non-ASCII, segments under NAME_MAX
LONG_KEY = LONG_KEY + "x" * (1024 - len(LONG_KEY.encode()))


def archive_and_extract(server, objects, tmp_path):
    """Archive p/ into a fresh destination; return (archive members, manifest records,
    files GNU tar extracted into tmp_path/x)."""
    s3 = server.client()
    src, dst = f"hostile-{uuid.uuid4().hex[:8]}", f"hostile-out-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst)
    for key, body in objects.items():
        put_exact_key(server, src, key, body)
    assert sorted(keys_in(s3, src)) == sorted(objects)
    spec = ArchiveSpec(S3Url(src, "p/"), S3Url(dst, ""), storage_class="STANDARD", memory_budget=64 << 20)
    clients = engine_clients(server)
    archive_prefix(spec, clients)
    records = {r["key"]: r for r in iter_manifest(clients.store, layout_for(spec.source, spec.destination))
               if r["type"] == "object"}
    body = s3.get_object(Bucket=dst, Key=f"{src}/p.tar.gz")["Body"].read()
    target = tmp_path / "x"
    target.mkdir()
    tar = subprocess.run(["tar", "-xzf", "-", "-C", str(target)], input=body, capture_output=True)
    # The only failure allowed is the file system's own limit on one name (NAME_MAX, 255 bytes).
    too_long = sum(1 for k in objects if max(len(seg.encode()) for seg in k.split("/")) > 255)
    errors = [line for line in tar.stderr.decode(errors="replace").splitlines()
              if "Exiting with failure status" not in line]
    assert len(errors) == too_long and all("File name too long" in e for e in errors), errors
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x"]  # nothing escaped
    extracted = {}
    for path in target.rglob("*"):
        assert path.resolve().is_relative_to(target.resolve())
        if path.is_file():
            extracted[str(path.relative_to(target))] = path.read_bytes()
    return read_archive(s3, dst, f"{src}/p.tar.gz"), records, extracted, (clients, dst, src)


def test_unsafe_path_keys_round_trip_and_cannot_escape_gnu_tar(moto_server, tmp_path, reliability):
    # MinIO refuses dot segments and 1,024-byte single names; moto stores any key, as S3 does.
    objects = {f"p/{k}": f"content of {k!r}".encode() for k in
               ["../escape.txt", "a/../../../b.txt", "./dot.txt", "x/./y.txt", "/leading.txt",
                "//double.txt", "ctl\x01\x1f.txt", "k" * 1022]}  # newline keys: MinIO test below
    members, records, extracted, (clients, dst, src) = archive_and_extract(moto_server, objects, tmp_path)
    assert set(records) == set(objects)
    for key, data in objects.items():
        assert members[records[key].get("name", key)] == data
    assert sorted(extracted.values()) == sorted(v for k, v in objects.items() if len(k) < 200)
    for key, data in objects.items():  # cat by key, one ranged GET each
        out = subprocess.run([sys.executable, "-m", "s3arch", "--endpoint-url", moto_server.endpoint_url, "cat",
                              f"s3://{dst}/{src}/p.tar.gz", key], env={**os.environ, **moto_server.env()},
                             cwd=ROOT, capture_output=True)
        assert out.returncode == 0 and out.stdout == data, (key, out.stderr[-500:])
    reliability.record("keys ../, a/../../../, ./, /./, leading /, //, control characters, 1,024-byte name",
                       f"{len(objects)} keys (moto)", "stored under escaped names; GNU tar extracts inside "
                       "the target only; manifest and cat return every key exactly")


def test_control_characters_and_1024_byte_keys_round_trip_through_minio(minio, tmp_path, reliability):
    objects = {"p/ctl\x01\x1f.txt": b"one", "p/nl\nkey.txt": b"two", "p/tab\t.txt": b"three",
               LONG_KEY: b"four" * 1000, "p/sp ace+plus%25?#.txt": b"five"}
    assert len(LONG_KEY.encode()) == 1024
    members, records, extracted, _ = archive_and_extract(minio, objects, tmp_path)
    assert {k: members[records[k].get("name", k)] for k in objects} == objects
    assert sorted(extracted.values()) == sorted(objects.values())
    reliability.record("control characters, %, ?, #, space, a 1,024-byte non-ASCII key", f"{len(objects)} keys "
                       "(MinIO)", "round trip byte for byte; GNU tar extracts all of them")


def test_million_entry_listing_keeps_memory_flat(minio, reliability, proxy):
    """The listing stage over 100,000 and 1,000,000 entries (answered by the test proxy, since
    seeding a million objects into MinIO takes longer than the suite may): the peak RSS of
    the process must not grow with the count."""
    peaks = {n: _listing_peak_rss(proxy, minio, n) for n in (100_000, 1_000_000)}
    growth = peaks[1_000_000][0] - peaks[100_000][0]
    assert peaks[1_000_000][1] == 1_000_000
    assert growth < 16 << 20, f"peak RSS grew {growth >> 20} MiB from 100k to 1M entries"
    reliability.record("a prefix of 1,000,000 entries, listed", "1M keys in 1,000 pages",
                       f"peak RSS {peaks[100_000][0] >> 20} MiB at 100k, {peaks[1_000_000][0] >> 20} MiB at 1M; "
                       f"{peaks[1_000_000][2]:.0f} s")


def _listing_peak_rss(proxy, minio, count) -> tuple[int, int, float]:
    bucket = f"synthetic-{count}"
    proxy.synthesize_listing(bucket, "big/", count)
    script = textwrap.dedent(f"""
        import json, time, boto3
        from s3arch.io.listing import ListingFeed
        from s3arch.format.tally import ListingTally
        from s3arch.io.s3 import S3Clients
        session = boto3.Session(aws_access_key_id={minio.access_key!r}, aws_secret_access_key={minio.secret_key!r},
                                region_name="us-east-1")
        clients = S3Clients.from_session(session, {proxy.endpoint_url!r})
        started = time.monotonic()
        feed = ListingFeed(clients.store, {bucket!r}, "big/", tally=ListingTally())
        n = sum(1 for _ in feed)
        hwm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmHWM"))
        print(json.dumps([hwm, n, time.monotonic() - started]))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    return tuple(json.loads(out.stdout))


def _archive_cli(env, src, dst, *extra):
    started = time.monotonic()
    result = run_json(env, "archive", f"s3://{src}/p/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                      *extra, check=False)
    return result, time.monotonic() - started


@pytest.fixture
def seeded(s3, buckets):
    seed(s3, buckets[0], {f"p/{i}.txt": b"x" * i for i in range(50)})
    return buckets


def test_missing_buckets_fail_fast_naming_the_bucket(seeded, cli_env, reliability):
    src, dst = seeded
    for missing, args in (("source", ("nope-" + src, dst)), ("destination", (src, "nope-" + dst))):
        result, took = _archive_cli(cli_env, *args)
        assert result["status"] == "failed" and result["retryable"] is False
        assert f"{missing} bucket s3://nope-" in result["message"] and "does not exist" in result["message"]
        assert took < 15
        reliability.record(f"{missing} bucket missing", "-", f"exit 2 in {took:.1f} s: {result['message'][:90]}")


def test_read_only_user_fails_fast_on_the_destination_and_writes_nothing(minio, s3, seeded, cli_env, reliability):
    src, dst = seeded
    user, secret = minio_user(minio, [{
        "Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket", "s3:GetBucketLocation",
                                      "s3:ListBucketMultipartUploads"], "Resource": ["arn:aws:s3:::*"]}])
    env = {**cli_env, "AWS_ACCESS_KEY_ID": user, "AWS_SECRET_ACCESS_KEY": secret}
    result, took = _archive_cli(env, src, dst)
    assert result["status"] == "failed" and result["retryable"] is False
    assert "access denied" in result["message"] and f"s3://{dst}/" in result["message"]
    assert "grant" in result["message"] and took < 15
    assert keys_in(s3, dst) == [] and open_uploads(s3, dst) == []
    reliability.record("MinIO user with a read-only policy", "-", f"exit 2 in {took:.1f} s: {result['message'][:90]}")


def test_wrong_credentials_fail_fast_and_say_so(seeded, cli_env, reliability):
    src, dst = seeded
    result, took = _archive_cli({**cli_env, "AWS_SECRET_ACCESS_KEY": "wrong-secret"}, src, dst)
    assert result["status"] == "failed" and result["retryable"] is False
    assert "credentials rejected" in result["message"] and took < 15
    reliability.record("wrong secret key", "-", f"exit 2 in {took:.1f} s: {result['message'][:90]}")
