"""Getting data back: restore from Glacier classes (moto server), extract to S3 and to a
directory (moto and MinIO), selective extracts by ranged GET, and the manifest index."""

from __future__ import annotations

import json
import os
import random
import uuid

import pytest

from faultproxy import Fault
from helpers import keys_in, put_exact_key, run_cli, run_json, seed


pytestmark = pytest.mark.slow  # Glacier round trips on moto: archive, restore, extract


PREFIX = "logs/2026/10/21/"


def moto_env(moto_server, cli_env) -> dict:
    env = {k: v for k, v in cli_env.items() if not k.startswith("AWS_")}
    env.update(moto_server.env())
    return env


def day_objects(n: int, seed_value: int = 1) -> dict[str, bytes]:
    rng = random.Random(seed_value)
    objects = {f"{PREFIX}{i // 100:02d}/app-{i:05d}.log": (b"%d GET /item/%d 200\n" % (i, rng.randrange(9999)))
               * rng.randrange(1, 300) for i in range(n)}
    objects[f"{PREFIX}big.bin"] = os.urandom(9 << 20)  # larger than one PUT: written back by multipart
    objects[f"{PREFIX}empty.log"] = b""
    return objects


def archive_cli(env, src, dst, storage_class) -> dict:
    return run_json(env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", storage_class)


def read_tree(root) -> dict[str, bytes]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out[os.path.relpath(path, root)] = open(path, "rb").read()
    return out


@pytest.fixture
def glacier_day(moto_server, cli_env):
    s3 = moto_server.client(max_pool_connections=32)
    src, dst, out = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("src", "dst", "out"))
    for bucket in (src, dst, out):
        s3.create_bucket(Bucket=bucket)
    objects = day_objects(300)
    seed(s3, src, objects)
    env = moto_env(moto_server, cli_env)
    archive_cli(env, src, dst, "GLACIER")
    return s3, env, src, dst, out, objects, f"s3://{dst}/vault/{src}/{PREFIX.rstrip('/')}.tar.gz"


def test_glacier_round_trip_archive_restore_extract_byte_for_byte(glacier_day, tmp_path, reliability):
    s3, env, src, dst, out, objects, archive = glacier_day
    # Before the restore, reading names the command that helps.
    for args in (("cat", archive, f"{PREFIX}00/app-00001.log"), ("verify", archive),
                 ("extract", archive, "--to-dir", str(tmp_path / "early"))):
        proc = run_cli(env, *args, check=False)
        assert proc.returncode == 2 and f"s3arch restore {archive}" in proc.stderr.decode(), proc.stderr
    first = run_json(env, "restore", archive, "--tier", "Bulk", "--days", "2", "--wait", "--poll-interval", "0.1")
    assert first["state"] == "restored" and first["requested"] == "requested" and first["expiry"]
    again = run_json(env, "restore", archive)  # idempotent: moto answers 200 the second time
    assert again["state"] == "restored" and "already restored" in again["requested"]
    assert s3.head_object(Bucket=dst, Key=f"vault/{src}/{PREFIX.rstrip('/')}.manifest.jsonl.gz").get(
        "StorageClass", "STANDARD") == "STANDARD"  # only the archive is restored, never the manifest

    to_s3 = run_json(env, "extract", archive, "--to", f"s3://{out}/back/")
    assert to_s3["objects"] == len(objects)
    got = {k: s3.get_object(Bucket=out, Key=k)["Body"].read() for k in keys_in(s3, out)}
    assert got == {f"back/{k[len(PREFIX):]}": v for k, v in objects.items()}
    to_dir = run_json(env, "extract", archive, "--to-dir", str(tmp_path / "day"))
    assert to_dir["objects"] == len(objects)
    assert read_tree(tmp_path / "day") == {k[len(PREFIX):]: v for k, v in objects.items()}
    # The same extract again finds everything in place with the same content.
    rerun = run_json(env, "extract", archive, "--to", f"s3://{out}/back/")
    assert rerun["objects"] == 0 and rerun["skipped_same"] == len(objects)
    run_cli(env, "verify", archive)
    reliability.record("GLACIER archive read before its restore", "cat, verify, extract",
                       "exit 2 naming `s3arch restore ARCHIVE --wait`; after it, byte for byte")


