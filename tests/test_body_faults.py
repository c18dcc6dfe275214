"""Faults inside a response body, and local file errors, reported as what they are.

A reset in the middle of the manifest's body used to end `verify`, `ls`, `extract` and
`delete-sources` with exit 1 and botocore's traceback ("a bug": Airflow does not retry it);
a source deletion read its manifest through one GET held open for the whole deletion, so a
server that dropped it after minutes killed every re-run the same way; `extract --to-dir`
into a read-only directory ended in a traceback, and a full disk as "try again" (exit 3).
"""

from __future__ import annotations

import os
import resource
import stat
import subprocess
import sys
import time

import pytest

from faultproxy import Fault, is_archive_get, is_manifest_get, is_segment_records_get
from helpers import ROOT, engine_clients, keys_in, open_uploads, read_archive, run_cli, seed
from s3arch.core.config import S3Url
from s3arch.protocol.deletion import delete_archived_sources
from s3arch.core.errors import MalformedRequest, TransientError, WrongRegion
from s3arch.io.classify import error_for, translate
from s3arch.format.manifest import layout_for


PROXY_SEED = 30  # the conftest proxy's random faults


def _archive_day_logs(s3, env: dict, src: str, dst: str) -> tuple[dict, str]:
    """600 small logs under day/ of ``src``, archived (STANDARD) into a/ of ``dst``: (objects, archive URL)."""
    objects = {f"day/{i // 100:02d}/{i:05d}.log": (b"entry %d\n" % i) * (i % 30 + 1) for i in range(600)}
    seed(s3, src, objects)
    run_cli(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD", "--quiet")
    return objects, f"s3://{dst}/a/{src}/day.tar.gz"


@pytest.fixture
def archived(s3, buckets, cli_env):
    """``_archive_day_logs`` in this test's buckets, for a test that changes the source or the archive."""
    return _archive_day_logs(s3, cli_env, *buckets)


@pytest.fixture(scope="module")
def archived_to_read(minio):
    """``_archive_day_logs`` once for the module's tests that only read the archive and its source."""
    import uuid

    s3 = minio.client(max_pool_connections=64)
    src, dst = f"src-{uuid.uuid4().hex[:10]}", f"dst-{uuid.uuid4().hex[:10]}"
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **minio.env(), "PYTHONPATH": str(ROOT)}
    return _archive_day_logs(s3, env, src, dst)


def _run_through(proxy, cli_env, *args: str) -> tuple[subprocess.CompletedProcess, float, str]:
    """``python -m s3arch ARGS`` against the fault proxy: the process, its seconds, its stderr."""
    started = time.monotonic()
    proc = run_cli(cli_env, "--endpoint-url", proxy.endpoint_url, *args, check=False)
    return proc, time.monotonic() - started, proc.stderr.decode(errors="replace")


def _command(name: str, archive: str, tmp_path) -> list[str]:
    return {"verify": ["verify", archive], "ls": ["ls", archive],
            "extract": ["extract", archive, "--to-dir", str(tmp_path / "out")],
            "delete-sources": ["delete-sources", archive]}[name]


READERS = ["verify", "ls", "extract", "delete-sources"]


@pytest.mark.parametrize("command", READERS)
def test_a_reset_inside_the_manifest_body_is_resumed(command, s3, buckets, proxy, cli_env, tmp_path, reliability,
                                                     request):
    """Before: exit 1, `botocore.exceptions.ResponseStreamingError` traceback, for all four."""
    # delete-sources empties its source (this test's buckets); the readers share one archive.
    objects, archive = request.getfixturevalue("archived" if command == "delete-sources" else "archived_to_read")
    fault = proxy.add(Fault("reset", count=1, match=is_manifest_get))
    proc, took, stderr = _run_through(proxy, cli_env, *_command(command, archive, tmp_path))
    print(f"\n{command}: exit {proc.returncode} in {took:.1f} s: {stderr.strip()[-300:]}")
    assert fault.injected == 1
    assert "Traceback" not in stderr
    assert proc.returncode == 0, stderr
    if command == "delete-sources":
        assert keys_in(s3, buckets[0]) == []
    if command == "extract":
        assert sum(1 for _ in (tmp_path / "out").rglob("*.log")) == len(objects)
    reliability.record(f"connection reset in the middle of the manifest's body during `{command}`",
                       "1 reset (half the body sent)", f"read resumed by a ranged GET; exit 0 in {took:.1f} s")


