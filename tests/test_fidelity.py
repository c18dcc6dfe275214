"""Fidelity: an archive keeps everything about each object, and extract gives all of it back.

User story: a prefix whose objects carry content headers, user metadata, tags and checksums
(odd keys, zero-byte objects, objects above the multipart threshold among them) is archived
with --delete-source, and extracted to another bucket; every field is compared with HEAD and
GetObjectTagging against what was seeded. Against a real MinIO, which returns all of them.
"""

from __future__ import annotations

import gzip
import json
import random
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from helpers import keys_in, minio_user, run_cli, run_json


pytestmark = pytest.mark.slow  # full archive, delete and extract round trips per test


PREFIX = "fid/2026/11/21/"
RFC2047 = "=?UTF-8?B?aMOpbGxvIHfDtnJsZA==?="  # "héllo wörld", the way S3 sends non-ASCII metadata

# key -> (body, PutObject arguments, tags)
RICH_ARGS = dict(ContentType="text/plain; charset=utf-8", ContentEncoding="identity",
                 ContentDisposition='attachment; filename="report a.txt"', ContentLanguage="de-CH",
                 CacheControl="max-age=60, private", Expires=datetime(2031, 1, 2, 3, 4, 5, tzinfo=timezone.utc),
                 WebsiteRedirectLocation="/elsewhere.html",
                 Metadata={"MixedCase": "Value Keeps Case", "empty": "", "non-ascii": RFC2047})
TAGS = {"team": "ops + infra", "retention": "7y"}


def seeded_set() -> dict[str, tuple[bytes, dict, dict]]:
    rng = random.Random(20)
    return {
        f"{PREFIX}rich.txt": (b"every header\n" * 40, {**RICH_ARGS, "ChecksumAlgorithm": "CRC32C"}, TAGS),
        f"{PREFIX}plain.log": (b"nothing special\n", {}, {}),
        f"{PREFIX}sha.bin": (b"s" * 3000, {"ChecksumAlgorithm": "SHA256", "ContentType": "application/x-s"}, {}),
        f"{PREFIX}empty.txt": (b"", {"Metadata": {"zero": "bytes"}, "ContentType": "text/plain"}, {"kind": "empty"}),
        f"{PREFIX}folder/": (b"", {"Metadata": {"marker": "yes"}}, {}),
        f"{PREFIX}odd key ü ?&=%+#[]~.txt": (b"odd\n", {"Metadata": {"k": "v"}, "CacheControl": "no-cache"},
                                              {"odd tag": "a=b:c/d@e"}),
        # Above the fetch chunk and the extract's single-PUT limit: ranged GETs, multipart restore.
        f"{PREFIX}big.bin": (rng.randbytes(9 << 20), {"ContentType": "application/octet-stream",
                                                      "Metadata": {"big": "1"}, "ContentEncoding": "zstd"},
                             {"size": "big"}),
    }


def seed_set(s3, bucket: str, objects: dict) -> None:
    for key, (body, args, tags) in objects.items():
        extra = {"Tagging": "&".join(f"{_q(k)}={_q(v)}" for k, v in tags.items())} if tags else {}
        s3.put_object(Bucket=bucket, Key=key, Body=body, **args, **extra)


def _q(text: str) -> str:
    import urllib.parse

    return urllib.parse.quote(text, safe="")


def _observed(s3, bucket: str, key: str) -> dict:
    """What a user sees of an object: its headers, metadata, tags and checksum."""
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    tags = {t["Key"]: t["Value"] for t in s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]}
    fields = {name: head.get(name) for name in ("ContentType", "ContentEncoding", "ContentDisposition",
                                                "ContentLanguage", "CacheControl", "WebsiteRedirectLocation",
                                                "ContentLength")}
    fields["Expires"] = head.get("ExpiresString") or head.get("Expires")
    if isinstance(fields["Expires"], datetime):
        fields["Expires"] = fields["Expires"].astimezone(timezone.utc).strftime("%a, %d %b %Y %H:%M:%S GMT")
    metadata = dict(head.get("Metadata", {}))
    metadata.pop("s3arch-sha256", None)  # the restore's own marker
    return {**fields, "Metadata": metadata, "Tags": tags,
            "Checksum": {k: v for k, v in head.items() if k.startswith("Checksum") and k != "ChecksumType"}}


