"""Source objects whose storage class needs a restore (GLACIER, DEEP_ARCHIVE) are refused from
the listing, before any GET of them, with exit 2 and what to do; the dry run counts them; the
cost figures bill retrieval for sources in STANDARD_IA, ONEZONE_IA and GLACIER_IR (issue 31)."""

from __future__ import annotations

import time
import uuid

import boto3
import pytest

from faultproxy import Fault, is_get, is_list, is_upload_part
from helpers import keys_in, open_uploads, run_cli, seed
from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.cost import GiB, estimate
from s3arch.core.errors import ArchivedObjectNotReadable
from s3arch.io.listed import parse_listing_page
from s3arch.io.s3 import S3Clients


def _entry(key: str, storage_class: str | None, rest: str = "") -> bytes:
    return (f"<Contents><Key>{key}</Key><LastModified>2026-11-01T00:00:00.000Z</LastModified>"
            f"<ETag>&quot;e&quot;</ETag><Size>5</Size>"
            + (f"<StorageClass>{storage_class}</StorageClass>" if storage_class else "") + rest
            + "</Contents>").encode()


def test_page_parser_keeps_the_storage_class_and_a_restored_copy():
    restored = "<RestoreStatus><IsRestoreInProgress>false</IsRestoreInProgress>" \
               "<RestoreExpiryDate>2026-12-01T00:00:00.000Z</RestoreExpiryDate></RestoreStatus>"
    ongoing = "<RestoreStatus><IsRestoreInProgress>true</IsRestoreInProgress></RestoreStatus>"
    body = b"<ListBucketResult>" + b"".join([
        _entry("a", "STANDARD"), _entry("b", "GLACIER"), _entry("c", "GLACIER", restored),
        _entry("d", "DEEP_ARCHIVE", ongoing), _entry("e", None), _entry("f", "GLACIER_IR")]) + b"</ListBucketResult>"
    listed, _ = parse_listing_page(body)
    assert [o.storage_class for o in listed] == ["STANDARD", "GLACIER", "GLACIER restored", "DEEP_ARCHIVE",
                                                 "STANDARD", "GLACIER_IR"]


def test_cost_bills_retrieval_of_ia_and_glacier_ir_sources():
    plain = estimate("GLACIER", objects=10, bytes_in=3 * GiB, short_of_minimum=0, archive_bytes=GiB)
    assert plain.source_retrieval == 0
    fees = estimate("GLACIER", objects=10, bytes_in=3 * GiB, short_of_minimum=0, archive_bytes=GiB,
                    source_bytes_by_class={"STANDARD_IA": GiB, "ONEZONE_IA": GiB, "GLACIER_IR": GiB,
                                           "INTELLIGENT_TIERING": GiB})
    assert fees.source_retrieval == pytest.approx(0.01 + 0.01 + 0.03)
    assert "retrieval fees" in fees.line()


@pytest.fixture
def moto_buckets(moto_server):
    s3 = moto_server.client(max_pool_connections=32)
    src, dst = f"src-{uuid.uuid4().hex[:8]}", f"dst-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst)
    return s3, src, dst


def _moto_clients(endpoint_url):
    session = boto3.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
    return S3Clients.from_session(session, endpoint_url)


def test_glacier_sources_refused_before_any_get_on_moto(moto_server, moto_buckets, start_proxy):
    s3, src, dst = moto_buckets
    seed(s3, src, {f"day/{i:04d}.log": b"x" * 100 for i in range(1500)})
    for i in (1200, 1300, 1400):  # on the second page: the first page's GETs may start, none of these
        s3.put_object(Bucket=src, Key=f"day/{i:04d}.log", Body=b"x" * 100, StorageClass="GLACIER")
    proxy = start_proxy(moto_server.endpoint_url)
    gets = proxy.add(Fault("header", match=lambda r: is_get(r) and r.key.startswith(f"{src}/day/1")))
    spec = ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD")
    started = time.monotonic()
    with pytest.raises(ArchivedObjectNotReadable) as caught:
        archive_prefix(spec, _moto_clients(proxy.endpoint_url))
    seconds = time.monotonic() - started
    message = str(caught.value)
    assert caught.value.exit_code == 2
    assert "3 source objects" in message and "GLACIER" in message and "day/1200.log" in message
    assert "restore-object" in message and "s3arch restore` restores archives, not sources" in message
    assert gets.seen == 0, "no GET of a GLACIER object (nor of anything listed after it)"
    assert keys_in(s3, dst) == [] and open_uploads(s3, dst) == []
    print(f"refused in {seconds:.2f} s")

    dry = archive_prefix(spec.previewed(), _moto_clients(proxy.endpoint_url))
    assert dry.status == "dry_run" and dry.needs_restore == 3 and dry.objects == 1500
    assert any("3 source objects are in GLACIER" in n and "restore-object" in n for n in dry.notes)
    assert keys_in(s3, dst) == []


def test_standard_ia_sources_archive_with_their_retrieval_fee(moto_server, moto_buckets):
    s3, src, dst = moto_buckets
    for i in range(20):
        s3.put_object(Bucket=src, Key=f"day/{i:02d}.log", Body=b"y" * 1000, StorageClass="STANDARD_IA")
    result = archive_prefix(ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="GLACIER"),
                            _moto_clients(moto_server.endpoint_url))
    assert result.status == "archived" and result.objects == 20
    assert result.cost["source_retrieval"] == pytest.approx(20_000 / GiB * 0.01)


def test_cli_exits_2_on_a_glacier_listing_with_no_source_get(minio, s3, buckets, cli_env, proxy):
    """The fault proxy answers every listing with StorageClass GLACIER, as S3 lists objects a
    lifecycle rule moved: exit 2 with the message, and the proxy sees no GET of a source."""
    src, dst = buckets
    seed(s3, src, {f"day/{i:03d}.log": b"z" * 50 for i in range(30)})
    proxy.add(Fault("rewrite", match=is_list,
                    rewrite=lambda body: body.replace(b"<StorageClass>STANDARD<", b"<StorageClass>GLACIER<")))
    gets = proxy.add(Fault("header", match=lambda r: is_get(r) and r.key.startswith(f"{src}/")))
    parts = proxy.add(Fault("header", match=is_upload_part))
    env = {**cli_env, "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}
    started = time.monotonic()
    proc = run_cli(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                   check=False)
    seconds = time.monotonic() - started
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "30 source objects" in err and "GLACIER" in err and "restore-object" in err, err
    assert gets.seen == 0 and parts.seen == 0
    assert keys_in(s3, dst) == [] and open_uploads(s3, dst) == []
    print(f"exit 2 in {seconds:.2f} s")