@pytest.mark.parametrize("command", READERS)
@pytest.mark.slow
def test_a_manifest_body_that_never_arrives_exits_3_naming_it(command, s3, buckets, archived, proxy, cli_env,
                                                              tmp_path, reliability):
    """Before: exit 1 with a traceback. After: exit 3 (try again), the manifest named."""
    objects, archive = archived
    fault = proxy.add(Fault("reset", at=0, match=is_manifest_get))  # every GET: head, then RST
    proc, took, stderr = _run_through(proxy, cli_env, *_command(command, archive, tmp_path))
    print(f"\n{command}: exit {proc.returncode} in {took:.1f} s: {stderr.strip()[-300:]}")
    assert fault.injected >= 3
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 3, stderr
    assert ".manifest.jsonl.gz" in stderr and "0 of" in stderr and "try again" in stderr, stderr
    assert len(keys_in(s3, buckets[0])) == len(objects)  # nothing deleted without the manifest
    reliability.record(f"every manifest GET reset right after its head, during `{command}`",
                       f"{fault.injected} resets", f"exit 3 in {took:.1f} s: {stderr.strip()[:90]}...")


def test_a_deletion_whose_manifest_reads_are_reset_deletes_every_source_and_nothing_else(
        s3, buckets, archived, proxy, minio, monkeypatch, reliability):
    """The deletion reads its manifest in windows, each one GET read whole: no connection is
    held while it deletes, and a reset costs one window. Before: exit 1 after deleting part."""
    import s3arch.stored.manifests

    objects, _ = archived
    src, dst = buckets
    s3.put_object(Bucket=src, Key="day/99/late.log", Body=b"written after the archive")  # not archived
    s3.put_object(Bucket=src, Key="day/00/00003.log", Body=b"rewritten after the archive")  # changed
    monkeypatch.setattr(s3arch.stored.manifests, "MANIFEST_WINDOW", 4 << 10)  # many windows for 600 records
    gets = proxy.add(Fault("status", rate=0.0, match=is_manifest_get))  # counts them, never fires
    first = proxy.add(Fault("reset", count=1, match=is_manifest_get))
    later = proxy.add(Fault("reset", count=2, match=lambda r: is_manifest_get(r) and
                            not r.headers.get("range", "bytes=0-").startswith("bytes=0-")))
    clients = engine_clients(minio, proxy.endpoint_url)
    result = delete_archived_sources(clients.store, S3Url(src, "day/"), layout_for(S3Url(src, "day/"),
                                                                                     S3Url(dst, "a/")))
    assert (first.injected, later.injected) == (1, 2)
    assert sorted(keys_in(s3, src)) == ["day/00/00003.log", "day/99/late.log"]
    assert result.deleted == len(objects) - 1 and result.kept_changed == 1
    assert gets.seen > 3  # windows, not one GET held open
    reliability.record("resets inside the manifest's body during a source deletion (window 4 KiB)",
                       "3 resets", f"resumed; {result.deleted} deleted, the rewritten and the unarchived "
                                   f"object kept; {gets.seen - first.injected - later.injected} window GETs")


def _without_root_override() -> list[str]:
    """Root writes into a mode-555 directory anyway: drop that power, as a user lacks it."""
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"] if os.geteuid() == 0 else []


