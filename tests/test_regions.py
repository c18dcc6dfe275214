"""Buckets in another region than the one configured (issue 31, "Regions").

The commands run as a user on AWS runs them: no endpoint URL, the region from AWS_REGION, an
egress proxy (tests/region_proxy.py) that answers as S3 does for a bucket elsewhere (301
PermanentRedirect / 400 AuthorizationHeaderMalformed with x-amz-bucket-region) and forwards
the rest to moto server, which has the Glacier semantics restore needs. The archive bucket
lives in eu-west-1 (an extract's target in us-east-1); the client is configured for us-west-2
(a regional endpoint, so a request to the wrong host is answered 301) or us-east-1 (botocore's
global endpoint, which AWS routes to the bucket's region and which answers a wrong signature 400).
"""

from __future__ import annotations

import os
import uuid

import pytest

from helpers import ROOT, read_archive, run_cli, run_json, seed
from region_proxy import RegionProxy


pytestmark = pytest.mark.slow  # a second MinIO in another region, archived and restored


HOME = "eu-west-1"
PREFIX = "logs/2026/11/21/"
OBJECTS = {f"{PREFIX}{i:03}.log": f"line {i}\n".encode() * (i + 1) for i in range(40)}


def _clean_env() -> dict[str, str]:
    """This process's environment without any AWS or proxy setting a developer may have."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith("AWS_") and k.lower() not in ("http_proxy", "https_proxy", "no_proxy", "all_proxy")}


@pytest.fixture
def eu_archive(moto_server, tmp_path):
    """A GLACIER archive of one day, in buckets of eu-west-1 (archived straight on moto), and
    the proxy that plays AWS in front of it: (proxy, s3 client on moto, buckets, archive URL)."""
    s3 = moto_server.client(max_pool_connections=32)
    src, dst, out = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("src", "dst", "out"))
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": HOME})
    s3.create_bucket(Bucket=out)  # an extract's target in a third region: us-east-1
    seed(s3, src, OBJECTS)
    direct = {**_clean_env(), **moto_server.env(), "PYTHONPATH": str(ROOT)}
    run_json(direct, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "GLACIER")
    proxy = RegionProxy(moto_server.endpoint_url, {src: HOME, dst: HOME, out: "us-east-1"}, tmp_path)
    yield proxy, s3, (src, dst, out), f"s3://{dst}/vault/{src}/{PREFIX.rstrip('/')}.tar.gz"
    proxy.stop()


def _as_on_aws(proxy: RegionProxy, tmp_path, region: str) -> dict[str, str]:
    """A CLI environment with static keys, ``region`` configured, no endpoint URL, through ``proxy``."""
    return {**_clean_env(), **proxy.env(), "PYTHONPATH": str(ROOT), "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": region, "AWS_DEFAULT_REGION": region,
            "AWS_CONFIG_FILE": str(tmp_path / "no-config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-creds"),
            "AWS_EC2_METADATA_DISABLED": "true"}


def _redirected(proxy: RegionProxy, method: str) -> bool:
    """A ``method`` request was refused for the region and one to eu-west-1 then passed."""
    seen = [r for r in proxy.requests if r.method == method]
    return any(r.status in (301, 400) for r in seen) and any(r.signed_for == HOME and r.status < 300 for r in seen)


@pytest.mark.parametrize("region", ["us-west-2", "us-east-1"])
def test_restore_of_an_archive_in_another_region_follows_the_bucket(eu_archive, tmp_path, region):
    proxy, s3, (src, dst, _), archive = eu_archive
    state = run_json(_as_on_aws(proxy, tmp_path, region), "restore", archive, "--tier", "Bulk", "--wait",
                     "--poll-interval", "0.1")
    assert state["state"] == "restored", state
    assert s3.head_object(Bucket=dst, Key=f"vault/{src}/{PREFIX.rstrip('/')}.tar.gz").get("Restore")
    assert _redirected(proxy, "POST"), proxy.requests  # RestoreObject itself was redirected, then accepted


def test_extract_verify_and_cat_of_an_archive_in_another_region_follow_the_bucket(eu_archive, tmp_path, reliability):
    proxy, s3, (src, _, out), archive = eu_archive
    env = _as_on_aws(proxy, tmp_path, "us-west-2")
    run_json(env, "restore", archive, "--tier", "Bulk", "--wait", "--poll-interval", "0.1")
    extracted = run_json(env, "extract", archive, "--to", f"s3://{out}/back/")
    assert extracted["objects"] == len(OBJECTS)
    for key, body in OBJECTS.items():
        assert s3.get_object(Bucket=out, Key=f"back/{key[len(PREFIX):]}")["Body"].read() == body
    assert run_cli(env, "verify", archive).returncode == 0
    key = next(iter(OBJECTS))
    assert run_cli(env, "cat", archive, key).stdout == OBJECTS[key]
    assert all(r.signed_for == (HOME if r.bucket != out else "us-east-1")
               for r in proxy.requests if r.status < 300), proxy.requests
    reliability.record("AWS_REGION us-west-2, archive bucket in eu-west-1 (S3's 301 PermanentRedirect / 400 "
                       "AuthorizationHeaderMalformed)", "restore --wait, extract, verify, cat",
                       "each follows the bucket's region; extracted byte for byte")


def test_an_endpoint_pinned_to_another_region_exits_2_naming_the_buckets_region(eu_archive, tmp_path, reliability):
    """An endpoint URL the user set is kept as given, so botocore can only re-sign for the
    bucket's region, and that host answers 301 again: the run says which region to set."""
    proxy, _, _, archive = eu_archive
    env = {**_as_on_aws(proxy, tmp_path, "us-west-2"), "AWS_ENDPOINT_URL_S3": "https://s3.us-west-2.amazonaws.com"}
    for command in (("restore", archive), ("verify", archive)):
        proc = run_cli(env, *command, check=False)
        err = proc.stderr.decode()
        assert proc.returncode == 2, err
        assert HOME in err and "AWS_REGION" in err, err
    reliability.record("endpoint URL of us-west-2, bucket in eu-west-1", "restore, verify",
                       "exit 2 naming eu-west-1 and AWS_REGION")


