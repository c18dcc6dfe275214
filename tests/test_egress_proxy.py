"""Behind an egress proxy (issue 31): HTTPS_PROXY / HTTP_PROXY, or an Airflow connection's
botocore ``proxies``, carry the source GETs as they carry boto3's calls. The endpoint used is
a port nothing listens on, which only the proxy maps to MinIO: a request that bypassed the
proxy would fail. Before: the CRT S3 client has no proxy option, so GETs went direct and
stalled or failed, exit 3 forever. A GET path that cannot use the proxy is refused (exit 2)
before the first GET."""

from __future__ import annotations

import os
import urllib.parse
import uuid

import boto3
import pytest
from botocore.config import Config

from devtools.servers import free_loopback_port
from helpers import ROOT, read_archive, run_cli, run_json, seed
from logging_proxy import LoggingProxy
from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import BadArgument
from s3arch.io.s3 import S3Clients

from test_tls import minio_tls  # noqa: F401 - the session's HTTPS MinIO with its own CA

_PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY")


def _without_proxies(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.upper() not in _PROXY_VARS}


def _behind(server, scheme: str, host: str = "127.0.0.1", credentials=None) -> tuple[LoggingProxy, str]:
    """A logging proxy that alone reaches ``server``, and the endpoint URL to give clients."""
    real = urllib.parse.urlsplit(server.endpoint_url)
    dead = free_loopback_port()
    proxy = LoggingProxy(resolve={f"{host}:{dead}": f"127.0.0.1:{real.port}"}, credentials=credentials)
    return proxy, f"{scheme}://{host}:{dead}"


def _objects() -> dict[str, bytes]:
    objects = {f"day/{i:03d} é+.log": (b"event %d\n" % i) * (i % 30 + 1) for i in range(150)}
    objects["day/big.bin"] = os.urandom(3 << 20)  # ranged pieces
    return objects


def _source_gets(proxy: LoggingProxy, endpoint: str, bucket: str) -> set[str]:
    """The source keys the proxy forwarded a GET of."""
    prefix = f"{endpoint}/{bucket}/"
    return {urllib.parse.unquote(target[len(prefix):].split("?", 1)[0])
            for method, target, _ in proxy.seen if method == "GET" and target.startswith(prefix)
            and "list-type" not in target}


@pytest.fixture
def behind_http_proxy(minio, s3, buckets):
    """Buckets seeded, and a proxy with Basic authentication in front of MinIO."""
    src, dst = buckets
    objects = _objects()
    seed(s3, src, objects)
    proxy, endpoint = _behind(minio, "http", credentials=("egress", "p@ss word"))
    yield proxy, endpoint, src, dst, objects
    proxy.stop()