def test_extract_into_a_read_only_directory_exits_2_naming_it(archived_to_read, cli_env, tmp_path, reliability):
    """Before: exit 1, PermissionError traceback."""
    _, archive = archived_to_read
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
    target = locked / "day"
    proc = subprocess.run([*_without_root_override(), sys.executable, "-m", "s3arch", "extract", archive,
                           "--to-dir", str(target)], env=cli_env, cwd=ROOT, capture_output=True, timeout=300)
    stderr = proc.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 2, stderr
    assert str(target) in stderr and "Permission denied" in stderr, stderr
    reliability.record("`extract --to-dir` into a read-only directory", "mode 555, no root override",
                       f"exit 2: {stderr.strip()[:100]}")


def test_extract_onto_a_full_file_system_exits_2_naming_the_file_and_leaves_no_partial_file(
        s3, buckets, cli_env, tmp_path, reliability):
    """A write refused by the file system (EFBIG under `ulimit -f`, as ENOSPC on a full disk).
    Before: exit 3, "try again later", as if S3 had failed."""
    src, dst = buckets
    seed(s3, src, {"day/small.log": b"x" * 1000, "day/big.bin": os.urandom(256 << 10)})
    run_cli(cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD", "--quiet")

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))

    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "s3arch", "extract", f"s3://{dst}/a/{src}/day.tar.gz",
                           "--to-dir", str(out)], env=cli_env, cwd=ROOT, capture_output=True, timeout=300,
                          preexec_fn=limit_file_size)
    stderr = proc.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 2, stderr
    assert str(out / "big.bin") in stderr and "too large" in stderr, stderr
    assert not [p for p in out.iterdir() if "s3arch-partial" in p.name]
    reliability.record("`extract --to-dir` onto a file system that refuses the write (ulimit -f 64 KiB)",
                       "a 256 KiB object", f"exit 2, no partial file: {stderr.strip()[:100]}")


def test_a_400_for_a_request_we_built_wrong_is_a_bug_never_try_again():
    error = error_for("XMinioInvalidResourceName", 400, "Invalid resource name", what="list s3://b/p/")
    assert isinstance(error, MalformedRequest) and error.exit_code == 1 and not error.retryable
    assert "XMinioInvalidResourceName" in str(error) and "bug" in str(error)
    # 400s that are faults on the way stay retryable; known ones keep their meaning.
    assert isinstance(error_for("RequestTimeout", 400, "idle", what="x"), TransientError)
    assert isinstance(error_for("BadDigest", 400, "digest", what="x"), TransientError)
    assert error_for("InvalidArgument", 400, "bad", what="x").exit_code == 2
    assert error_for("ExpiredToken", 400, "expired", what="x").retryable
    from botocore.exceptions import ClientError

    head = ClientError({"Error": {"Code": "400", "Message": "Bad Request"},
                        "ResponseMetadata": {"HTTPStatusCode": 400,
                                             "HTTPHeaders": {"x-amz-bucket-region": "eu-west-3"}}}, "HeadBucket")
    assert isinstance(translate(head, "source bucket s3://b", "bucket"), WrongRegion)


def test_a_body_fault_is_typed_and_anything_else_stays_a_bug():
    import urllib3.exceptions
    from botocore.exceptions import IncompleteReadError, ResponseStreamingError

    from s3arch.io.reads import body_fault

    for exc in (ResponseStreamingError(error="reset"), IncompleteReadError(actual_bytes=5, expected_bytes=9),
                urllib3.exceptions.ProtocolError("Connection broken"), ConnectionResetError(104, "reset")):
        error = body_fault(exc, "read manifest s3://b/k", 5, 9)
        assert isinstance(error, TransientError) and "s3://b/k" in str(error) and "5 of 9" in str(error)
    with pytest.raises(KeyError):
        body_fault(KeyError("ours"), "read", 0, None)