def test_extract_to_the_original_location_and_conflicts_need_overwrite(glacier_day):
    s3, env, src, dst, out, objects, archive = glacier_day
    run_json(env, "restore", archive, "--wait", "--poll-interval", "0.1")
    deleted = sorted(objects)[:5]
    for key in deleted:
        s3.delete_object(Bucket=src, Key=key)
    changed = sorted(objects)[7]
    s3.put_object(Bucket=src, Key=changed, Body=b"someone wrote this later")
    proc = run_cli(env, "extract", archive, "--to", f"s3://{src}/", "--original-keys", "--json", check=False)
    result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert proc.returncode == 2 and result["error"] == "DestinationConflict" and "--overwrite" in result["message"]
    assert s3.get_object(Bucket=src, Key=changed)["Body"].read() == b"someone wrote this later"
    for key in deleted:  # the missing ones came back
        assert s3.get_object(Bucket=src, Key=key)["Body"].read() == objects[key]
    run_json(env, "extract", archive, "--to", f"s3://{src}/", "--original-keys", "--overwrite")
    assert s3.get_object(Bucket=src, Key=changed)["Body"].read() == objects[changed]


def one_object_archive(moto_server, cli_env, storage_class) -> tuple[dict, str]:
    """(CLI env, archive URL) of a one-object day archived into ``storage_class`` on moto."""
    s3 = moto_server.client()
    src, dst = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket)
    seed(s3, src, {f"{PREFIX}a.log": b"a"})
    env = moto_env(moto_server, cli_env)
    archive_cli(env, src, dst, storage_class)
    return env, f"s3://{dst}/vault/{src}/{PREFIX.rstrip('/')}.tar.gz"


def test_deep_archive_has_no_expedited_tier_unless_a_fallback_is_given(moto_server, cli_env):
    env, archive = one_object_archive(moto_server, cli_env, "DEEP_ARCHIVE")
    proc = run_cli(env, "restore", archive, "--tier", "Expedited", check=False)
    assert proc.returncode == 2 and "no Expedited tier" in proc.stderr.decode()
    state = run_json(env, "restore", archive, "--tier", "Expedited", "--fallback-tier", "Bulk")
    assert state["tier"] == "Bulk" and state["requested"] == "requested"


def test_standard_archive_needs_no_restore_and_says_so(s3, buckets, cli_env):
    src, dst = buckets
    seed(s3, src, {f"{PREFIX}a.log": b"a"})
    archive_cli(cli_env, src, dst, "STANDARD")
    state = run_json(cli_env, "restore", f"s3://{dst}/vault/{src}/{PREFIX.rstrip('/')}.tar.gz")
    assert state["state"] == "not-needed" and state["readable"] and state["requested"] is None


def test_selective_extract_of_three_keys_reads_only_their_ranges(minio, s3, buckets, cli_env, tmp_path,
                                                                 reliability, proxy):
    src, dst = buckets
    objects = day_objects(4000, seed_value=2)
    objects.update({k: v + os.urandom(1500).hex().encode() for k, v in objects.items() if k.endswith(".log")})
    seed(s3, src, objects)
    archive_cli(cli_env, src, dst, "STANDARD")
    archive_key = f"vault/{src}/{PREFIX.rstrip('/')}.tar.gz"
    size = s3.head_object(Bucket=dst, Key=archive_key)["ContentLength"]
    wanted = [f"{PREFIX}00/app-00003.log", f"{PREFIX}17/app-01703.log", f"{PREFIX}39/app-03999.log"]
    archive_gets = proxy.add(Fault("status", rate=0.0, match=lambda r: r.method == "GET" and
                                   r.key == f"{dst}/{archive_key}"))
    result = run_json(cli_env, "--endpoint-url", proxy.endpoint_url, "extract", f"s3://{dst}/{archive_key}",
                      "--to-dir", str(tmp_path / "three"), "--keys", *wanted)
    assert read_tree(tmp_path / "three") == {k[len(PREFIX):]: objects[k] for k in wanted}
    assert archive_gets.seen == result["gets"] == 3
    listed = run_cli(cli_env, "ls", f"s3://{dst}/{archive_key}", "--json").stdout.decode().splitlines()
    ranges = [json.loads(line)["range"] for line in listed if json.loads(line)["key"] in wanted]
    assert result["bytes_fetched"] == sum(end - start for start, end in ranges)  # their ranges, nothing else
    assert result["bytes_fetched"] < size / 10, f"read {result['bytes_fetched']} of {size} bytes"
    reliability.record("selective extract of 3 keys from an archive of 4,002", f"archive {size >> 20} MiB",
                       f"3 ranged GETs, {result['bytes_fetched'] >> 10} KiB read")