@pytest.mark.parametrize("head_bucket", ["allowed", "denied"])
def test_the_archive_path_routes_each_bucket_to_its_own_region(eu_archive, tmp_path, monkeypatch, head_bucket):
    """The bucket check (which the data plane's host and signing region come from) finds
    eu-west-1 for a client configured for us-west-2; also where HeadBucket is denied (ListBucket
    narrowed to the prefix) and the listing that proves the bucket usable names no region."""
    import boto3

    from s3arch.io.s3 import S3Clients

    proxy, _, (src, dst, _), _ = eu_archive
    proxy.deny_head_bucket = head_bucket == "denied"
    for name, value in _as_on_aws(proxy, tmp_path, "us-west-2").items():
        monkeypatch.setenv(name, value)
    clients = S3Clients.from_session(boto3.Session())
    for bucket, role in ((src, "source"), (dst, "destination")):
        route = clients.check_bucket(bucket, role, PREFIX if role == "source" else "vault/")
        assert (route.host, route.region) == (f"{bucket}.s3.{HOME}.amazonaws.com", HOME)


def test_restore_trigger_polls_the_archive_in_its_region_as_the_expected_owner(eu_archive, tmp_path, monkeypatch):
    """The Airflow trigger's HEAD polling (on the triggerer) follows the bucket too, and names
    the account that must own it, as every other request of the job does."""
    import asyncio

    from s3arch_airflow.triggers import ArchiveRestoredTrigger

    proxy, _, (src, dst, _), archive = eu_archive
    env = _as_on_aws(proxy, tmp_path, "us-west-2")
    run_json(env, "restore", archive, "--tier", "Bulk", "--wait", "--poll-interval", "0.1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    key = f"vault/{src}/{PREFIX.rstrip('/')}.tar.gz"
    trigger = ArchiveRestoredTrigger(bucket=dst, key=key, aws_conn_id=None, poll_interval=0.1,
                                     expected_owner="123456789012")
    classpath, kwargs = trigger.serialize()
    trigger = ArchiveRestoredTrigger(**kwargs)  # as the triggerer builds it

    async def first_event():
        async for event in trigger.run():
            return event.payload

    proxy.requests.clear()
    assert asyncio.run(first_event())["status"] == "restored"
    heads = [r for r in proxy.requests if r.method == "HEAD"]
    assert heads and all(r.expected_owner == "123456789012" for r in heads), heads
    assert heads[-1].signed_for == HOME and heads[-1].status == 200, heads