def test_small_reads_and_ranged_streams_resume_byte_for_byte_through_resets(s3, buckets, proxy, minio):
    """The two helpers every body read goes through (the lease, the index, segment temporaries;
    the manifest, the archive): resets are resumed and the bytes joined are the object's."""
    from s3arch.io.reads import read_object, stream_object

    src, _ = buckets
    data = os.urandom(300 << 10)
    s3.put_object(Bucket=src, Key="x/lease.json", Body=b'{"run": "r"}')
    s3.put_object(Bucket=src, Key="x/blob.bin", Body=data)
    control = engine_clients(minio, proxy.endpoint_url).control
    small = proxy.add(Fault("reset", count=2, match=lambda r: r.key.endswith("lease.json")))
    assert read_object(control, src, "x/lease.json", "read the lease")["Body"] == b'{"run": "r"}'
    assert small.injected == 2
    assert read_object(control, src, "x/missing", "read", missing_ok=True) is None
    big = proxy.add(Fault("reset", count=5, match=lambda r: r.key.endswith("blob.bin")))
    assert b"".join(stream_object(control, src, "x/blob.bin", "read blob", start=1000, end=290_000,
                                  chunk=7_000)) == data[1000:290_000]
    assert b"".join(stream_object(control, src, "x/blob.bin", "read blob", window=64 << 10, eager=True)) == data
    assert big.injected == 5
    proxy.add(Fault("reset", at=0, match=lambda r: r.key.endswith("lease.json")))
    with pytest.raises(TransientError, match="read the lease: the connection failed while reading the body"):
        read_object(control, src, "x/lease.json", "read the lease")


# -- resets inside the archive's body, per command ------------------------------------------------
# The manifest tests above aim at the manifest; these aim at the archive's own body (the GET of
# day.tar.gz, whole for verify, ranged for extract and cat), where the member bytes come from.

CAT_KEY = "day/blobs/blob-2.bin"


@pytest.fixture
def archived_blobs(s3, buckets, cli_env):
    """300 small logs and 4 incompressible 300 KiB blobs under day/, archived (STANDARD) into a/:
    an archive body of over a MiB, so a reset at half its body lands inside a member's bytes."""
    src, dst = buckets
    objects = {f"day/{i // 100:02d}/{i:05d}.log": (b"entry %d\n" % i) * (i % 30 + 1) for i in range(300)}
    objects.update({f"day/blobs/blob-{n}.bin": os.urandom(300 << 10) for n in range(4)})
    seed(s3, src, objects)
    run_cli(cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD", "--quiet")
    return objects, f"s3://{dst}/a/{src}/day.tar.gz"


ARCHIVE_READERS = ["verify", "extract --to-dir", "extract --to s3://", "cat"]


def _archive_command(name: str, archive: str, dst: str, tmp_path) -> list[str]:
    return {"verify": ["verify", archive],
            "extract --to-dir": ["extract", archive, "--to-dir", str(tmp_path / "out")],
            "extract --to s3://": ["extract", archive, "--to", f"s3://{dst}/back/"],
            "cat": ["cat", archive, CAT_KEY]}[name]


def _files_under(root) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()} \
        if root.exists() else {}