def test_a_key_not_in_the_archive_fails_clearly_and_writes_nothing(s3, buckets, cli_env, tmp_path):
    src, dst = buckets
    seed(s3, src, {f"{PREFIX}a.log": b"a", f"{PREFIX}b.log": b"b"})
    archive_cli(cli_env, src, dst, "STANDARD")
    proc = run_cli(cli_env, "extract", f"s3://{dst}/vault/{src}/{PREFIX.rstrip('/')}.tar.gz", "--to-dir",
                   str(tmp_path / "x"), "--keys", f"{PREFIX}a.log", f"{PREFIX}nope.log", check=False)
    assert proc.returncode == 2 and "nope.log" in proc.stderr.decode() and "nothing was extracted" in proc.stderr.decode()
    assert not (tmp_path / "x").exists() or read_tree(tmp_path / "x") == {}


def test_hostile_member_names_and_planted_symlinks_cannot_escape_the_target(moto_server, cli_env, tmp_path,
                                                                          reliability):
    s3 = moto_server.client()
    src, dst = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket)
    long_name = "n" * 300 + ".log"
    hostile = {"h/../../escape.txt": b"dotdot", "h//abs.txt": b"abs", "h/./dot.txt": b"dot",
               "h/link/inside.txt": b"through a symlink", f"h/{long_name}": b"long", "h/ok.txt": b"ok"}
    for key, body in hostile.items():
        put_exact_key(moto_server, src, key, body)
    env = moto_env(moto_server, cli_env)
    run_json(env, "archive", f"s3://{src}/h/", f"s3://{dst}/", "--storage-class", "STANDARD")
    target, outside = tmp_path / "target", tmp_path / "outside"
    target.mkdir()
    outside.mkdir()
    (target / "link").symlink_to(outside)  # planted before the run
    proc = run_cli(env, "extract", f"s3://{dst}/{src}/h.tar.gz", "--to-dir", str(target), check=False)
    assert proc.returncode == 2 and "refusing to write through" in proc.stderr.decode()
    assert list(outside.iterdir()) == [] and not (tmp_path / "escape.txt").exists()
    (target / "link").unlink()
    run_json(env, "extract", f"s3://{dst}/{src}/h.tar.gz", "--to-dir", str(target))
    tree = read_tree(target)
    assert tree["%2E%2E/%2E%2E/escape.txt"] == b"dotdot" and tree["%2F/abs.txt"] == b"abs"
    assert tree["%2E/dot.txt"] == b"dot" and tree["link/inside.txt"] == b"through a symlink"
    shortened = [name for name in tree if name.startswith("nnnn")]
    assert len(shortened) == 1 and len(shortened[0].encode()) <= 255 and tree[shortened[0]] == b"long"
    assert all(os.path.realpath(target / name).startswith(str(target)) for name in tree)
    reliability.record("extract of ../, //, ./ keys, a planted symlink, a 304-byte name", "6 keys (moto)",
                       "symlink refused; names escaped; long name shortened; nothing outside the target")