@pytest.fixture
def fidelity(minio):
    s3 = minio.client(max_pool_connections=32)
    suffix = uuid.uuid4().hex[:8]
    src, dst, out = f"fsrc-{suffix}", f"fdst-{suffix}", f"fout-{suffix}"
    for bucket in (src, dst, out):
        s3.create_bucket(Bucket=bucket)
    objects = seeded_set()
    seed_set(s3, src, objects)
    return s3, src, dst, out, objects


def test_archive_with_delete_source_then_extract_gives_every_header_metadata_and_tag_back(fidelity, cli_env):
    s3, src, dst, out, objects = fidelity
    before = {key: _observed(s3, src, key) for key in objects}
    assert before[f"{PREFIX}rich.txt"]["Tags"] == TAGS and before[f"{PREFIX}rich.txt"]["Metadata"]["mixedcase"]

    result = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD",
                      "--delete-source", "--memory-budget", "64MiB")
    assert result["status"] == "archived" and result["deleted"] == len(objects)
    assert keys_in(s3, src) == []  # the originals are gone: the archive is all there is

    manifest = f"s3://{dst}/vault/{src}/fid/2026/11/21.manifest.jsonl.gz"
    listing = run_cli(cli_env, "ls", "--long", manifest).stdout.decode()
    assert "x-amz-meta-mixedcase: Value Keeps Case" in listing
    assert "Tags: retention=7y&team=ops%20%2B%20infra" in listing  # as S3 lists them, sorted
    assert "ContentDisposition: attachment; filename=\"report a.txt\"" in listing

    for original_keys, target in ((True, f"s3://{out}/orig/"), (False, f"s3://{out}/rel/")):
        args = ["extract", manifest, "--to", target] + (["--original-keys"] if original_keys else [])
        extracted = run_json(cli_env, *args)
        assert extracted["objects"] == len(objects)
        base = target.split("/", 3)[3]
        differences = []
        for key in objects:
            restored = base + (key if original_keys else key[len(PREFIX):])
            seen = _observed(s3, out, restored)
            for name, value in before[key].items():
                if name == "Checksum" and key == f"{PREFIX}big.bin":
                    continue  # restored by multipart: S3 computes a new (composite) checksum
                if seen[name] != value:
                    differences.append(f"{restored} {name}: {seen[name]!r} != {value!r}")
            assert s3.get_object(Bucket=out, Key=restored)["Body"].read() == objects[key][0]
        assert differences == []


def test_segments_record_the_same_attributes_as_one_pipeline(fidelity, cli_env):
    s3, src, dst, _, objects = fidelity
    for i in range(40):  # enough members that 3 segments each hold several
        s3.put_object(Bucket=src, Key=f"{PREFIX}n/{i:03d}.log", Body=b"x" * i, Metadata={"i": str(i)},
                      **({"Tagging": f"n={i}"} if i % 10 == 0 else {}))
    one = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/one/", "--storage-class", "STANDARD")
    three = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/three/", "--storage-class", "STANDARD",
                     "--segments", "3", "--processes", "2", "--segment-min-objects", "1")
    assert one["segments"] == 1 and three["segments"] == 3

    def records(prefix):
        body = s3.get_object(Bucket=dst, Key=f"{prefix}/{src}/fid/2026/11/21.manifest.jsonl.gz")["Body"].read()
        lines = [json.loads(line) for line in gzip.decompress(body).splitlines()]
        placement = ("header_offset", "data_offset", "block", "range")
        return [{k: v for k, v in r.items() if k not in placement} for r in lines if r["type"] == "object"]

    single, segmented = records("one"), records("three")
    assert single == segmented
    rich = next(r for r in single if r["key"] == f"{PREFIX}rich.txt")
    assert rich["tags"] == TAGS and rich["metadata"]["non-ascii"] == RFC2047
    assert rich["checksum"]["algorithm"] == "CRC32C"
    big = next(r for r in single if r["key"] == f"{PREFIX}big.bin")
    assert big["checksum"]["type"] == "FULL_OBJECT"  # from a HEAD: its ranged GETs carry none
    plain = next(r for r in single if r["key"] == f"{PREFIX}plain.log")
    assert set(plain) - {"checksum"} == {"type", "key", "size", "etag", "last_modified", "sha256"}


