"""HTTPS with its own CA (issue 31): MinIO serving a certificate from a CA made here.
AWS_CA_BUNDLE is honoured by both planes (botocore's control plane and the CRT data plane):
archive, verify and extract pass. Without it the certificate does not verify, and that is
permanent: exit 2 within seconds, naming the endpoint and AWS_CA_BUNDLE, not retried."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

from helpers import ROOT, make_ca_and_certificate, run_cli, run_json, seed


pytestmark = pytest.mark.slow  # a MinIO serving HTTPS with its own CA, every command over it


def _make_ca_and_server_cert(directory: Path) -> Path:
    """A CA, and a certificate for 127.0.0.1/localhost it signed, where MinIO's --certs-dir
    wants them (public.crt, private.key). Returns the CA's PEM file."""
    certs = directory / "certs"
    certs.mkdir()
    ca_file, cert_file, key_file = make_ca_and_certificate(directory, ["127.0.0.1", "localhost"])
    cert_file.rename(certs / "public.crt")
    key_file.rename(certs / "private.key")
    return ca_file


@pytest.fixture(scope="session")
def minio_tls(tmp_path_factory):
    """One MinIO over HTTPS with its own CA for the session: (server, CA file)."""
    from devtools.servers import start_minio

    directory = tmp_path_factory.mktemp("tls")
    ca_file = _make_ca_and_server_cert(directory)
    server = start_minio(certs_dir=directory / "certs")
    yield server, ca_file
    server.stop()


@pytest.fixture
def tls_day(minio_tls):
    server, ca_file = minio_tls
    s3 = boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id=server.access_key,
                      aws_secret_access_key=server.secret_key, region_name=server.region, verify=str(ca_file),
                      config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"tls-src-{suffix}", f"tls-dst-{suffix}"
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket)
    objects = {f"day/{i:03d}.log": b"line %d\n" % i * (20 + i) for i in range(120)}
    objects["day/big.bin"] = os.urandom(3 << 20)  # fetched as ranged pieces
    seed(s3, src, objects)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SSL_CERT", "REQUESTS_CA"))}
    env.update(server.env())
    env["PYTHONPATH"] = str(ROOT)
    return env, str(ca_file), src, dst, objects


def test_archive_verify_extract_to_dir_and_to_s3_over_https_with_aws_ca_bundle(tls_day, tmp_path):
    env, ca_file, src, dst, objects = tls_day
    env = {**env, "AWS_CA_BUNDLE": ca_file}
    assert env["AWS_ENDPOINT_URL_S3"].startswith("https://")
    started = time.monotonic()
    result = run_json(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD")
    assert result["status"] == "archived" and result["objects"] == len(objects)
    assert run_json(env, "verify", result["manifest"])["objects"] == len(objects)
    run_cli(env, "extract", result["manifest"], "--to-dir", str(tmp_path / "out"))
    assert {str(p.relative_to(tmp_path / "out")): p.read_bytes()
            for p in (tmp_path / "out").rglob("*") if p.is_file()} == {k.removeprefix("day/"): v
                                                                       for k, v in objects.items()}
    # Back to S3: the small objects' PUTs go over the plain connections' TLS, with the same bundle.
    back = run_json(env, "extract", result["manifest"], "--to", f"s3://{dst}/back/")
    assert back["objects"] == len(objects)
    s3 = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL_S3"], verify=ca_file, region_name="us-east-1",
                      aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])
    assert {k: s3.get_object(Bucket=dst, Key=f"back/{k.removeprefix('day/')}")["Body"].read()
            for k in objects} == objects
    print(f"archive, verify, extract over HTTPS: {time.monotonic() - started:.1f} s")


@pytest.mark.parametrize("command", ["archive", "verify", "extract"])
def test_untrusted_certificate_is_exit_2_at_once_naming_aws_ca_bundle(tls_day, tmp_path, command):
    env, _, src, dst, _ = tls_day
    manifest = f"s3://{dst}/a/{src}/day.manifest.jsonl.gz"
    args = {"archive": ("archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD"),
            "verify": ("verify", manifest),
            "extract": ("extract", manifest, "--to-dir", str(tmp_path / "out"))}[command]
    started = time.monotonic()
    proc = run_cli(env, *args, check=False)
    seconds = time.monotonic() - started
    message = proc.stderr.decode()
    print(f"{command} without AWS_CA_BUNDLE: exit {proc.returncode} in {seconds:.1f} s: "
          f"{message.strip().splitlines()[-1] if message.strip() else ''}")
    assert proc.returncode == 2, message
    assert "AWS_CA_BUNDLE" in message and "127.0.0.1" in message and "Traceback" not in message
    assert seconds < 10, "a certificate that does not verify is not retried"


@pytest.mark.parametrize("where", ["AWS_CA_BUNDLE", "profile ca_bundle"])
def test_ca_bundle_reaches_the_crt_plane(minio_tls, monkeypatch, tmp_path, where):
    """AWS_CA_BUNDLE, or the profile's ca_bundle, becomes the clients' ``verify``, from which
    the CRT data plane's TLS options are built (before: only botocore read them)."""
    from s3arch.io.s3 import S3Clients

    server, ca_file = minio_tls
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    if where == "AWS_CA_BUNDLE":
        monkeypatch.setenv("AWS_CA_BUNDLE", str(ca_file))
        session = boto3.Session(aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
                                region_name=server.region)
    else:
        config = tmp_path / "config"
        config.write_text(f"[profile tls]\nregion = {server.region}\nca_bundle = {ca_file}\n"
                          f"aws_access_key_id = {server.access_key}\naws_secret_access_key = {server.secret_key}\n")
        monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
        session = boto3.Session(profile_name="tls")
    clients = S3Clients.from_session(session, server.endpoint_url)
    assert clients.verify == str(ca_file)
    assert clients.control.list_buckets()["ResponseMetadata"]["HTTPStatusCode"] == 200