@pytest.mark.slow
def test_archive_and_verify_through_http_proxy_from_the_environment(behind_http_proxy, minio, s3, cli_env):
    proxy, endpoint, src, dst, objects = behind_http_proxy
    env = {**_without_proxies(cli_env), "AWS_ENDPOINT_URL_S3": endpoint,
           "HTTP_PROXY": f"http://egress:p%40ss%20word@127.0.0.1:{proxy.port}"}
    result = run_json(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD")
    assert result["status"] == "archived" and result["objects"] == len(objects)
    assert _source_gets(proxy, endpoint, src) == set(objects), "every source GET went through the proxy"
    assert proxy.refused == 0
    assert run_json(env, "verify", result["manifest"])["objects"] == len(objects)
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects


@pytest.mark.slow
def test_segment_workers_fetch_through_the_proxy_too(behind_http_proxy, s3, cli_env):
    """Each --processes worker builds its own data plane: from the same environment."""
    proxy, endpoint, src, dst, objects = behind_http_proxy
    env = {**_without_proxies(cli_env), "AWS_ENDPOINT_URL_S3": endpoint,
           "HTTP_PROXY": f"http://egress:p%40ss%20word@127.0.0.1:{proxy.port}"}
    result = run_json(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                      "--processes", "2", "--segments", "2", "--segment-min-objects", "10")
    assert result["status"] == "archived" and result["objects"] == len(objects) and result["segments"] == 2
    assert _source_gets(proxy, endpoint, src) == set(objects)
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects


def test_archive_through_the_connections_botocore_proxies(behind_http_proxy, minio, s3, monkeypatch):
    """An Airflow connection's ``proxies`` (its botocore Config), with none in the environment."""
    proxy, endpoint, src, dst, objects = behind_http_proxy
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    session = boto3.Session(aws_access_key_id=minio.access_key, aws_secret_access_key=minio.secret_key,
                            region_name=minio.region)
    config = Config(proxies={"http": f"http://egress:p%40ss%20word@127.0.0.1:{proxy.port}"})
    clients = S3Clients.from_session(session, endpoint, botocore_config=config)
    result = archive_prefix(ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD"), clients)
    assert result.status == "archived" and result.objects == len(objects)
    assert _source_gets(proxy, endpoint, src) == set(objects)
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == objects


@pytest.mark.slow
def test_archive_over_https_tunnelled_through_https_proxy(minio_tls):  # noqa: F811
    server, ca_file = minio_tls
    control = boto3.client("s3", endpoint_url=server.endpoint_url, aws_access_key_id=server.access_key,
                           aws_secret_access_key=server.secret_key, region_name=server.region, verify=str(ca_file),
                           config=Config(s3={"addressing_style": "path"}, max_pool_connections=32))
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"proxied-src-{suffix}", f"proxied-dst-{suffix}"
    for bucket in (src, dst):
        control.create_bucket(Bucket=bucket)
    objects = _objects()
    seed(control, src, objects)
    proxy, endpoint = _behind(server, "https", host="localhost")  # the test certificate names localhost
    try:
        env = {k: v for k, v in _without_proxies(os.environ).items() if not k.startswith("AWS_")}
        env.update(server.env())
        env.update({"AWS_ENDPOINT_URL_S3": endpoint, "AWS_CA_BUNDLE": str(ca_file), "PYTHONPATH": str(ROOT),
                    "HTTPS_PROXY": proxy.url})
        result = run_json(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD")
        assert result["status"] == "archived" and result["objects"] == len(objects)
        assert run_json(env, "verify", result["manifest"])["objects"] == len(objects)
        tunnels = {target for method, target, _ in proxy.seen if method == "CONNECT"}
        assert tunnels == {endpoint.removeprefix("https://")}
        assert read_archive(control, dst, f"a/{src}/day.tar.gz") == objects
    finally:
        proxy.stop()


def test_the_crt_get_path_with_a_proxy_is_exit_2_before_the_first_get(behind_http_proxy, cli_env):
    proxy, endpoint, src, dst, _ = behind_http_proxy
    env = {**_without_proxies(cli_env), "AWS_ENDPOINT_URL_S3": endpoint, "S3ARCH_GET_PATH": "crt",
           "HTTP_PROXY": f"http://egress:p%40ss%20word@127.0.0.1:{proxy.port}"}
    proc = run_cli(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD", check=False)
    message = proc.stderr.decode(errors="replace")
    assert proc.returncode == 2, message
    assert "S3ARCH_GET_PATH=crt" in message and f"127.0.0.1:{proxy.port}" in message
    assert "p@ss" not in message and "p%40ss" not in message, "the proxy's password is not printed"
    assert _source_gets(proxy, endpoint, src) == set()


def test_proxies_are_found_as_botocore_finds_them(monkeypatch):
    from s3arch.io.proxies import proxy_for

    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "minio.internal,.vpce.amazonaws.com")
    assert proxy_for(True, "bucket.s3.eu-west-1.amazonaws.com").host == "proxy.internal"
    assert proxy_for(False, "bucket.s3.eu-west-1.amazonaws.com") is None  # HTTP_PROXY is for http://
    assert proxy_for(True, "minio.internal:9000") is None
    assert proxy_for(True, "bucket.vpce.amazonaws.com") is None
    # The connection's proxies win over the environment, as in botocore; an empty dict means none.
    assert proxy_for(True, "s3.amazonaws.com", Config(proxies={"https": "other:8080"})).port == 8080
    assert proxy_for(True, "s3.amazonaws.com", Config(proxies={})) is None
    with pytest.raises(BadArgument) as refused:
        proxy_for(True, "s3.amazonaws.com", Config(proxies={"https": "https://user:secret@tls-proxy:3129"}))
    assert refused.value.exit_code == 2 and "http://" in str(refused.value) and "secret" not in str(refused.value)