def test_denied_tag_read_with_delete_source_deletes_nothing_unless_without_tags(fidelity, minio, cli_env):
    s3, src, dst, _, objects = fidelity
    user, secret = minio_user(minio, [
        {"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]},
        {"Effect": "Deny", "Action": ["s3:GetObjectTagging", "s3:GetObjectVersionTagging"],
         "Resource": [f"arn:aws:s3:::{src}/*"]}])
    env = {**cli_env, "AWS_ACCESS_KEY_ID": user, "AWS_SECRET_ACCESS_KEY": secret}
    source = f"s3://{src}/{PREFIX}"

    denied = run_cli(env, "archive", source, f"s3://{dst}/vault/", "--storage-class", "STANDARD",
                     "--delete-source", check=False)
    assert denied.returncode == 2
    message = denied.stderr.decode()
    assert "s3:GetObjectTagging" in message and "--without-tags" in message
    assert sorted(keys_in(s3, src)) == sorted(objects)  # nothing deleted
    assert [k for k in keys_in(s3, dst) if k.endswith(".manifest.jsonl.gz")] == []  # nothing committed

    allowed = run_json(env, "archive", source, f"s3://{dst}/vault/", "--storage-class", "STANDARD",
                       "--delete-source", "--without-tags")
    tagged = [k for k, (_, _, tags) in objects.items() if tags]
    assert allowed["status"] == "archived" and allowed["tags_unread"] == len(tagged)
    assert any("without their tags" in note for note in allowed["notes"])
    body = s3.get_object(Bucket=dst, Key=f"vault/{src}/fid/2026/11/21.manifest.jsonl.gz")["Body"].read()
    lines = [json.loads(line) for line in gzip.decompress(body).splitlines()]
    assert sorted(r["key"] for r in lines if r.get("tags_unread") == "AccessDenied") == sorted(tagged)
    assert lines[-1]["tags_unread"] == len(tagged)


def test_object_locked_sources_are_kept_and_reported_with_the_reason(minio, cli_env):
    s3 = minio.client()
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"lsrc-{suffix}", f"ldst-{suffix}"
    s3.create_bucket(Bucket=src, ObjectLockEnabledForBucket=True)
    s3.create_bucket(Bucket=dst)
    until = (datetime.now(timezone.utc) + timedelta(days=1)).replace(microsecond=0)
    s3.put_object(Bucket=src, Key=f"{PREFIX}retained.log", Body=b"r", ObjectLockMode="GOVERNANCE",
                  ObjectLockRetainUntilDate=until)
    s3.put_object(Bucket=src, Key=f"{PREFIX}held.log", Body=b"h", ObjectLockLegalHoldStatus="ON")
    s3.put_object(Bucket=src, Key=f"{PREFIX}free.log", Body=b"f")

    result = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class",
                      "STANDARD", "--delete-source", "--delete-versions")
    assert result["deleted"] == 1 and result["deletion"]["kept_locked"] == 2
    note = next(n for n in result["notes"] if "Object Lock" in n)
    assert f"{PREFIX}held.log: under legal hold" in note and "GOVERNANCE retention until" in note
    assert sorted(keys_in(s3, src)) == [f"{PREFIX}held.log", f"{PREFIX}retained.log"]
    versions = s3.list_object_versions(Bucket=src, Prefix=PREFIX).get("Versions", [])
    assert sorted(v["Key"] for v in versions) == [f"{PREFIX}held.log", f"{PREFIX}retained.log"]

    body = s3.get_object(Bucket=dst, Key=f"vault/{src}/fid/2026/11/21.manifest.jsonl.gz")["Body"].read()
    records = {r["key"]: r for r in map(json.loads, gzip.decompress(body).splitlines()) if r["type"] == "object"}
    assert records[f"{PREFIX}held.log"]["object_lock"] == {"legal_hold": "ON"}
    assert records[f"{PREFIX}retained.log"]["object_lock"]["mode"] == "GOVERNANCE"
    assert "version_id" in records[f"{PREFIX}free.log"]

    # A re-run (as a retry would) still keeps them, and still says so.
    again = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class",
                     "STANDARD", "--delete-source", "--delete-versions")
    assert again["status"] == "skipped" and again["deletion"]["kept_locked"] == 2

    # Locked after it was archived: the record knows nothing of it, S3 refuses, it is kept.
    late = "late/2026/11/21/"
    for name in ("a.log", "b.log"):
        s3.put_object(Bucket=src, Key=late + name, Body=name.encode())
    run_json(cli_env, "archive", f"s3://{src}/{late}", f"s3://{dst}/vault/", "--storage-class", "STANDARD")
    s3.put_object_legal_hold(Bucket=src, Key=late + "a.log", LegalHold={"Status": "ON"})
    finished = run_json(cli_env, "delete-sources", f"s3://{dst}/vault/{src}/late/2026/11/21.tar.gz", "--delete-versions")
    assert finished["deletion"]["deleted"] == 1 and finished["deletion"]["kept_locked"] == 1
    assert any(f"{late}a.log" in n and "Object Lock" in n for n in finished["notes"])
    assert keys_in(s3, src, late) == [late + "a.log"]


