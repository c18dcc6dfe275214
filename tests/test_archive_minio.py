"""The archive engine end to end against a real MinIO: a user seeds a prefix, archives it
with `python -m s3arch`, and reads it back with every common reader."""

from __future__ import annotations

import io
import os
import random
import subprocess
import tarfile

import pytest

from helpers import ROOT, keys_in, open_uploads, read_archive, run_cli, run_json, seed

PREFIX = "logs/2026/11/21/"


def mixed_prefix() -> dict[str, bytes]:
    rng = random.Random(7)
    objects = {}
    for i in range(2500):
        line = f"2026-11-21T10:{i % 60:02d}:00Z INFO id={i} path=/api/items/{rng.randrange(999)}\n"
        objects[f"{PREFIX}{i % 24:02d}/part-{i:05d}.log"] = (line * rng.randrange(0, 200)).encode()
    for i in range(3):  # each larger than the whole 32 MiB budget used below
        objects[f"{PREFIX}blobs/big-{i}.bin"] = rng.randbytes(40 << 20)
    objects[f"{PREFIX}empty.txt"] = b""
    objects[f"{PREFIX}folder/"] = b""
    objects[f"{PREFIX}ünïcødé/日本語/ファイル.log"] = "naïve café\n".encode()
    objects[f"{PREFIX}deep/" + "/".join(["segment-" + "x" * 40] * 6) + "/long.log"] = b"long key\n"
    return objects


@pytest.fixture(scope="module")
def archived(minio):
    """One archive of a mixed prefix, shared by the read-back tests."""
    import uuid

    s3 = minio.client(max_pool_connections=64)
    src, dst = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst)
    objects = mixed_prefix()
    seed(s3, src, objects)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(minio.env(), PYTHONPATH=str(__import__("helpers").ROOT))
    result = run_json(env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/",
                      "--storage-class", "STANDARD", "--memory-budget", "48MiB")
    body = s3.get_object(Bucket=dst, Key=f"vault/{src}/logs/2026/11/21.tar.gz")["Body"].read()
    return {"s3": s3, "src": src, "dst": dst, "objects": objects, "result": result,
            "archive": body, "env": env}


def _expected_members(objects):
    """What an extractor should produce: tar name -> bytes (dirs as None)."""
    return {k.rstrip("/") if k.endswith("/") and not v else k: (None if k.endswith("/") and not v else v)
            for k, v in objects.items()}


def test_archive_reports_every_object_and_byte(archived):
    r, objects = archived["result"], archived["objects"]
    assert r["status"] == "archived"
    assert r["objects"] == len(objects)
    assert r["bytes_in"] == sum(map(len, objects.values()))
    assert r["bytes_out"] == len(archived["archive"])
    assert r["archive"] == f"s3://{archived['dst']}/vault/{archived['src']}/logs/2026/11/21.tar.gz"
    assert r["manifest"].endswith("/logs/2026/11/21.manifest.jsonl.gz")


@pytest.mark.parametrize("mode", ["r:gz", "r|gz"])
def test_python_tarfile_reads_every_member_byte_for_byte(archived, mode):
    expected = _expected_members(archived["objects"])
    seen = {}
    with tarfile.open(fileobj=io.BytesIO(archived["archive"]), mode=mode) as tar:
        for m in tar:
            seen[m.name] = tar.extractfile(m).read() if m.isfile() else None
    assert seen.keys() == expected.keys()
    assert all(seen[k] == v for k, v in expected.items())


@pytest.mark.parametrize("reader", [["tar", "-xzf", "-"], "pigz", "gzip"])
def test_gnu_tar_gzip_and_pigz_extract_the_archive(archived, tmp_path, reader):
    out = tmp_path / "x"
    out.mkdir()
    data = archived["archive"]
    if isinstance(reader, str):
        data = subprocess.run([reader, "-dc"], input=data, capture_output=True, check=True).stdout
        cmd = ["tar", "-xf", "-"]
    else:
        cmd = reader
    subprocess.run(cmd, input=data, cwd=out, check=True, capture_output=True)
    for key, body in _expected_members(archived["objects"]).items():
        path = out / key
        if body is None:
            assert path.is_dir(), key
        else:
            assert path.read_bytes() == body, key


def test_cat_returns_single_objects_by_ranged_get(archived):
    url = archived["result"]["archive"]
    for key in (f"{PREFIX}07/part-00007.log", f"{PREFIX}blobs/big-1.bin",
                f"{PREFIX}ünïcødé/日本語/ファイル.log", f"{PREFIX}empty.txt"):
        out = run_cli(archived["env"], "cat", url, key).stdout
        assert out == archived["objects"][key], key


def test_ls_lists_every_key_from_the_manifest(archived):
    lines = run_cli(archived["env"], "ls", archived["result"]["manifest"]).stdout.decode().splitlines()
    assert len(lines) == len(archived["objects"])
    assert {line.split("  ", 2)[2] for line in (l.strip() for l in lines)} == set(archived["objects"])


def test_verify_reads_the_whole_archive_back(archived):
    out = run_json(archived["env"], "verify", archived["result"]["archive"])
    assert out == {"status": "verified", "objects": len(archived["objects"]),
                   "bytes": archived["result"]["bytes_in"], "archive_size": len(archived["archive"])}


