"""The requests of a multipart upload, through the store (tasks/io/store.py): create, complete
(conditional, recognised as this run's own after a lost answer, then checked by a HEAD),
abort, and the uploads left open for a key. ``PartUploader`` (tasks/io/upload.py) streams the
parts in between.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass
from typing import Any

from awscrt import checksums

from s3arch.core.errors import IntegrityError
from s3arch.io.own_writes import Written
from s3arch.io.store import Store


@dataclass(slots=True)
class UploadedPart:
    number: int
    etag: str
    crc32c: int
    size: int


@dataclass
class UploadResult:
    key: str
    size: int
    parts: int
    checksum_crc32c: str  # as S3 reports it: base64 of the composite, "-N" suffix
    etag: str


def b64_crc(crc: int) -> str:
    """A CRC32C as S3 writes it in ``x-amz-checksum-crc32c``."""
    return base64.b64encode(struct.pack(">I", crc)).decode()


def sse_customer_args(extra: dict) -> tuple[tuple[str, str], ...]:
    """The SSE-C arguments among a write's ``extra``: what every later request on the object needs."""
    return tuple((k, v) for k, v in extra.items() if k.startswith("SSECustomer"))


def as_args(pairs: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """``sse_customer_args`` as a request's keyword arguments."""
    return dict(pairs)


def condition_args(if_none_match: bool, if_match: str | None) -> dict:
    return {"IfNoneMatch": "*"} if if_none_match else {"IfMatch": if_match} if if_match else {}


def create_upload(store: Store, bucket: str, key: str, *, storage_class: str, extra_args: dict) -> str:
    """CreateMultipartUpload with a CRC32C per part; the upload id."""
    return store.call("create_multipart_upload", f"start upload to s3://{bucket}/{key}", "upload",
                      Bucket=bucket, Key=key, StorageClass=storage_class, ChecksumAlgorithm="CRC32C",
                      **extra_args)["UploadId"]


def complete_upload(store: Store, bucket: str, key: str, upload_id: str, parts: list[UploadedPart], *,
                    if_none_match: bool = False, if_match: str | None = None, extra_args: dict | None = None,
                    full_crc32c: int | None = None) -> UploadResult:
    """CompleteMultipartUpload with exactly ``parts`` (in order; parts not listed are dropped
    by S3), conditional as asked, then check S3's size and CRC32C against the parts. A
    completion S3 applied but whose answer was lost is answered, when resent, as if another
    writer had been first (412, or NoSuchUpload): the store recognises an object with this
    upload's size and checksum as its own."""
    composite = b64_crc(checksums.crc32c(b"".join(struct.pack(">I", p.crc32c) for p in parts)))
    # S3 reports the composite ("-N" suffixed) of a multipart upload, some servers the whole object's: either proves it.
    accepted = {f"{composite}-{len(parts)}", composite, *([b64_crc(full_crc32c)] if full_crc32c is not None else [])}
    written = Written(sum(p.size for p in parts), frozenset(accepted), sse_customer=sse_customer_args(extra_args or {}))
    store.write("complete_multipart_upload", f"complete upload of s3://{bucket}/{key}", "commit", written,
               Bucket=bucket, Key=key, UploadId=upload_id,
               MultipartUpload={"Parts": [{"PartNumber": p.number, "ETag": p.etag, "ChecksumCRC32C": b64_crc(p.crc32c)}
                                          for p in parts]}, **condition_args(if_none_match, if_match))
    return check_stored(store, bucket, key, len(parts), written)


def check_stored(store: Store, bucket: str, key: str, parts: int, written: Written) -> UploadResult:
    """HEAD the completed object: its size and CRC32C (where S3 reports one) must be ``written``'s."""
    url = f"s3://{bucket}/{key}"
    head = store.call("head_object", f"check uploaded object {url}", Bucket=bucket, Key=key, ChecksumMode="ENABLED",
                      **as_args(written.sse_customer))
    if head["ContentLength"] != written.size:
        raise IntegrityError(f"{url}: S3 holds {head['ContentLength']} bytes, {written.size} were written")
    reported = head.get("ChecksumCRC32C")
    if reported is not None and reported not in written.crc32c:
        raise IntegrityError(f"{url}: S3 reports CRC32C {reported}, expected one of {sorted(written.crc32c)}")
    return UploadResult(key, written.size, parts, reported or "", head["ETag"])


def abort_upload(store: Store, bucket: str, key: str, upload_id: str, what: str | None = None) -> None:
    """AbortMultipartUpload; an upload gone already (NoSuchUpload) is what aborting wanted."""
    store.maybe("abort_multipart_upload", what or f"abort the upload to s3://{bucket}/{key}", "upload",
                Bucket=bucket, Key=key, UploadId=upload_id)


def open_uploads(store: Store, bucket: str, key: str) -> list[str]:
    """Upload ids of the multipart uploads open for exactly this key."""
    return [u["UploadId"]
            for page in store.pages("list_multipart_uploads", f"list earlier uploads to s3://{bucket}/{key}",
                                    Bucket=bucket, Prefix=key)
            for u in page.get("Uploads", []) if u["Key"] == key]


def abort_uploads(store: Store, bucket: str, uploads: list[tuple[str, str]]) -> int:
    """Abort these (key, upload id) uploads; how many."""
    for key, upload_id in uploads:
        abort_upload(store, bucket, key, upload_id, f"abort an earlier upload to s3://{bucket}/{key}")
    return len(uploads)

