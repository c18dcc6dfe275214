"""The synthetic S3 endpoint (bench/synthetic_s3, started by bench/synthetic_source.py) answers
as S3 does, to boto3 and to the engine: pagination, StartAfter, delimiters, HEAD and GET with
ranges and conditions, ETags that are the MD5 of the bytes, tagging, errors; and with
--upstream, as one endpoint that reads the virtual bucket and writes to MinIO through it.

One server of 2,500 objects (1,000 per host folder) for the module, built once."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.exceptions import ClientError

from bench.synthetic_source import SyntheticSource

OBJECTS = 2500
PER_HOST = 1000
SIZE_MIN, SIZE_MAX = 2000, 12000
BUCKET, PREFIX = "synthetic", "day/"
LOG_LINE = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (INFO|WARN|ERROR) ")


@pytest.fixture(scope="module")
def source():
    with SyntheticSource(objects=OBJECTS, bucket=BUCKET, prefix=PREFIX, size_min=SIZE_MIN, size_max=SIZE_MAX,
                         seed=7, per_host=PER_HOST) as started:
        yield started
        # net/http answers a request whose handler panicked by closing the connection, which a
        # client may retry into a pass: the log says whether any did.
        assert "panic" not in started.server.log_path.read_text(errors="replace"), started.server.log_tail(40)


@pytest.fixture(scope="module")
def s3(source):
    return source.client(max_pool_connections=16)


@pytest.fixture(scope="module")
def listed(s3) -> list[dict]:
    """Every entry of the bucket, by boto3's paginator."""
    return [o for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX)
            for o in page.get("Contents", [])]


def expected_keys() -> list[str]:
    return [f"{PREFIX}host-{i // PER_HOST:04d}/app-{i:09d}.log" for i in range(OBJECTS)]


def test_key_names_the_listed_keys(source):
    assert [source.key(i) for i in range(OBJECTS)] == expected_keys()


def test_pages_of_1000_return_every_key_once_in_order(s3):
    pages, token = [], None
    while True:
        args = {"ContinuationToken": token} if token else {}
        page = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, MaxKeys=1000, **args)
        pages.append(page)
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert [len(p["Contents"]) for p in pages] == [1000, 1000, 500]
    assert [p["KeyCount"] for p in pages] == [1000, 1000, 500]
    assert [p["IsTruncated"] for p in pages] == [True, True, False]
    assert "NextContinuationToken" not in pages[-1]
    assert pages[1]["ContinuationToken"] == pages[0]["NextContinuationToken"]
    keys = [o["Key"] for p in pages for o in p["Contents"]]
    assert keys == expected_keys()  # each once, in S3's order (sorted)
    assert keys == sorted(set(keys))
    for entry in (o for p in pages for o in p["Contents"]):
        assert entry["StorageClass"] == "STANDARD"
        assert SIZE_MIN <= entry["Size"] <= SIZE_MAX
        assert re.fullmatch(r'"[0-9a-f]{32}"', entry["ETag"])
        assert entry["LastModified"].isoformat() == "2026-11-02T00:00:00+00:00"
    sizes = [o["Size"] for p in pages for o in p["Contents"]]
    assert len(set(sizes)) > 1000  # spread over the range, not one size


def test_page_xml_is_s3s(source):
    """The page's bytes as S3 writes them: its namespace, ETags quoted with &quot;, and each
    entry in the order the engine's page parser reads without botocore (tasks/io/listed.py)."""
    from s3arch.io.listed import parse_listing_page

    connection = source.connection()
    connection.request("GET", f"/{BUCKET}?list-type=2&prefix={PREFIX}&max-keys=1000&encoding-type=url")
    body = connection.getresponse().read()
    connection.close()
    assert body.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n'
                           b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">')
    assert b"<ETag>&quot;" in body and b"<EncodingType>url</EncodingType>" in body
    parsed = parse_listing_page(body)
    assert parsed is not None, "the engine's parser left the page to botocore"
    assert [o.key for o in parsed[0]] == expected_keys()[:1000]


