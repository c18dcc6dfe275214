"""One prefix produced as N segments by N processes and assembled into one archive, against
MinIO: seed a prefix, archive it with `--segments N`, and read it back with every reader;
no reader can tell it from the single-pipeline archive of the same prefix."""

from __future__ import annotations

import gzip
import os
import random
import signal
import subprocess
import tarfile
import threading
import zlib

import pytest

from faultproxy import Fault, is_get, wait_until
from helpers import ROOT, keys_in, open_uploads, read_archive, run_cli, run_json, run_segment_workers_inline, seed


pytestmark = pytest.mark.slow  # segmented runs with worker processes, killed and run again


PREFIX = "events/2026/11/21/"


def segmented_prefix() -> dict[str, bytes]:
    """Small logs, a zero-byte object, a folder marker, a non-ASCII key, and an object larger
    than a part: with 7 segments (of 31 to 100 objects) six produce well under 5 MiB."""
    rng = random.Random(21)
    objects = {f"{PREFIX}{i % 12:02d}/event-{i:04d}.log": (f"id={i} ok\n" * rng.randrange(1, 400)).encode()
               for i in range(600)}
    objects[f"{PREFIX}05/event-0300-big.bin"] = rng.randbytes(13 << 20)
    objects[f"{PREFIX}07/empty"] = b""
    objects[f"{PREFIX}08/folder/"] = b""
    objects[f"{PREFIX}09/ünïcødé.log"] = "café\n".encode()
    return objects


@pytest.fixture(scope="module")
def archives(minio):
    """The same prefix archived by one pipeline and as 1, 2 and 7 segments."""
    import uuid

    s3 = minio.client(max_pool_connections=64)
    src, dst = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst)
    objects = segmented_prefix()
    seed(s3, src, objects)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(minio.env(), PYTHONPATH=str(ROOT))
    out = {}
    for n in (0, 1, 2, 7):
        flags = ("--processes", "1") if n == 0 else ("--segments", str(n), "--processes", "2",
                                                     "--segment-min-objects", "1", "--memory-budget", "400MiB")
        result = run_json(env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/n{n}/",
                          "--storage-class", "STANDARD", *flags)
        key = f"n{n}/{src}/{PREFIX.rstrip('/')}.tar.gz"
        out[n] = {"result": result, "key": key,
                  "body": s3.get_object(Bucket=dst, Key=key)["Body"].read()}
    return {"s3": s3, "src": src, "dst": dst, "objects": objects, "env": env, "by_n": out}


@pytest.mark.parametrize("n", [1, 2, 7])
def test_segmented_archive_has_the_same_tar_content_as_one_pipeline(archives, n):
    single, segmented = archives["by_n"][0], archives["by_n"][n]
    assert segmented["result"]["segments"] == n and single["result"]["segments"] == 1
    assert segmented["result"]["objects"] == len(archives["objects"])
    assert gzip.decompress(segmented["body"]) == gzip.decompress(single["body"])


@pytest.mark.parametrize("n", [1, 2, 7])
def test_segmented_archive_reads_byte_for_byte_with_every_reader(archives, n, tmp_path):
    s3, dst, objects = archives["s3"], archives["dst"], archives["objects"]
    files = {k: v for k, v in objects.items() if not k.endswith("/")}  # the folder marker is a directory
    archive = archives["by_n"][n]
    assert read_archive(s3, dst, archive["key"]) == files  # tarfile r|gz
    path = tmp_path / "a.tar.gz"
    path.write_bytes(archive["body"])
    with tarfile.open(path, "r:gz") as tar:
        assert {m.name for m in tar if m.isfile()} == set(files)
        assert f"{PREFIX}08/folder" in {m.name for m in tar if m.isdir()}
    subprocess.run(["gzip", "-t", str(path)], check=True)
    assert subprocess.run(["pigz", "-dc", str(path)], capture_output=True, check=True).stdout == \
        gzip.decompress(archive["body"])
    target = tmp_path / "x"
    target.mkdir()
    subprocess.run(["tar", "-xzf", str(path), "-C", str(target)], check=True)
    for key, body in files.items():
        assert (target / key).read_bytes() == body, key
    # One member of a gzip stream: the trailer's CRC and length cover the whole tar stream.
    assert zlib.decompressobj(31).decompress(archive["body"]) == gzip.decompress(archive["body"])


