"""Multipart upload of a stream of unknown length, parts in parallel, each with a CRC32C.

The upload is created lazily (an empty stream writes nothing), parts are sized by
``PartSizer`` so 10,000 parts always suffice, and anything short of a verified complete
upload ends in AbortMultipartUpload: no orphaned parts are left to bill.
"""

from __future__ import annotations

import base64
import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from awscrt import checksums

from .errors import IntegrityError
from .s3 import translate

MAX_PARTS = 10_000
MIN_PART = 5 << 20


class PartSizer:
    """Chooses each part's size from what is known when it is cut.

    While the listing is still running the total is unknown, so sizes follow a schedule that
    doubles every 1,000 parts (10,000 parts of it exceed S3's 5 TiB object limit). Once the
    listing has finished, ``total_bound()`` (an upper bound of the bytes still to come, from
    the listed sizes) fixes the size that fits the rest into the parts that remain.
    """

    def __init__(self, min_part: int, total_bound: Callable[[], int | None] = lambda: None):
        self.min_part = max(MIN_PART, min_part)
        self.total_bound = total_bound

    def next_size(self, parts_done: int, bytes_done: int) -> int:
        bound = self.total_bound()
        if bound is None:
            return self.min_part << (parts_done // 1000)
        remaining_parts = MAX_PARTS - 100 - parts_done  # headroom for estimate error
        need = -(-max(0, bound - bytes_done) // max(1, remaining_parts))
        return max(self.min_part, need)


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


class PartUploader:
    """Write a stream into one S3 object by multipart upload.

    ``write`` buffers into the current part and hands full parts to a thread pool; it blocks
    while ``max_inflight`` parts are uploading, which bounds memory to about
    (max_inflight + 1) x part size.
    """

    def __init__(self, control, bucket: str, key: str, *, storage_class: str = "STANDARD",
                 sizer: PartSizer | None = None, max_inflight: int = 4, extra_args: dict | None = None,
                 abort_event: threading.Event | None = None):
        self.control = control
        self.bucket = bucket
        self.key = key
        self.storage_class = storage_class
        self.sizer = sizer or PartSizer(8 << 20)
        self.extra_args = extra_args or {}
        self.upload_id: str | None = None
        self.bytes_written = 0
        self._abort = abort_event or threading.Event()
        self._buf = bytearray()
        self._part_size = self.sizer.next_size(0, 0)
        self._parts: list[Future] = []
        self._slots = threading.Semaphore(max_inflight)
        self._pool = ThreadPoolExecutor(max_inflight, thread_name_prefix="s3arch-upload")
        self._done = False
        self._crc_full = 0

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def write(self, data) -> None:
        self.bytes_written += len(data)
        self._crc_full = checksums.crc32c(data, self._crc_full)
        self._buf += data
        while len(self._buf) >= self._part_size and len(self._parts) < MAX_PARTS - 1:
            with memoryview(self._buf) as view:  # one copy, not slice-then-copy
                part = bytes(view[: self._part_size])
            del self._buf[: self._part_size]
            self._submit(part)
            self._part_size = self.sizer.next_size(len(self._parts), self.bytes_written - len(self._buf))

    def _submit(self, part: bytes) -> None:
        if self.upload_id is None:
            self._create()
        for fut in self._parts:  # surface a failed part early instead of at the end
            if fut.done() and fut.exception():
                raise fut.exception()
        while not self._slots.acquire(timeout=0.2):
            if self._abort.is_set():
                raise InterruptedError("upload aborted")
        number = len(self._parts) + 1
        self._parts.append(self._pool.submit(self._upload_part, number, part))

    def _create(self) -> None:
        try:
            resp = self.control.create_multipart_upload(
                Bucket=self.bucket, Key=self.key, StorageClass=self.storage_class,
                ChecksumAlgorithm="CRC32C", **self.extra_args)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"start upload to {self.url}") from exc
        self.upload_id = resp["UploadId"]

    def _upload_part(self, number: int, data: bytes) -> UploadedPart:
        try:
            if self._abort.is_set():
                raise InterruptedError("upload aborted")
            crc = checksums.crc32c(data)
            b64 = _b64_crc(crc)
            resp = self.control.upload_part(
                Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number,
                Body=data, ChecksumCRC32C=b64, **_sse_customer_args(self.extra_args))
            if resp.get("ChecksumCRC32C") not in (None, b64):
                raise IntegrityError(f"part {number} of {self.url}: S3 stored CRC32C "
                                     f"{resp['ChecksumCRC32C']}, sent {b64}")
            return UploadedPart(number, resp["ETag"], crc, len(data))
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"upload part {number} of {self.url}") from exc
        finally:
            self._slots.release()

    def complete(self) -> UploadResult:
        """Upload what is buffered, complete the upload and check what S3 reports."""
        if self._buf or not self._parts:
            self._submit(bytes(self._buf))
            self._buf.clear()
        parts = [f.result() for f in self._parts]
        try:
            self.control.complete_multipart_upload(
                Bucket=self.bucket, Key=self.key, UploadId=self.upload_id,
                MultipartUpload={"Parts": [
                    {"PartNumber": p.number, "ETag": p.etag,
                     "ChecksumCRC32C": _b64_crc(p.crc32c)}
                    for p in parts]})
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"complete upload of {self.url}") from exc
        self._done = True
        self._pool.shutdown()
        return self._verify(parts)

    def _verify(self, parts: list[UploadedPart]) -> UploadResult:
        composite = _b64_crc(checksums.crc32c(b"".join(struct.pack(">I", p.crc32c) for p in parts)))
        # S3 reports the composite ("-N" suffixed) for multipart uploads; some servers
        # report the full-object CRC instead. Either one proves the bytes.
        accepted = {f"{composite}-{len(parts)}", composite, _b64_crc(self._crc_full)}
        try:
            head = self.control.head_object(Bucket=self.bucket, Key=self.key, ChecksumMode="ENABLED")
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"check uploaded object {self.url}") from exc
        size = sum(p.size for p in parts)
        if head["ContentLength"] != size:
            raise IntegrityError(f"{self.url}: S3 holds {head['ContentLength']} bytes, "
                                 f"{size} were written")
        reported = head.get("ChecksumCRC32C")
        if reported is not None and reported not in accepted:
            raise IntegrityError(f"{self.url}: S3 reports CRC32C {reported}, "
                                 f"expected one of {sorted(accepted)}")
        return UploadResult(self.key, size, len(parts), reported or "", head["ETag"])

    def abort(self) -> None:
        """Give up: stop pending parts and abort the upload. Safe to call more than once."""
        if self._done:
            return
        self._done = True
        self._abort.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self.upload_id:
            abort_upload(self.control, self.bucket, self.key, self.upload_id)


def _b64_crc(crc: int) -> str:
    return base64.b64encode(struct.pack(">I", crc)).decode()


def _sse_customer_args(extra: dict) -> dict:
    return {k: v for k, v in extra.items() if k.startswith("SSECustomer")}


def abort_upload(control, bucket: str, key: str, upload_id: str) -> None:
    try:
        control.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
    except control.exceptions.NoSuchUpload:
        pass


def abort_stale_uploads(control, bucket: str, key: str) -> int:
    """Abort multipart uploads a killed earlier run left for exactly this key."""
    aborted = 0
    try:
        paginator = control.get_paginator("list_multipart_uploads")
        for page in paginator.paginate(Bucket=bucket, Prefix=key):
            for upload in page.get("Uploads", []):
                if upload["Key"] == key:
                    abort_upload(control, bucket, key, upload["UploadId"])
                    aborted += 1
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"clean up earlier uploads to s3://{bucket}/{key}") from exc
    return aborted