def test_manifest_index_answers_like_a_full_scan_with_two_gets_per_key(s3, buckets, clients):
    from s3arch.format.manifest import RECORDS_PER_CHUNK, ArchiveLayout, chunk_of
    from s3arch.stored.manifests import ManifestWriter, find_records, iter_manifest, read_chunk, read_index

    _, dst = buckets
    layout = ArchiveLayout(dst, "synthetic/day")
    writer = ManifestWriter(clients.store, layout, {"codec": "gzip", "block_size": 1 << 20,
                                                      "archive": {"bucket": dst, "key": "x"}})
    rng = random.Random(4)
    keys = sorted(f"k/{rng.randrange(10**12):012d}/é{i}" for i in range(120_000))
    for i, key in enumerate(keys):
        writer.add_object({"type": "object", "key": key, "size": i, "etag": '"e"', "sha256": "0" * 64,
                           "header_offset": i * 1024, "data_offset": i * 1024 + 512, "block": 0, "range": [0, 1]})
    writer.complete({"objects": len(keys), "archive_etag": '"x"'})
    writer.write_index()
    index = read_index(clients.store, layout)
    assert len(index["chunks"]) == -(-len(keys) // RECORDS_PER_CHUNK)
    scanned = [r["key"] for r in iter_manifest(clients.store, layout) if r["type"] == "object"]
    assert scanned == keys
    # Every key: the chunk the index names holds it (each chunk read once).
    for i in range(len(index["chunks"])):
        for record in read_chunk(clients.store, layout, index, i):
            assert chunk_of(index, record["key"]) == i
    # Lookups cost the index plus one ranged GET of a chunk, whatever the manifest's size.
    gets = []
    clients.control.meta.events.register("before-call.s3.GetObject", lambda **kw: gets.append(1))
    for key in rng.sample(keys, 20) + ["k/zzz-not-there", "a-before-everything"]:
        gets.clear()
        header, found = find_records(clients.store, layout, [key])
        assert (key in found) == (key in set(keys)) and len(gets) <= 2
        assert header["codec"] == "gzip"
    # A manifest written before indexes existed is still searched, by a scan.
    clients.control.delete_object(Bucket=dst, Key=layout.index_key)
    _, found = find_records(clients.store, layout, [keys[77_777]])
    assert found[keys[77_777]]["size"] == 77_777


def test_expedited_unavailable_falls_back_only_if_asked(moto_server, cli_env, start_proxy):
    env, archive = one_object_archive(moto_server, cli_env, "GLACIER")
    proxy = start_proxy(moto_server.endpoint_url)
    busy = proxy.add(Fault("status", status=503, code="GlacierExpeditedRetrievalNotAvailable", count=2,
                           match=lambda r: r.method == "POST" and "restore" in r.query))
    proc = run_cli(env, "--endpoint-url", proxy.endpoint_url, "restore", archive, "--tier", "Expedited",
                   check=False)
    assert proc.returncode == 3 and "--fallback-tier" in proc.stderr.decode()
    state = run_json(env, "--endpoint-url", proxy.endpoint_url, "restore", archive, "--tier", "Expedited",
                     "--fallback-tier", "Standard")
    assert busy.injected == 2 and state["tier"] == "Standard" and state["requested"] == "requested"


def test_an_extract_that_fails_mid_object_leaves_no_upload_or_partial_file_and_the_rerun_completes(
        minio, s3, buckets, cli_env, tmp_path, proxy):
    from helpers import open_uploads

    src, dst = buckets
    out = f"{dst}-out"
    s3.create_bucket(Bucket=out)
    objects = {f"{PREFIX}big-{i}.bin": os.urandom(12 << 20) for i in range(2)}  # multipart when written back
    seed(s3, src, objects)
    archive_cli(cli_env, src, dst, "STANDARD")
    archive = f"s3://{dst}/vault/{src}/{PREFIX.rstrip('/')}.tar.gz"
    # Half the archive's body, then nothing more: each resumed ranged GET is cut at once,
    # so the read gives up (a single cut is resumed and the extract completes).
    def archive_get(r):
        return r.method == "GET" and r.key.endswith(".tar.gz")

    for target in (("--to", f"s3://{out}/back/"), ("--to-dir", str(tmp_path / "d"))):
        proxy.clear()
        proxy.add(Fault("truncate", count=1, match=archive_get))
        proxy.add(Fault("truncate", at=0, match=archive_get))
        proc = run_cli(cli_env, "--endpoint-url", proxy.endpoint_url, "extract", archive, *target,
                       "--original-keys", check=False)
        assert proc.returncode == 3 and "Traceback" not in proc.stderr.decode(), proc.stderr.decode()
    # The cut lands in the middle of the response as the proxy reads it: an object wholly
    # before it may be done (and then it is whole); nothing partial is ever visible.
    assert open_uploads(s3, out) == []
    written = {k.removeprefix("back/"): s3.get_object(Bucket=out, Key=k)["Body"].read() for k in keys_in(s3, out)}
    assert len(written) < len(objects) and all(objects[k] == v for k, v in written.items())
    on_disk = read_tree(tmp_path / "d")  # no partial file under any name
    assert len(on_disk) < len(objects) and all(objects[k] == v for k, v in on_disk.items())
    run_json(cli_env, "extract", archive, "--to", f"s3://{out}/back/", "--original-keys")
    run_json(cli_env, "extract", archive, "--to-dir", str(tmp_path / "d"), "--original-keys")
    assert {k: s3.get_object(Bucket=out, Key=k)["Body"].read() for k in keys_in(s3, out)} == {
        f"back/{k}": v for k, v in objects.items()}
    assert read_tree(tmp_path / "d") == objects