def test_start_after_in_the_middle(s3):
    keys = expected_keys()
    page = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, StartAfter=keys[1234])
    assert page["StartAfter"] == keys[1234]
    assert [o["Key"] for o in page["Contents"]] == keys[1235:2235]
    assert page["IsTruncated"]
    rest = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, ContinuationToken=page["NextContinuationToken"])
    assert [o["Key"] for o in rest["Contents"]] == keys[2235:]
    assert not rest["IsTruncated"]
    # A StartAfter that is no key starts at the next key; one past the last key lists nothing.
    between = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, StartAfter=keys[10] + "-", MaxKeys=2)
    assert [o["Key"] for o in between["Contents"]] == keys[11:13]
    after_all = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, StartAfter=PREFIX + "zzz")
    assert after_all["KeyCount"] == 0 and "Contents" not in after_all and not after_all["IsTruncated"]


def test_paginator_and_page_sizes(s3, listed):
    assert [o["Key"] for o in listed] == expected_keys()
    pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=PREFIX,
                                                                 PaginationConfig={"PageSize": 300}))
    assert [p["KeyCount"] for p in pages] == [300] * 8 + [100]
    assert [o for p in pages for o in p["Contents"]] == listed


def test_prefixes_and_delimiter(s3):
    keys = expected_keys()
    folders = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, Delimiter="/")
    assert [p["Prefix"] for p in folders["CommonPrefixes"]] == [f"{PREFIX}host-000{h}/" for h in range(3)]
    assert "Contents" not in folders and folders["KeyCount"] == 3
    two = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, Delimiter="/", MaxKeys=2)
    assert two["IsTruncated"] and len(two["CommonPrefixes"]) == 2
    last = s3.list_objects_v2(Bucket=BUCKET, Prefix=PREFIX, Delimiter="/",
                              ContinuationToken=two["NextContinuationToken"])
    assert [p["Prefix"] for p in last["CommonPrefixes"]] == [f"{PREFIX}host-0002/"]
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{PREFIX}host-0001/")
    one_host = [o["Key"] for page in pages for o in page["Contents"]]
    assert one_host == keys[1000:2000]
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="other/")["KeyCount"] == 0
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix=keys[7])["KeyCount"] == 1
    v1 = s3.list_objects(Bucket=BUCKET, Prefix=PREFIX, Marker=keys[99], MaxKeys=5)  # ListObjects (V1) too
    assert [o["Key"] for o in v1["Contents"]] == keys[100:105] and v1["IsTruncated"]


