"""Segment worker processes reach S3 exactly as the process that started them: with the
caller's botocore Config (an Airflow connection's proxies, user agent, FIPS or dual-stack
endpoints, S3 options), not only its credentials, region, endpoint and TLS settings. Against
MinIO through a forwarding HTTP proxy on loopback (tests/faultproxy.py, which forwards the
absolute-URI requests botocore sends to an HTTP proxy) that records every request."""

from __future__ import annotations

import uuid

import pytest

from faultproxy import Fault
from helpers import engine_clients, read_archive, seed

PREFIX = "events/2026/11/21/"


@pytest.fixture
def recording_proxy(proxy):
    proxy.seen = []
    proxy.add(Fault("status", rate=0.0, match=lambda r: proxy.seen.append(r) and False))  # records, never fires
    return proxy


def seeded(s3, src: str) -> dict[str, bytes]:
    objects = {f"{PREFIX}{i:03d}.log": f"line {i}\n".encode() * (i + 1) for i in range(60)}
    seed(s3, src, objects)
    return objects


def assert_workers_went_through(seen: list, src: str, objects: dict, agent: str) -> None:
    """Both segment workers' requests reached the proxy, the control plane's with ``agent``."""
    # Only a worker writes its segment's result, records and kept-back bytes.
    written = {r.key.rsplit("/", 1)[-1] for r in seen if r.method == "PUT" and ".segments/" in r.key}
    assert {f"{k:05d}{suffix}" for k in (0, 1) for suffix in (".json", ".held", ".manifest.jsonl.gz")} <= written, \
        sorted(written)
    heads = [r for r in seen if r.method == "HEAD" and r.key.rstrip("/") == src]
    assert len(heads) >= 3, f"{len(heads)} HeadBucket of the source through the proxy (parent and 2 workers)"
    # Only the workers GET the source objects (the data plane): every one through the proxy.
    gets = [r for r in seen if r.method == "GET" and r.key.startswith(f"{src}/{PREFIX}")]
    assert {r.key for r in gets} == {f"{src}/{key}" for key in objects}
    # The control plane (boto3) sends the configured user agent on every request; the data
    # plane's GETs are not boto3's and are left out here.
    without = sorted({f"{r.method} {r.key} {r.headers.get('user-agent')}" for r in seen
                      if r not in gets and agent not in r.headers.get("user-agent", "")})
    assert without == [], f"requests through the proxy without the configured user agent: {without[:5]}"


def test_segment_workers_send_through_the_callers_proxy_with_its_user_agent(minio, s3, buckets, recording_proxy):
    from botocore.config import Config

    from s3arch.archive import archive_prefix
    from s3arch.core.config import ArchiveSpec, S3Url

    src, dst = buckets
    objects = seeded(s3, src)
    agent = f"s3arch-test/{uuid.uuid4().hex[:10]}"
    clients = engine_clients(minio, botocore_config=Config(proxies={"http": recording_proxy.endpoint_url},
                                                           user_agent_extra=agent))
    spec = ArchiveSpec(S3Url(src, PREFIX), S3Url(dst, ""), storage_class="STANDARD", processes=2,
                       segments=2, segment_min_objects=1)
    result = archive_prefix(spec, clients)
    assert result.segments == 2 and result.objects == len(objects)
    assert read_archive(s3, dst, f"{src}/{PREFIX.rstrip('/')}.tar.gz") == objects
    assert_workers_went_through(recording_proxy.seen, src, objects, agent)


def test_an_archive_operators_botocore_config_reaches_its_worker_processes(minio, s3, buckets, recording_proxy,
                                                                          tmp_path, monkeypatch):
    """The Airflow path: the operator's ``botocore_config`` (as a connection's config_kwargs
    would give it) through the amazon provider's hook to the engine and its two processes."""
    from devtools.airflow_local import airflow_env

    for name, value in airflow_env(tmp_path, minio, tmp_path / "jobs.yaml").items():
        monkeypatch.setenv(name, value)  # the connection s3_archive, as a deployment defines it
    from s3arch_airflow import S3ArchivePrefixOperator

    src, dst = buckets

    objects = seeded(s3, src)
    agent = f"s3arch-operator/{uuid.uuid4().hex[:10]}"
    operator = S3ArchivePrefixOperator(task_id="archive_cfg", source_bucket=src, prefix=PREFIX,
                                       destination=f"s3://{dst}/archive/", aws_conn_id="s3_archive",
                                       options={"storage_class": "STANDARD", "processes": 2,
                                                "segment_min_objects": 1, "memory_budget": "320MiB"},
                                       botocore_config={"proxies": {"http": recording_proxy.endpoint_url},
                                                        "user_agent_extra": agent})

    class TaskInstance:
        def xcom_push(self, key, value):
            pass

    rows = operator.execute({"ti": TaskInstance()})
    assert [(r["status"], r["segments"], r["objects"]) for r in rows] == [("archived", 2, len(objects))]
    assert read_archive(s3, dst, f"archive/{src}/{PREFIX.rstrip('/')}.tar.gz") == objects
    assert_workers_went_through(recording_proxy.seen, src, objects, agent)
