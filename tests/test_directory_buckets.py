"""S3 Express directory buckets (names ending --x-s3) are refused at the bucket check, before
any request, with exit 2 and what to do (issue 31): their listings are not in key order and
have no StartAfter, which ranges, segments and the deletion merge rely on."""

from __future__ import annotations

import time

import boto3
import pytest

from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import BadArgument
from s3arch.io.s3 import S3Clients


def _clients() -> S3Clients:
    # Nothing listens on port 9: a request sent would fail as a connection error, not BadArgument.
    session = boto3.Session(aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1")
    return S3Clients.from_session(session, "http://127.0.0.1:9")


@pytest.mark.parametrize("source, destination", [
    ("logs--use1-az4--x-s3", "vault"), ("logs", "vault--use1-az4--x-s3")])
def test_directory_bucket_refused_at_the_bucket_check_before_any_request(source, destination):
    clients = _clients()
    sent: list[str] = []
    clients.control.meta.events.register("before-send", lambda request, **_: sent.append(request.url))
    started = time.monotonic()
    with pytest.raises(BadArgument) as caught:  # a request sent would be a TransientError after retries
        archive_prefix(ArchiveSpec(S3Url(source, "day/"), S3Url(destination, "a/"), storage_class="STANDARD"),
                       clients)
    print(f"refused in {time.monotonic() - started:.2f} s")
    assert sent == [], f"requests sent before the refusal: {sent}"
    error = caught.value
    assert error.exit_code == 2
    bucket = source if source.endswith("--x-s3") else destination
    assert f"s3://{bucket}" in str(error) and "directory bucket" in str(error)
    assert "general purpose bucket" in str(error)


@pytest.mark.slow
def test_directory_bucket_refused_for_reading_too():
    with pytest.raises(BadArgument, match="directory bucket"):
        _clients().check_bucket("arch--usw2-az1--x-s3", "archive")
