"""Errors that tell the truth: the failure's class, retryable or not, its exit code and the
command it names are what the user must do."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from faultproxy import Fault, is_list, is_upload_part
from helpers import ROOT, cli_archive_day, day_spec, engine_clients, keys_in, open_uploads, run_cli, seed
from s3arch.archive import archive_prefix
from s3arch.core.errors import ArchiverError, UploadLost


PROXY_SEED = 13  # the conftest proxy's random faults


def test_missing_bucket_whose_name_says_objects_is_a_missing_bucket(cli_env, buckets):
    result = cli_archive_day(cli_env, f"user-objects-{uuid.uuid4().hex[:6]}", buckets[1])
    assert result["error"] == "BucketMissing" and result["retryable"] is False
    assert "bucket does not exist" in result["message"]


def test_upload_aborted_from_outside_is_retryable_not_a_missing_bucket(s3, buckets, proxy, minio):
    src, dst = buckets
    seed(s3, src, {f"day/{i}.bin": __import__("os").urandom(3 << 20) for i in range(8)})

    def abort_it(request):  # a lifecycle rule (or a careless script) strikes mid-upload
        for upload in open_uploads(s3, dst):
            s3.abort_multipart_upload(Bucket=dst, Key=upload["Key"], UploadId=upload["UploadId"])

    proxy.add(Fault("stall", seconds=0.01, after=1, count=1, match=is_upload_part, on_inject=abort_it))
    with pytest.raises(UploadLost) as err:
        archive_prefix(day_spec(src, dst, level=0), engine_clients(minio, proxy.endpoint_url))
    assert err.value.retryable and err.value.exit_code == 3 and "aborted" in str(err.value)
    assert "day.tar.gz" in str(err.value) and keys_in(s3, dst) == []


@pytest.mark.parametrize("status, code, error, retryable, words", [
    (400, "ExpiredToken", "CredentialsExpired", True, "expired"),
    (403, "RequestTimeTooSkewed", "ClockSkewed", False, "clock"),
])
def test_expired_token_is_retryable_and_a_skewed_clock_says_so(s3, buckets, proxy, cli_env, status, code,
                                                                error, retryable, words):
    src, dst = buckets
    seed(s3, src, {"day/a.log": b"a"})
    proxy.add(Fault("status", status=status, code=code, match=is_list))
    proc = run_cli(cli_env, "--endpoint-url", proxy.endpoint_url, "archive", f"s3://{src}/day/",
                   f"s3://{dst}/a/", "--storage-class", "STANDARD", "--json", check=False)
    result = __import__("json").loads(proc.stdout.decode().strip().splitlines()[-1])
    assert result["error"] == error and result["retryable"] is retryable and words in result["message"]
    assert proc.returncode == (3 if retryable else 2)


@pytest.mark.slow
def test_the_cli_exit_code_says_fix_retry_or_empty_as_the_user_sees_it(s3, buckets, day, cli_env):
    """2: change something; 3: try again later; 4: nothing there. Run as a user runs it."""
    import json

    src, dst = buckets
    archive = ("archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD")
    missing = run_cli(cli_env, "archive", f"s3://{src}/day/", f"s3://no-such-{uuid.uuid4().hex[:8]}/a/",
                      "--storage-class", "STANDARD", check=False)
    assert missing.returncode == 2 and b"does not exist" in missing.stderr
    empty = run_cli(cli_env, "archive", f"s3://{src}/nothing-here/", f"s3://{dst}/a/", "--storage-class",
                    "STANDARD", check=False)
    assert empty.returncode == 4
    # A run on another machine holds the prefix (renewed just now): this one must wait.
    lease = {"owner": "x", "host": "another-host", "boot_id": "b", "pid": 1, "pid_start": "1",
             "purpose": "archive", "renewed": "now", "ttl_seconds": 180}
    s3.put_object(Bucket=dst, Key=f"a/{src}/day.lease.json", Body=json.dumps(lease).encode())
    busy = run_cli(cli_env, *archive, check=False)
    assert busy.returncode == 3 and b"lease" in busy.stderr
    s3.delete_object(Bucket=dst, Key=f"a/{src}/day.lease.json")
    assert run_cli(cli_env, *archive).returncode == 0


def test_failed_abort_does_not_hide_the_error_that_caused_it(s3, buckets, proxy, minio):
    src, dst = buckets
    # Random bytes, more than a part: the archive is a multipart upload, not one PUT.
    seed(s3, src, {f"day/{i}.bin": __import__("os").urandom(3 << 20) for i in range(4)})
    proxy.add(Fault("status", status=500, match=is_upload_part))
    proxy.add(Fault("status", status=403, code="AccessDenied",
                    match=lambda r: r.method == "DELETE" and "uploadId" in r.query))
    with pytest.raises(ArchiverError) as err:
        archive_prefix(day_spec(src, dst, level=0), engine_clients(minio, proxy.endpoint_url, max_attempts=2))
    assert "upload part" in str(err.value) and err.value.retryable
    assert any("cleanup also failed" in note and "abort" in note for note in err.value.__notes__)


def test_every_command_a_message_names_exists():
    from s3arch.cli import _parser

    commands = set(_parser()._subparsers._group_actions[0].choices)
    named = set()
    for path in Path(ROOT, "tasks").rglob("*.py"):
        named |= set(re.findall(r"s3arch ([a-z][a-z-]+)", path.read_text()))
    named -= {"archive"} if "archive" in commands else set()
    assert named <= commands | {"manifest"}, f"messages name commands that do not exist: {named - commands}"