def test_rerun_of_done_prefix_is_skipped_and_overwrite_rearchives(archived):
    src, dst, env = archived["src"], archived["dst"], archived["env"]
    args = ("archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD")
    assert run_json(env, *args)["status"] == "skipped"
    again = run_json(env, *args, "--overwrite")
    assert again["status"] == "archived" and again["objects"] == len(archived["objects"])
    stem = f"vault/{src}/logs/2026/11/21"
    assert sorted(keys_in(archived["s3"], dst)) == [
        f"{stem}.manifest-index.json.gz", f"{stem}.manifest.jsonl.gz", f"{stem}.tar.gz"]


def test_zstd_codec_round_trips_through_zstd_and_tar(s3, buckets, cli_env, tmp_path):
    src, dst = buckets
    objects = {f"d/{i:03d}.log": f"event {i}\n".encode() * (i + 1) for i in range(300)}
    seed(s3, src, objects)
    r = run_json(cli_env, "archive", f"s3://{src}/d/", f"s3://{dst}/", "--codec", "zstd",
                 "--storage-class", "STANDARD")
    assert r["archive"].endswith("/d.tar.zst")
    body = s3.get_object(Bucket=dst, Key=f"{src}/d.tar.zst")["Body"].read()
    tar = subprocess.run(["zstd", "-dc"], input=body, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-xf", "-"], input=tar, cwd=tmp_path, check=True)
    for key, data in objects.items():
        assert (tmp_path / key).read_bytes() == data
    assert run_cli(cli_env, "cat", r["archive"], "d/123.log").stdout == objects["d/123.log"]
    assert run_json(cli_env, "verify", r["archive"])["objects"] == 300


def test_gzip_levels_above_isal_make_smaller_archives_every_reader_reads(s3, buckets, cli_env, tmp_path):
    src, dst = buckets
    rng = random.Random(8)
    words = [b"GET", b"POST", b"/api/v1/items/", b"200", b"404", b"latency_ms=", b"user=u", b"\n"]
    objects = {f"d/{i:03d}.log": b" ".join(rng.choice(words) + b"%d" % rng.randrange(999) for _ in range(3000))
               for i in range(120)}
    seed(s3, src, objects)
    sizes = {}
    for level in ("1", "6", "9"):
        r = run_json(cli_env, "archive", f"s3://{src}/d/", f"s3://{dst}/l{level}/", "--level", level,
                     "--storage-class", "STANDARD")
        body = s3.get_object(Bucket=dst, Key=f"l{level}/{src}/d.tar.gz")["Body"].read()
        sizes[level] = len(body)
        subprocess.run(["gzip", "-t"], input=body, check=True)
        with tarfile.open(fileobj=io.BytesIO(body), mode="r|gz") as tar:
            assert {m.name: tar.extractfile(m).read() for m in tar if m.isfile()} == objects
        assert run_cli(cli_env, "cat", r["archive"], "d/077.log").stdout == objects["d/077.log"]
    assert sizes["9"] <= sizes["6"] < sizes["1"], sizes


def test_empty_prefix_is_reported_and_writes_nothing(s3, buckets, cli_env):
    src, dst = buckets
    proc = run_cli(cli_env, "archive", f"s3://{src}/nothing/", f"s3://{dst}/", "--json", check=False)
    assert proc.returncode == 4
    assert b"holds no objects" in proc.stderr
    assert keys_in(s3, dst) == [] and open_uploads(s3, dst) == []


def test_dry_run_counts_and_estimates_without_writing(s3, buckets, cli_env):
    src, dst = buckets
    seed(s3, src, {f"p/{i}.log": b"GET /index.html 200\n" * 400 for i in range(50)})
    r = run_json(cli_env, "archive", f"s3://{src}/p/", f"s3://{dst}/", "--dry-run")
    assert r["status"] == "dry_run" and r["objects"] == 50 and r["bytes_in"] == 50 * 8000
    assert 0 < r["estimated_bytes_out"] < r["bytes_in"]
    assert keys_in(s3, dst) == []


def test_storage_class_minio_rejects_fails_fast_naming_the_flag(s3, buckets, cli_env):
    src, dst = buckets
    seed(s3, src, {"p/a.log": b"a"})
    proc = run_cli(cli_env, "archive", f"s3://{src}/p/", f"s3://{dst}/", "--storage-class", "GLACIER",
                   check=False)
    assert proc.returncode == 2
    assert b"--storage-class" in proc.stderr and b"storage class" in proc.stderr
    assert keys_in(s3, dst) == [] and open_uploads(s3, dst) == []


def test_sse_kms_archive_and_manifest_are_encrypted_with_the_given_key(tmp_path):
    from devtools.servers import start_minio

    server = start_minio(kms_key_id="s3arch-test-key")
    try:
        s3 = server.client()
        for bucket in ("kms-src", "kms-dst"):
            s3.create_bucket(Bucket=bucket)
        objects = {f"p/{i}.log": b"secret line %d\n" % i * 50 for i in range(20)}
        seed(s3, "kms-src", objects)
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(server.env(), PYTHONPATH=str(ROOT))
        run_cli(env, "archive", "s3://kms-src/p/", "s3://kms-dst/", "--storage-class", "STANDARD",
                "--sse", "aws:kms", "--sse-kms-key-id", "s3arch-test-key")
        for key in ("kms-src/p.tar.gz", "kms-src/p.manifest.jsonl.gz", "kms-src/p.manifest-index.json.gz"):
            head = s3.head_object(Bucket="kms-dst", Key=key)
            assert head["ServerSideEncryption"] == "aws:kms", key
            assert head["SSEKMSKeyId"].endswith("s3arch-test-key"), key
        assert read_archive(s3, "kms-dst", "kms-src/p.tar.gz") == objects
        run_cli(env, "verify", "s3://kms-dst/kms-src/p.tar.gz")
    finally:
        server.stop()