def test_every_etag_is_the_md5_of_the_bytes_served(source, s3, listed):
    """All 2,500 objects: the listing's size and ETag are those of the bytes a GET serves."""
    def check(entry):
        connection = source.connection()
        try:
            body = source.fetch(entry["Key"], connection)
        finally:
            connection.close()
        assert len(body) == entry["Size"], entry["Key"]
        assert f'"{hashlib.md5(body).hexdigest()}"' == entry["ETag"], entry["Key"]

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(check, listed))
    for entry in listed[::250]:  # HEAD and boto3's GET agree with the listing
        head = s3.head_object(Bucket=BUCKET, Key=entry["Key"])
        got = s3.get_object(Bucket=BUCKET, Key=entry["Key"])
        body = got["Body"].read()
        assert head["ContentLength"] == got["ContentLength"] == len(body) == entry["Size"]
        assert head["ETag"] == got["ETag"] == entry["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
        assert head["LastModified"] == got["LastModified"] == entry["LastModified"]
        assert head["AcceptRanges"] == "bytes"


def test_ranged_gets_are_slices_of_the_whole(s3, listed):
    entry = max(listed[:50], key=lambda o: o["Size"])
    key, size = entry["Key"], entry["Size"]
    whole = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    cases = {"bytes=0-99": (0, 99), "bytes=1000-2999": (1000, 2999), "bytes=-500": (size - 500, size - 1),
             f"bytes={size - 700}-": (size - 700, size - 1), f"bytes=10-{size + 5000}": (10, size - 1),
             f"bytes=-{size * 2}": (0, size - 1), f"bytes={size - 1}-{size - 1}": (size - 1, size - 1)}
    for header, (first, last) in cases.items():
        got = s3.get_object(Bucket=BUCKET, Key=key, Range=header)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 206, header
        assert got["ContentRange"] == f"bytes {first}-{last}/{size}", header
        assert got["ContentLength"] == last - first + 1, header
        assert got["Body"].read() == whole[first:last + 1], header
        assert got["ETag"] == entry["ETag"]
    head = s3.head_object(Bucket=BUCKET, Key=key, Range="bytes=5-14")
    assert head["ContentLength"] == 10 and head["ContentRange"] == f"bytes 5-14/{size}"
    for unsatisfiable in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0"):
        with pytest.raises(ClientError) as raised:
            s3.get_object(Bucket=BUCKET, Key=key, Range=unsatisfiable)
        assert raised.value.response["Error"]["Code"] == "InvalidRange"
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416
    # Not one range S3 reads (several, or malformed): the whole object, 200.
    for ignored in ("bytes=0-1,5-6", "bytes=9-3", "items=0-5"):
        got = s3.get_object(Bucket=BUCKET, Key=key, Range=ignored)
        assert got["ResponseMetadata"]["HTTPStatusCode"] == 200 and got["Body"].read() == whole
    part = s3.get_object(Bucket=BUCKET, Key=key, PartNumber=1)
    assert part["ContentRange"] == f"bytes 0-{size - 1}/{size}" and part["Body"].read() == whole


def test_conditions_on_the_etag(s3, listed):
    key, etag = listed[3]["Key"], listed[3]["ETag"]
    with pytest.raises(ClientError) as raised:
        s3.get_object(Bucket=BUCKET, Key=key, IfMatch='"0123456789abcdef0123456789abcdef"')
    assert raised.value.response["Error"]["Code"] == "PreconditionFailed"
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    with pytest.raises(ClientError) as raised:
        s3.head_object(Bucket=BUCKET, Key=key, IfMatch=listed[4]["ETag"])
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    assert s3.get_object(Bucket=BUCKET, Key=key, IfMatch=etag)["ETag"] == etag
    assert s3.get_object(Bucket=BUCKET, Key=key, IfMatch=etag.strip('"'), Range="bytes=0-9")["ContentLength"] == 10
    with pytest.raises(ClientError) as raised:
        s3.get_object(Bucket=BUCKET, Key=key, IfNoneMatch=etag)
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304


def test_missing_keys_and_buckets_are_404(s3):
    for key in (f"{PREFIX}host-0002/app-{OBJECTS:09d}.log", f"{PREFIX}host-0000/app-000001500.log",
                f"{PREFIX}host-0000/app-1.log", "elsewhere.log", PREFIX + "host-0000/"):
        with pytest.raises(ClientError) as raised:
            s3.get_object(Bucket=BUCKET, Key=key)
        assert raised.value.response["Error"]["Code"] == "NoSuchKey", key
        assert raised.value.response["Error"]["Key"] == key
        with pytest.raises(ClientError) as raised:
            s3.head_object(Bucket=BUCKET, Key=key)
        assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    for call in (lambda: s3.get_object(Bucket="no-such-bucket", Key=expected_keys()[0]),
                 lambda: s3.list_objects_v2(Bucket="no-such-bucket")):
        with pytest.raises(ClientError) as raised:
            call()
        assert raised.value.response["Error"]["Code"] == "NoSuchBucket"
    with pytest.raises(ClientError) as raised:
        s3.head_bucket(Bucket="no-such-bucket")
    assert raised.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert s3.head_bucket(Bucket=BUCKET)["ResponseMetadata"]["HTTPHeaders"]["x-amz-bucket-region"] == "us-east-1"
    with pytest.raises(ClientError) as raised:  # read-only
        s3.put_object(Bucket=BUCKET, Key=expected_keys()[0], Body=b"x")
    assert raised.value.response["Error"]["Code"] == "AccessDenied"


def test_bytes_are_log_lines_fixed_by_seed_and_key(source, listed):
    first, second = listed[0]["Key"], listed[1]["Key"]
    body = source.fetch(first)
    assert body == source.fetch(first)  # the same key twice: the same bytes
    assert body != source.fetch(second)
    lines = body.splitlines()
    assert LOG_LINE.match(lines[0]) and lines[-1] == f"object={first}".encode()
    assert all(LOG_LINE.match(line) for line in lines[:-1])  # log lines, the last one cut short
    sample = b"".join(source.fetch(o["Key"]) for o in listed[:200])
    assert 2.5 < len(sample) / len(gzip.compress(sample, 1)) < 10  # compressible like logs, not constant
    # Another server with the same seed serves the same bucket; another seed, other bytes.
    with SyntheticSource(objects=OBJECTS, bucket=BUCKET, prefix=PREFIX, size_min=SIZE_MIN, size_max=SIZE_MAX,
                         seed=7, per_host=PER_HOST) as same, \
            SyntheticSource(objects=OBJECTS, bucket=BUCKET, prefix=PREFIX, size_min=SIZE_MIN, size_max=SIZE_MAX,
                            seed=8, per_host=PER_HOST) as other:
        assert same.fetch(first) == body
        assert other.fetch(first) != body
    with pytest.raises(KeyError):
        source.fetch(PREFIX + "missing.log")


def test_objects_longer_than_the_text_pool(s3):
    """Objects of 3 MiB (the pool of log text is 1 MiB, a body is sent in 256 KiB writes): the
    bytes wrap around the pool, the ETag is still their MD5, a range across a wrap is a slice."""
    with SyntheticSource(objects=5, bucket="large", prefix="big/", size_min=3 << 20, size_max=(3 << 20) + 5000,
                         seed=3) as large:
        client = large.client()
        for entry in client.list_objects_v2(Bucket="large")["Contents"]:
            whole = client.get_object(Bucket="large", Key=entry["Key"])["Body"].read()
            assert len(whole) == entry["Size"] and f'"{hashlib.md5(whole).hexdigest()}"' == entry["ETag"]
            across = client.get_object(Bucket="large", Key=entry["Key"], Range="bytes=1048000-2097999")
            assert across["Body"].read() == whole[1048000:2098000]
        assert "panic" not in large.server.log_path.read_text(errors="replace")


@pytest.mark.slow  # compiles the Go server's tests: both cores for a while, and no crash-safety question
def test_go_unit_tests():
    """bench/synthetic_s3's own tests: keys sort and parse back, ETag = MD5 and ranges = slices
    for small, large and empty objects, Range headers."""
    from bench.synthetic_source import SOURCE_DIR, go_binary

    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-trimpath", GOWORK="off", CGO_ENABLED="0")
    proc = subprocess.run([go_binary(), "test", "-count=1", "."], cwd=SOURCE_DIR, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_tagging_is_empty(s3, listed):
    tagging = s3.get_object_tagging(Bucket=BUCKET, Key=listed[0]["Key"])
    assert tagging["TagSet"] == []
    assert "TagCount" not in s3.get_object(Bucket=BUCKET, Key=listed[0]["Key"])  # no x-amz-tagging-count
    with pytest.raises(ClientError) as raised:
        s3.get_object_tagging(Bucket=BUCKET, Key=PREFIX + "missing.log")
    assert raised.value.response["Error"]["Code"] == "NoSuchKey"


def test_engine_dry_run_lists_and_samples_it(source, listed):
    """`s3arch archive --dry-run` against the endpoint: every object counted, the bytes the
    listing says, a compressed sample read by GET. (A real archive, written to MinIO through
    --upstream: test_engine_archives_it_into_minio_through_the_upstream.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(source.env())
    proc = subprocess.run([sys.executable, "-m", "s3arch", "archive", "--dry-run", "--json", "--storage-class",
                           "STANDARD", f"s3://{BUCKET}/{PREFIX}", f"s3://{BUCKET}/archives/"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == "dry_run"
    assert result["objects"] == OBJECTS
    assert result["bytes_in"] == sum(o["Size"] for o in listed)
    assert 0 < result["estimated_bytes_out"] < result["bytes_in"] / 2


def test_engine_archives_it_into_minio_through_the_upstream(minio, cli_env):
    """One endpoint for both sides, as the CLI takes: the synthetic server answers the virtual
    bucket and passes every other request to MinIO unchanged (--upstream), so the engine reads
    1,200 objects (two listing pages, three hosts) from it and writes the archive, manifest and lease into MinIO through it,
    MinIO checking every signature. The archive, read from MinIO itself, holds every object's
    bytes as the synthetic server serves them, and `s3arch verify` (through the server too)
    passes."""
    from helpers import read_archive, run_cli

    objects, virtual, prefix = 1200, "synthetic-day", "day/"
    dest = f"dst-{uuid.uuid4().hex[:10]}"
    minio_s3 = minio.client()
    minio_s3.create_bucket(Bucket=dest)
    # Only --endpoint-url names an endpoint: a request that went around the synthetic server
    # would go to AWS (no network here) and fail.
    env = {k: v for k, v in cli_env.items() if k != "AWS_ENDPOINT_URL_S3"}
    with SyntheticSource(objects=objects, bucket=virtual, prefix=prefix, per_host=500, seed=11,
                         upstream=minio) as both:
        endpoint = ["--endpoint-url", both.endpoint_url]
        # MinIO checks the signatures it is passed: one made with another secret is refused.
        with pytest.raises(ClientError) as raised:
            dataclasses.replace(both.server, secret_key="not-the-secret").client().put_object(
                Bucket=dest, Key="forged", Body=b"x")
        assert raised.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
        proc = run_cli(env, "archive", f"s3://{virtual}/{prefix}", f"s3://{dest}/a/", "--storage-class",
                       "STANDARD", "--json", *endpoint, check=False)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        assert (result["status"], result["objects"]) == ("archived", objects), result
        archive_bucket, archive_key = result["archive"].removeprefix("s3://").split("/", 1)
        assert archive_bucket == dest

        # What MinIO holds, read from MinIO: the archive and its manifest, no lease left.
        stored = sorted(o["Key"] for o in minio_s3.list_objects_v2(Bucket=dest).get("Contents", []))
        assert archive_key in stored and any(k.endswith(".manifest.jsonl.gz") for k in stored), stored
        assert not [k for k in stored if k.endswith(".lease.json")], stored
        members = read_archive(minio_s3, dest, archive_key)
        keys = [both.key(i) for i in range(objects)]
        assert sorted(members) == keys
        connection = both.connection()
        try:
            for key in keys:
                assert members[key] == both.fetch(key, connection), key
        finally:
            connection.close()

        # The manifest's keys, sizes and ETags are the listing's.
        listing = [o for page in both.client().get_paginator("list_objects_v2").paginate(Bucket=virtual, Prefix=prefix)
                   for o in page["Contents"]]
        manifest_key = next(k for k in stored if k.endswith(".manifest.jsonl.gz"))
        records = [json.loads(line) for line in gzip.decompress(
            minio_s3.get_object(Bucket=dest, Key=manifest_key)["Body"].read()).splitlines()]
        assert [(r["key"], r["size"], r["etag"]) for r in records if r["type"] == "object"] == \
            [(o["Key"], o["Size"], o["ETag"]) for o in listing]

        verified = run_cli(env, "verify", result["archive"], "--json", *endpoint, check=False)
        assert verified.returncode == 0, verified.stderr.decode(errors="replace")
        assert json.loads(verified.stdout.decode().strip().splitlines()[-1])["objects"] == objects
        log = both.server.log_path.read_text(errors="replace")
    # Three lines at start (address, bucket, upstream), then nothing: no proxy error, no panic.
    assert len(log.splitlines()) == 3 and log.splitlines()[2].startswith("other buckets: passed to "), log[-3000:]
