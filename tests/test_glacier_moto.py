"""Glacier storage classes, which MinIO rejects, against moto server."""

from __future__ import annotations

import uuid

import boto3
import pytest

from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.io.s3 import S3Clients

from helpers import seed


@pytest.mark.parametrize("storage_class", ["GLACIER", "DEEP_ARCHIVE"])
def test_archive_lands_in_glacier_class_and_manifest_stays_standard(moto_server, storage_class):
    s3 = moto_server.client(max_pool_connections=32)
    src, dst = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst)
    seed(s3, src, {f"logs/2026/11/21/{i}.log": f"line {i}\n".encode() * 20 for i in range(200)})
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                            region_name="us-east-1")
    clients = S3Clients.from_session(session, moto_server.endpoint_url)
    spec = ArchiveSpec(S3Url(src, "logs/2026/11/21/"), S3Url(dst, "arch/"), storage_class=storage_class)
    result = archive_prefix(spec, clients)
    assert result.status == "archived" and result.objects == 200
    archive = s3.head_object(Bucket=dst, Key=f"arch/{src}/logs/2026/11/21.tar.gz")
    manifest = s3.head_object(Bucket=dst, Key=f"arch/{src}/logs/2026/11/21.manifest.jsonl.gz")
    assert archive["StorageClass"] == storage_class
    assert manifest.get("StorageClass", "STANDARD") == "STANDARD"
    assert archive["ContentLength"] == result.bytes_out