@pytest.mark.parametrize("n", [2, 7])
def test_segmented_archive_passes_verify_and_cat_returns_sampled_keys(archives, n):
    env, objects = archives["env"], archives["objects"]
    url = f"s3://{archives['dst']}/{archives['by_n'][n]['key']}"
    assert run_cli(env, "verify", url).returncode == 0
    rng = random.Random(n)
    sample = rng.sample(sorted(k for k in objects if not k.endswith("/")), 12) + [
        f"{PREFIX}05/event-0300-big.bin", f"{PREFIX}07/empty"]
    for key in sample:
        assert run_cli(env, "cat", url, key).stdout == objects[key], key


def test_segments_of_one_object_each_an_empty_one_and_one_larger_than_a_part(cli_env, s3, buckets):
    src, dst = buckets
    objects = {f"{PREFIX}a-empty": b"", f"{PREFIX}b-big.bin": random.Random(3).randbytes(7 << 20),
               f"{PREFIX}c.log": b"one line\n"}
    seed(s3, src, objects)
    results = {}
    for n in (1, 3):
        results[n] = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/n{n}/", "--storage-class",
                              "STANDARD", "--segments", str(n), "--segment-min-objects", "1")
    assert results[3]["segments"] == 3 and results[3]["objects"] == 3
    bodies = {n: s3.get_object(Bucket=dst, Key=f"n{n}/{src}/{PREFIX.rstrip('/')}.tar.gz")["Body"].read()
              for n in (1, 3)}
    assert gzip.decompress(bodies[3]) == gzip.decompress(bodies[1])
    assert read_archive(s3, dst, f"n3/{src}/{PREFIX.rstrip('/')}.tar.gz") == objects
    for key, body in objects.items():
        assert run_cli(cli_env, "cat", f"s3://{dst}/n3/{src}/{PREFIX.rstrip('/')}.tar.gz", key).stdout == body
    assert run_cli(cli_env, "verify", f"s3://{dst}/n3/{src}/{PREFIX.rstrip('/')}.tar.gz").returncode == 0
    assert open_uploads(s3, dst) == []


def test_segmented_run_leaves_no_upload_and_no_temporaries(archives):
    s3, dst = archives["s3"], archives["dst"]
    assert open_uploads(s3, dst) == []
    assert [k for k in keys_in(s3, dst) if ".segments/" in k] == []
    for n in (1, 2, 7):
        assert sorted(keys_in(s3, dst, f"n{n}/")) == sorted(
            f"n{n}/{archives['src']}/events/2026/11/{name}" for name in
            ("21.tar.gz", "21.manifest.jsonl.gz", "21.manifest-index.json.gz"))