def test_manifest_of_format_version_1_still_lists_extracts_and_verifies(fidelity, cli_env, tmp_path):
    s3, src, dst, out, objects = fidelity
    run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD")
    key = f"vault/{src}/fid/2026/11/21.manifest.jsonl.gz"
    lines = [json.loads(line) for line in gzip.decompress(s3.get_object(Bucket=dst, Key=key)["Body"].read()).splitlines()]
    old_fields = {"type", "key", "size", "etag", "last_modified", "sha256", "name", "header_offset", "data_offset",
                  "block", "range"}
    old = [{**r, "version": 1} if r["type"] == "header" else
           {k: v for k, v in r.items() if k in old_fields} if r["type"] == "object" else r for r in lines]
    # As s3arch 0.1 wrote it: one gzip stream, no index beside it.
    s3.put_object(Bucket=dst, Key=key, Body=gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in old)))
    s3.delete_object(Bucket=dst, Key=key.replace(".manifest.jsonl.gz", ".manifest-index.json.gz"))

    manifest = f"s3://{dst}/{key}"
    assert run_json(cli_env, "verify", manifest)["objects"] == len(objects)
    assert f"{PREFIX}rich.txt" in run_cli(cli_env, "ls", "--long", manifest).stdout.decode()
    assert run_json(cli_env, "extract", manifest, "--to", f"s3://{out}/old/")["objects"] == len(objects)
    head = s3.head_object(Bucket=out, Key="old/rich.txt")
    assert head["ContentType"] == "binary/octet-stream" and head["Metadata"].keys() == {"s3arch-sha256"}


def test_manifest_of_a_newer_format_is_refused_not_misread(fidelity, cli_env):
    s3, src, dst, _, _ = fidelity
    run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD")
    key = f"vault/{src}/fid/2026/11/21.manifest.jsonl.gz"
    lines = [json.loads(line) for line in gzip.decompress(s3.get_object(Bucket=dst, Key=key)["Body"].read()).splitlines()]
    lines[0]["version"] = 99
    s3.put_object(Bucket=dst, Key=key, Body=gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in lines)))
    s3.delete_object(Bucket=dst, Key=key.replace(".manifest.jsonl.gz", ".manifest-index.json.gz"))
    proc = run_cli(cli_env, "ls", f"s3://{dst}/{key}", check=False)
    assert proc.returncode == 2 and "format version 99" in proc.stderr.decode()