def _objects_under(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    return {k[len(prefix):]: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys_in(s3, bucket, prefix)}


@pytest.mark.parametrize("command", ARCHIVE_READERS)
@pytest.mark.slow
def test_a_reset_inside_the_archive_body_is_resumed_and_every_byte_is_right(
        command, s3, buckets, archived_blobs, proxy, cli_env, tmp_path, reliability):
    """The first GET of the archive's body is reset after half its bytes; the command resumes it
    with a ranged GET and its output is byte-for-byte the source: verify exits 0 (it checks every
    member's SHA-256 and the archive's size and checksum), extract writes every object as it was,
    cat prints the object."""
    objects, archive = archived_blobs
    src, dst = buckets
    gets = proxy.add(Fault("status", rate=0.0, match=is_archive_get))  # counts them, never fires
    fault = proxy.add(Fault("reset", count=1, match=is_archive_get))
    proc, took, stderr = _run_through(proxy, cli_env, *_archive_command(command, archive, dst, tmp_path))
    print(f"\n{command}: exit {proc.returncode} in {took:.1f} s, {gets.seen} archive GETs: {stderr.strip()[-300:]}")
    assert fault.injected == 1
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 0, stderr
    assert gets.seen >= 2  # the reset GET and the ranged GET that resumed it
    relative = {k[len("day/"):]: v for k, v in objects.items()}
    if command == "extract --to-dir":
        assert _files_under(tmp_path / "out") == relative
    if command == "extract --to s3://":
        assert _objects_under(s3, dst, "back/") == relative
        assert open_uploads(s3, dst) == []
    if command == "cat":
        assert proc.stdout == objects[CAT_KEY]
    reliability.record(f"connection reset in the middle of the archive's body during `{command}`",
                       "1 reset (half the body sent)",
                       f"read resumed by a ranged GET, output byte-equal; exit 0 in {took:.1f} s")


@pytest.mark.parametrize("command", ARCHIVE_READERS)
@pytest.mark.slow
def test_an_archive_body_that_never_arrives_exits_3_naming_the_archive_and_what_was_read(
        command, s3, buckets, archived_blobs, proxy, cli_env, tmp_path, reliability):
    """Every GET of the archive's body is reset right after its head: after its retries the
    command exits 3 (try again) naming the archive and the bytes read (0 of the range), and
    writes nothing: no file, no object, no byte on stdout."""
    objects, archive = archived_blobs
    src, dst = buckets
    fault = proxy.add(Fault("reset", at=0, match=is_archive_get))
    proc, took, stderr = _run_through(proxy, cli_env, *_archive_command(command, archive, dst, tmp_path))
    print(f"\n{command}: exit {proc.returncode} in {took:.1f} s: {stderr.strip()[-400:]}")
    assert fault.injected >= 3
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 3, stderr
    assert archive.removeprefix("s3://") in stderr and "0 of" in stderr and "try again" in stderr, stderr
    assert [p for p in _files_under(tmp_path / "out")] == []
    assert keys_in(s3, dst, "back/") == [] and open_uploads(s3, dst) == []
    assert proc.stdout == b""
    reliability.record(f"every archive-body GET reset right after its head, during `{command}`",
                       f"{fault.injected} resets", f"exit 3 in {took:.1f} s: {stderr.strip()[:90]}...")


@pytest.mark.slow
def test_a_reset_inside_a_segments_records_during_assembly_is_resumed(s3, buckets, proxy, cli_env, reliability):
    """A segmented run (3 segments, 2 processes): the assembly reads each segment's records
    to write the final manifest; the first such read is reset after half its body. The run
    resumes it and exits 0; the archive holds every object byte for byte and verifies."""
    src, dst = buckets
    objects = {f"day/{h:02d}/{i:04d}.log": (b"line %d %d\n" % (h, i)) * (i % 40 + 1)
               for h in range(3) for i in range(400)}
    seed(s3, src, objects)
    gets = proxy.add(Fault("status", rate=0.0, match=is_segment_records_get))  # counts them
    fault = proxy.add(Fault("reset", count=1, match=is_segment_records_get))
    proc, took, stderr = _run_through(proxy, cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/",
                                      "--storage-class", "STANDARD", "--segments", "3", "--processes", "2",
                                      "--segment-min-objects", "1", "--quiet")
    print(f"\nassembly: exit {proc.returncode} in {took:.1f} s, {gets.seen} records GETs: {stderr.strip()[-300:]}")
    assert fault.injected == 1 and gets.seen >= 4  # 3 segments' records, one read twice
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 0, stderr
    archive = f"s3://{dst}/a/{src}/day.tar.gz"
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects
    run_cli(cli_env, "verify", archive)
    assert open_uploads(s3, dst) == []
    reliability.record("connection reset in the middle of a segment's records while the assembly merges them",
                       "1 reset (half the body sent), 3 segments",
                       f"read resumed; exit 0 in {took:.1f} s, archive byte-equal and verified")