def _worker_pids(parent: int) -> list[int]:
    """The segment worker processes (spawned interpreters) under ``parent``."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry.name}/stat").read().rsplit(")", 1)[1].split()
            cmdline = open(f"/proc/{entry.name}/cmdline", "rb").read()
        except OSError:
            continue
        if int(stat[1]) == parent and b"multiprocessing" in cmdline and b"spawn_main" in cmdline:
            out.append(int(entry.name))
    return out


def test_killed_segment_is_run_again_alone_and_the_archive_is_whole(minio, s3, buckets, reliability, proxy):
    """Segment 2 of 2 is killed with SIGKILL while its parts are being uploaded; the run
    produces that segment again (and only it) and commits one archive, byte for byte."""
    src, dst = buckets
    rng = random.Random(5)
    first = {f"{PREFIX}a/{i:03d}.log": (f"a{i}\n" * 50).encode() for i in range(200)}
    second = {f"{PREFIX}b/{i:03d}.log": (f"b{i}\n" * 50).encode() for i in range(200)}
    second[f"{PREFIX}b/100-big.bin"] = rng.randbytes(48 << 20)  # parts upload before the stall
    last = f"{PREFIX}b/199.log"
    objects = {**first, **second}
    seed(s3, src, objects)
    stalled = threading.Event()
    first_gets = proxy.add(Fault("status", rate=0.0, match=lambda r: is_get(r) and "/a/" in r.key))
    proxy.add(Fault("stall", seconds=60, count=1, match=lambda r: is_get(r) and r.key.endswith(last),
                    on_inject=lambda r: stalled.set()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(minio.env(), PYTHONPATH=str(ROOT), AWS_ENDPOINT_URL_S3=proxy.endpoint_url)
    cli = subprocess.Popen([__import__("sys").executable, "-m", "s3arch", "archive", f"s3://{src}/{PREFIX}",
                            f"s3://{dst}/", "--storage-class", "STANDARD", "--segments", "2", "--processes", "2",
                            "--segment-min-objects", "1", "--memory-budget", "400MiB", "--json"],
                           env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert wait_until(stalled.is_set, 60), "segment 2 never reached its last object"
        # Segment 1 is done by now; the one worker left is segment 2's, mid-upload.
        assert wait_until(lambda: len(_worker_pids(cli.pid)) == 1, 30)
        uploads = open_uploads(s3, dst)
        assert len(uploads) == 1
        assert wait_until(lambda: s3.list_parts(Bucket=dst, Key=uploads[0]["Key"],
                                                UploadId=uploads[0]["UploadId"]).get("Parts"), 30), \
            "no part of segment 2 was uploaded before the kill"
        os.kill(_worker_pids(cli.pid)[0], signal.SIGKILL)
        stdout, stderr = cli.communicate(timeout=180)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert cli.returncode == 0, stderr.decode()
    result = __import__("json").loads(stdout.decode().strip().splitlines()[-1])
    assert result["segments"] == 2 and result["objects"] == len(objects)
    assert first_gets.seen == len(first)  # segment 1 was not produced again
    archive_key = f"{src}/{PREFIX.rstrip('/')}.tar.gz"
    assert read_archive(s3, dst, archive_key) == objects
    assert open_uploads(s3, dst) == []
    assert [k for k in keys_in(s3, dst) if ".segments/" in k] == []
    reliability.record("segment worker killed (SIGKILL) mid-upload", "2 segments, kill of segment 2's process",
                       "that segment alone produced again; one archive, byte for byte, no upload or temporary left")


def test_processes_beyond_the_memory_budget_run_fewer_at_once_and_say_so(cli_env, s3, buckets):
    src, dst = buckets
    objects = {f"{PREFIX}{i:02d}.log": b"x" * i for i in range(40)}
    seed(s3, src, objects)
    result = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/", "--storage-class", "STANDARD",
                      "--segments", "4", "--processes", "4", "--memory-budget", "300MiB", "--segment-min-objects", "1")
    assert result["segments"] == 4 and result["objects"] == 40
    # 300 MiB: the assembler's 48 MiB and two workers of 48 MiB and a 60 MiB interpreter each.
    assert any("4 segments ran on 2 process(es), not 4: --memory-budget 300MiB" in n for n in result["notes"])
    assert read_archive(s3, dst, f"{src}/{PREFIX.rstrip('/')}.tar.gz") == objects


def test_default_processes_are_half_the_cpus_when_the_s3_server_is_on_loopback(monkeypatch):
    import s3arch.core.config as config

    monkeypatch.setattr(config, "available_cpus", lambda: 8)
    for shared in ("http://127.0.0.1:9000", "http://localhost:9000", "https://[::1]:9443", "http://127.0.0.2/"):
        assert config.default_processes(shared) == 4, shared
    for remote in (None, "https://s3.eu-west-1.amazonaws.com", "http://minio:9000", "http://10.0.0.5:9000"):
        assert config.default_processes(remote) == 8, remote
    monkeypatch.setattr(config, "available_cpus", lambda: 1)
    assert config.default_processes("http://127.0.0.1:9000") == 1


def test_segments_on_a_budget_that_cannot_hold_a_worker_fail_with_exit_2_naming_the_least_budget(cli_env, s3,
                                                                                                  buckets):
    src, dst = buckets
    seed(s3, src, {f"{PREFIX}{i:02d}.log": b"x" * i for i in range(10)})
    proc = run_cli(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/", "--storage-class", "STANDARD",
                   "--segments", "2", "--memory-budget", "128MiB", "--segment-min-objects", "1", check=False)
    assert proc.returncode == 2, proc.stderr
    stderr = proc.stderr.decode()
    assert "--memory-budget 128MiB cannot hold a segment's worker process" in stderr
    assert "at least 156MiB" in stderr
    assert keys_in(s3, dst) == [] and open_uploads(s3, dst) == []


def test_plan_balances_segments_by_bytes_and_objects_and_covers_every_key(minio, s3, buckets, clients):
    from s3arch.core.config import ArchiveSpec, S3Url
    from s3arch.produce.segments import plan_segments
    from s3arch.format.tarwriter import member_size

    src, dst = buckets
    objects = {f"{PREFIX}{i:04d}": b"x" * (i % 7) * 1000 for i in range(2500)}
    objects[f"{PREFIX}2000-huge"] = b"y" * (8 << 20)
    seed(s3, src, objects)
    spec = ArchiveSpec(S3Url(src, PREFIX), S3Url(dst, ""), processes=3)
    plan = plan_segments(spec, clients.store, "k.tar.gz", 3)
    keys = sorted(objects)
    assert plan.objects == len(keys) and plan.count == 3
    assert plan.ranges[0].start_after is None and plan.ranges[-1].last_key == keys[-1]
    for before, after in zip(plan.ranges, plan.ranges[1:]):
        assert after.start_after == before.last_key and after.tar_start == before.tar_end
        assert before.first_part + before.parts < after.first_part  # a number for the part between
    assert sum(r.objects for r in plan.ranges) == len(keys)
    assert plan.ranges[-1].tar_end == sum(member_size(k, len(v)) for k, v in objects.items())
    assert plan.final_part <= 10_000
    # The huge object weighs like ~56 small ones: the segment holding it has fewer objects.
    weights = [r.bytes + 150_000 * r.objects for r in plan.ranges]
    assert max(weights) < 1.6 * min(weights)


def test_segments_as_separate_tasks_plan_produce_in_any_order_retry_one_and_assemble(minio, s3, buckets, clients,
                                                                                     proxy):
    """The Airflow shape without Airflow: a prepare step, segment steps that could run on any
    worker (here out of order, one failing once and retried alone), an assemble step."""
    from s3arch.archive import archive_segment, assemble_segments, prepare_segments
    from s3arch.core.config import ArchiveSpec, S3Url
    from s3arch.core.errors import AccessDenied, SegmentMissing

    src, dst = buckets
    objects = segmented_prefix()
    seed(s3, src, objects)
    spec = ArchiveSpec(S3Url(src, PREFIX), S3Url(dst, "v/"), storage_class="STANDARD", processes=1)
    planned = prepare_segments(spec, 3, clients)
    assert planned.status == "planned" and planned.segments == 3
    archive_segment(spec, 2, clients)
    with pytest.raises(SegmentMissing, match=r"segment 1/3 .* was not produced.*\[1/3\]"):
        assemble_segments(spec, clients)  # nothing committed, the upload and segment 3 kept
    assert len(open_uploads(s3, dst)) == 1
    from helpers import engine_clients

    # Every write of the segment is refused (its parts, its records, its kept-back bytes).
    failing = proxy.add(Fault("status", status=403, code="AccessDenied", match=lambda r: r.method == "PUT"))
    with pytest.raises(AccessDenied, match="access denied"):
        archive_segment(spec, 0, engine_clients(minio, proxy.endpoint_url))
    assert failing.injected
    archive_segment(spec, 0, clients)  # the retry, alone
    archive_segment(spec, 1, clients)
    assert archive_segment(spec, 5, clients)["objects"] == 0  # a segment task beyond the plan: nothing
    result = assemble_segments(spec, clients)
    assert result.status == "archived" and result.segments == 3 and result.objects == len(objects)
    assert set(result.timings) >= {"plan_s", "slowest_segment_s", "assemble_archive_s", "assemble_manifest_s"}
    files = {k: v for k, v in objects.items() if not k.endswith("/")}
    assert read_archive(s3, dst, f"v/{src}/{PREFIX.rstrip('/')}.tar.gz") == files
    assert [u["Key"] for u in open_uploads(s3, dst)] == [] and [k for k in keys_in(s3, dst) if ".segments/" in k] == []
    assert assemble_segments(spec, clients).status == "skipped"  # a retry after the commit
    assert prepare_segments(spec, 3, clients).status == "skipped"


def test_a_segment_run_again_after_expired_credentials_gets_fresh_ones(monkeypatch):
    """Worker processes get the credentials the session holds when each one starts: a segment
    retried after CredentialsExpired must not get the expired copy again, and ExpiredToken is
    not counted as one of its three attempts (here it ends three starts in a row)."""
    import s3arch.produce.segments.workers as workers
    from s3arch.core.coordinator import StreamCoordinator
    from s3arch.produce.segments import SegmentPlan, SegmentRange

    issued = iter(range(1, 10))
    monkeypatch.setattr(workers, "worker_connection", lambda clients, server: {"token": f"token-{next(issued)}"})
    seen = []

    def worker(spec, connection, layout, plan, k, send):
        seen.append(connection["token"])
        send.send({"error": "CredentialsExpired", "message": "expired"} if len(seen) <= 3 else {"segment": k})
        send.close()

    run_segment_workers_inline(monkeypatch, worker)
    plan = SegmentPlan("run", "upload", "a.tar.gz", 1, 1, 1024, 0,
                       (SegmentRange(0, None, "k", 1, 1, 0, 512, 2, 10),))
    durations = workers.run_workers(None, None, None, plan, 1, StreamCoordinator("the segments"))
    assert list(durations) == [0]
    assert seen == ["token-1", "token-2", "token-3", "token-4"]


def test_segments_read_the_plans_listing_and_archive_exactly_what_it_planned(minio, s3, buckets, clients, proxy):
    """The prefix is listed once per segmented run: segment steps list nothing (they read the
    listing the plan recorded), and a key written into a segment's range after the plan is
    left for the next run instead of failing the segment."""
    from helpers import engine_clients
    from faultproxy import is_list

    from s3arch.archive import archive_segment, assemble_segments, prepare_segments
    from s3arch.core.config import ArchiveSpec, S3Url

    src, dst = buckets
    objects = segmented_prefix()
    seed(s3, src, objects)
    spec = ArchiveSpec(S3Url(src, PREFIX), S3Url(dst, "once/"), storage_class="STANDARD", processes=1)
    assert prepare_segments(spec, 3, clients).segments == 3
    assert [k for k in keys_in(s3, dst) if "/listing/" in k], "the plan recorded no listing"
    late = f"{PREFIX}06/event-late.log"
    s3.put_object(Bucket=src, Key=late, Body=b"written after the plan\n")
    lists = proxy.add(Fault("status", rate=0.0, match=lambda r: is_list(r) and r.key.rstrip("/") == src))
    for k in (2, 0, 1):
        archive_segment(spec, k, engine_clients(minio, proxy.endpoint_url))
    assert lists.seen == 0, f"segments listed the source {lists.seen} times"
    result = assemble_segments(spec, clients)
    assert result.status == "archived" and result.objects == len(objects)
    files = {k: v for k, v in objects.items() if not k.endswith("/")}
    assert read_archive(s3, dst, f"once/{src}/{PREFIX.rstrip('/')}.tar.gz") == files  # without the late key
    assert [k for k in keys_in(s3, dst) if ".segments/" in k] == []