def test_extract_to_dir_writes_a_metadata_file_beside_the_data(fidelity, cli_env, tmp_path):
    s3, src, dst, _, objects = fidelity
    run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD")
    sidecar = tmp_path / "metadata.jsonl"
    run_json(cli_env, "extract", f"s3://{dst}/vault/{src}/fid/2026/11/21.manifest.jsonl.gz",
             "--to-dir", str(tmp_path / "out"), "--metadata-file", str(sidecar))
    entries = {e["path"]: e for e in map(json.loads, sidecar.read_text().splitlines())}
    assert len(entries) == len(objects)
    rich = entries["rich.txt"]
    assert rich["key"] == f"{PREFIX}rich.txt" and rich["tags"] == TAGS
    assert rich["content_disposition"] == RICH_ARGS["ContentDisposition"]
    assert "header_offset" not in rich and "range" not in rich
    assert (tmp_path / "out" / "rich.txt").read_bytes() == objects[f"{PREFIX}rich.txt"][0]
    modified = datetime.fromisoformat(rich["last_modified"]).timestamp()
    assert int((tmp_path / "out" / "rich.txt").stat().st_mtime) == int(modified)
    assert entries["folder/"]["metadata"] == {"marker": "yes"}


def test_records_of_plain_objects_carry_no_attribute_defaults():
    from s3arch.io.attributes import from_headers

    captured = from_headers([("Content-Type", "binary/octet-stream"), ("x-amz-storage-class", "STANDARD"),
                             ("x-amz-server-side-encryption", "AES256"), ("x-amz-version-id", "null"),
                             ("x-amz-object-lock-legal-hold", "OFF"), ("ETag", '"x"')])
    assert captured.fields == {} and captured.tag_count == 0 and captured.version_id == "null"
    kms = from_headers([("X-Amz-Server-Side-Encryption", "aws:kms:dsse"), ("X-Amz-Meta-Empty", ""),
                        ("x-amz-server-side-encryption-aws-kms-key-id", "arn:aws:kms:k"), ("x-amz-tagging-count", "3")])
    assert kms.fields == {"sse": "aws:kms:dsse", "sse_kms_key_id": "arn:aws:kms:k", "metadata": {"empty": ""}}
    assert kms.tag_count == 3


def test_lock_reason_and_restore_arguments_follow_the_record():
    from s3arch.io.attributes import lock_reason, put_checksum, write_args

    now = datetime(2026, 11, 23, tzinfo=timezone.utc)
    assert lock_reason({"object_lock": {"legal_hold": "ON"}}, now) == "under legal hold"
    assert lock_reason({"object_lock": {"mode": "COMPLIANCE", "retain_until": "2026-11-22T00:00:00Z"}}, now) is None
    assert "COMPLIANCE retention until 2027" in lock_reason(
        {"object_lock": {"mode": "COMPLIANCE", "retain_until": "2027-01-01T00:00:00Z"}}, now)
    args = write_args({"metadata": {"raw": "héllo"}, "tags": {"a b": "c&d"}, "cache_control": "no-cache"})
    assert args == {"ContentType": "binary/octet-stream", "CacheControl": "no-cache",
                    "Metadata": {"raw": "=?utf-8?b?aMOpbGxv?="}, "Tagging": "a%20b=c%26d"}
    assert put_checksum({"checksum": {"algorithm": "CRC32", "value": "AAAA", "type": "FULL_OBJECT"}}) == \
        ("ChecksumCRC32", "AAAA")
    assert put_checksum({"checksum": {"algorithm": "SHA256", "value": "AAAA-3", "type": "COMPOSITE"}}) is None
