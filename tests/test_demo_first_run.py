"""`make demo` on a fresh clone: MinIO builds in the background (devtools/build_minio.sh) while
the demo runs on moto server (devtools/demo.py, ``start_s3``). What that rests on:

- moto server answers the S3 calls whose semantics the demo shows as S3 does: the conditional
  writes of the lease and the commit (``If-None-Match: *`` and ``If-Match`` on PutObject and
  CompleteMultipartUpload, ``If-Match`` on GET, HEAD and DeleteObject) and ranged GETs;
- one MinIO build at a time: `make test` started while the demo's background build runs waits
  for it and uses its binary, and the binary appears whole or not at all;
- the demo tells a build under way from a finished or a failed one.
"""

from __future__ import annotations

import fcntl
import os
import stat
import subprocess
import time

import botocore.exceptions
import pytest

from devtools import demo, servers
from devtools.servers import ROOT

BUILD = ROOT / "devtools" / "build_minio.sh"


def _status(call) -> str:
    try:
        return str(call()["ResponseMetadata"]["HTTPStatusCode"])
    except botocore.exceptions.ClientError as exc:
        return f"{exc.response['ResponseMetadata']['HTTPStatusCode']}"


def test_moto_answers_the_conditional_writes_and_ranged_gets_the_demo_shows(moto_server):
    s3 = moto_server.client()
    bucket = "demo-semantics"
    s3.create_bucket(Bucket=bucket)
    etag = s3.put_object(Bucket=bucket, Key="k", Body=b"0123456789")["ETag"]
    assert _status(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"x", IfNoneMatch="*")) == "412"
    assert _status(lambda: s3.put_object(Bucket=bucket, Key="new", Body=b"x", IfNoneMatch="*")) == "200"
    assert _status(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"x", IfMatch='"0ther"')) == "412"
    assert _status(lambda: s3.get_object(Bucket=bucket, Key="k", IfMatch='"0ther"')) == "412"
    assert _status(lambda: s3.head_object(Bucket=bucket, Key="k", IfMatch='"0ther"')) == "412"
    assert _status(lambda: s3.delete_object(Bucket=bucket, Key="k", IfMatch='"0ther"')) == "412"
    upload = s3.create_multipart_upload(Bucket=bucket, Key="k")["UploadId"]
    part = s3.upload_part(Bucket=bucket, Key="k", UploadId=upload, PartNumber=1, Body=b"y" * 10)["ETag"]
    parts = {"Parts": [{"ETag": part, "PartNumber": 1}]}
    assert _status(lambda: s3.complete_multipart_upload(Bucket=bucket, Key="k", UploadId=upload,
                                                        MultipartUpload=parts, IfNoneMatch="*")) == "412"
    ranged = s3.get_object(Bucket=bucket, Key="k", Range="bytes=2-4", IfMatch=etag)
    assert (ranged["ResponseMetadata"]["HTTPStatusCode"], ranged["ContentRange"], ranged["Body"].read()) == \
        (206, "bytes 2-4/10", b"234")
    assert _status(lambda: s3.put_object(Bucket=bucket, Key="k", Body=b"z", IfMatch=etag)) == "200"


def _fake_go(directory, seconds: float):
    """A `go` that takes ``seconds`` to 'install' a binary into $GOBIN and counts its builds."""
    go = directory / "go"
    go.write_text(f"""#!/bin/sh
echo build >> "{directory}/builds"
sleep {seconds}
printf 'half' > "$GOBIN/minio"; sleep 0.2; printf ' and whole' >> "$GOBIN/minio"; chmod +x "$GOBIN/minio"
""")
    go.chmod(go.stat().st_mode | stat.S_IXUSR)
    return {**os.environ, "PATH": f"{directory}:{os.environ['PATH']}"}


def _held(lock) -> bool:
    try:
        with open(lock, "rb") as file:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except FileNotFoundError:
        return False
    except BlockingIOError:
        return True
    return False


def test_one_minio_build_at_a_time_and_the_binary_appears_whole(tmp_path):
    env = _fake_go(tmp_path, 1.5)
    binary = tmp_path / "cache" / "bin" / "minio"
    started = subprocess.run([BUILD, "--background", "v0", binary], env=env, text=True, capture_output=True,
                             check=True, timeout=30)
    assert "in the background" in started.stdout and str(tmp_path / "cache" / "minio-build.log") in started.stdout
    lock = binary.parent / ".minio-build.lock"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not _held(lock):  # the detached build has its lock
        time.sleep(0.05)
    again = subprocess.run([BUILD, "--background", "v0", binary], env=env, text=True, capture_output=True,
                           check=True, timeout=30)
    assert "is building in the background" in again.stdout  # a second demo starts no second build
    assert not binary.exists()
    waited = subprocess.run([BUILD, "v0", binary], env=env, text=True, capture_output=True, check=True,
                            timeout=60)  # what `make minio` (so `make test`) does meanwhile
    assert "waiting for the MinIO build under way" in waited.stdout, waited.stdout
    assert binary.read_text() == "half and whole"
    assert (tmp_path / "builds").read_text() == "build\n"
    done = subprocess.run([BUILD, "--background", "v0", binary], env=env, text=True, capture_output=True,
                          check=True, timeout=30)
    assert done.stdout == "" and (tmp_path / "builds").read_text() == "build\n"


def test_the_demo_tells_a_build_under_way_from_a_finished_or_failed_one(tmp_path, monkeypatch):
    binary = tmp_path / "bin" / "minio"
    binary.parent.mkdir()
    monkeypatch.setattr(servers, "MINIO_BIN", binary)
    monkeypatch.setattr(servers, "MINIO_BUILD_LOCK", binary.parent / ".minio-build.lock")
    assert servers.minio_build_state() == "absent"  # never started
    with open(servers.MINIO_BUILD_LOCK, "wb") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        assert servers.minio_build_state() == "building"
        assert "still building in the background" in demo.minio_note("building")
    assert servers.minio_build_state() == "absent"  # the build stopped without a binary: it failed
    binary.write_bytes(b"")
    assert servers.minio_build_state() == "built"


@pytest.mark.parametrize("state, server", [("building", "moto server"), ("absent", "moto server"),
                                           ("built", "MinIO")])
def test_the_demo_runs_on_minio_once_built_and_on_moto_server_before(state, server, monkeypatch, capsys):
    started = []
    monkeypatch.setattr(demo, "minio_build_state", lambda: state)
    for name, label in (("start_minio", "MinIO"), ("start_moto", "moto server")):
        monkeypatch.setattr(demo, name, lambda label=label: started.append(label) or
                            servers.S3Server(label, "http://127.0.0.1:1", "k", "s"))
    assert demo.start_s3().name == server and started == [server]
    said = capsys.readouterr().out
    if server == "moto server":
        assert "conditional writes" in said and "ranged GETs" in said
        assert ("still building in the background" in said) == (state == "building")
        assert str(servers.MINIO_BUILD_LOG.relative_to(ROOT)) in said
