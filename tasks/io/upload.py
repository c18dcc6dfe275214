"""Multipart upload of a stream of unknown length, parts in parallel, each with a CRC32C.

The upload is created lazily (an empty stream writes nothing), parts are sized by
``PartSizer`` so 10,000 parts always suffice, and anything short of a verified complete
upload ends in AbortMultipartUpload: no orphaned parts are left to bill.
"""

from __future__ import annotations

import bisect
import io
import itertools
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from awscrt import checksums

from s3arch.core.coordinator import Stopped, StreamCoordinator
from s3arch.core.errors import ArchiverError, BadArgument, IntegrityError
from s3arch.io.multipart import (UploadedPart, UploadResult, abort_upload, as_args, b64_crc, complete_upload,
                                 condition_args, create_upload, sse_customer_args)
from s3arch.io.own_writes import Written
from s3arch.io.store import Store

MAX_PARTS = 10_000
MIN_PART = 5 << 20


class PartSizer:
    """Chooses each part's size from what is known when it is cut.

    While the listing is still running the total is unknown, so sizes follow a schedule that
    doubles every ``growth_every`` parts (1,000 by default), but never past ``max_part``, the
    largest part the memory plan holds. Once the listing has finished, ``total_bound()`` (an
    upper bound of the bytes still to come, from the listed sizes) fixes the size that fits the
    rest into the parts that remain. A stream that cannot fit 10,000 parts of ``max_part``
    fails as soon as the listing shows it (``check_capacity``), not after terabytes.
    """

    def __init__(self, min_part: int, total_bound: Callable[[], int | None] = lambda: None, *,
                 max_part: int | None = None, growth_every: int = 1000, parts: int = MAX_PARTS):
        self.min_part = max(MIN_PART, min_part)
        self.max_part = max(self.min_part, max_part or (5 << 30))
        self.total_bound = total_bound
        self.growth_every = growth_every
        # Part numbers this stream may use (a segment gets its share of the 10,000), less
        # headroom for the estimate's error (gzip can grow random data).
        self.usable_parts = max(1, parts - max(1, parts // 100))

    @property
    def capacity(self) -> int:
        return self.usable_parts * self.max_part

    def check_capacity(self, bound: int) -> None:
        if bound > self.capacity:
            need = -(-bound // self.usable_parts)
            raise BadArgument(
                f"the prefix needs about {bound / (1 << 30):,.1f} GiB of archive, more than 10,000 "
                f"parts of {self.max_part >> 20} MiB (the largest part this memory budget holds)",
                hint=f"raise --memory-budget to at least {max(64, 4 * -(-need // (1 << 20)))}MiB")

    def next_size(self, parts_done: int, bytes_done: int) -> int:
        bound = self.total_bound()
        if bound is None:
            return min(self.max_part, self.min_part << (parts_done // self.growth_every))
        self.check_capacity(bound)
        remaining_parts = self.usable_parts - parts_done
        need = -(-max(0, bound - bytes_done) // max(1, remaining_parts))
        return min(self.max_part, max(self.min_part, need))


@dataclass(frozen=True)
class SharedUpload:
    """A multipart upload that exists already, which a stream writes a range of part numbers of
    (a segment's) or completes with parts uploaded elsewhere (an assembly's)."""

    upload_id: str
    first_part: int = 1
    max_parts: int = MAX_PARTS
    head_size: int = 0  # bytes at the start of the stream held back (``PartUploader.head``), not uploaded
    owned: bool = True  # False: shared by segments, or kept for a retry of the assembly; never aborted here


class PartUploader:
    """Write a stream into one S3 object by multipart upload.

    ``write`` buffers into the current part and hands full parts to a thread pool. Memory is
    bounded in bytes, whatever the part size grows to: ``write`` blocks while the parts in
    flight would exceed ``memory``, though one part is always let through so the stream
    cannot deadlock. The part being filled (and, while it is cut, its copy) come on top:
    ``upload_memory(memory, max_part)`` is the whole stage.
    """

    def __init__(self, store: Store, bucket: str, key: str, *, storage_class: str = "STANDARD",
                 sizer: PartSizer | None = None, memory: int = 32 << 20, threads: int = 4,
                 extra_args: dict | None = None, coordinator: StreamCoordinator | None = None,
                 shared: SharedUpload | None = None):
        """``shared`` attaches the stream to an upload that already exists, using only its own
        range of part numbers; an uploader that does not own it never aborts it: ``abort`` only
        stops its own parts. Without it the upload is created lazily, on the first full part.

        ``coordinator`` (the stream's) stops the uploader from above: the uploader registers its
        ``abort`` with it as a failure cleanup, reports a failed part, and lists its parts in
        flight."""
        self.store = store
        self.bucket = bucket
        self.key = key
        self.storage_class = storage_class
        self.sizer = sizer or PartSizer(8 << 20)
        self.memory = memory
        self.extra_args = extra_args or {}
        shared = shared or SharedUpload("", owned=True)
        self.upload_id = shared.upload_id or None
        self.first_part = shared.first_part
        self.max_parts = shared.max_parts
        self.bytes_written = 0
        self._coordinator = coordinator
        self._aborted = threading.Event()  # this uploader's own abort
        self._buf: deque[bytes] = deque()
        self._buffered = 0
        self._part_size = self.sizer.next_size(0, 0)
        self._parts: list[Future] = []
        self._inflight = 0
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="s3arch-upload")
        self._done = False
        self._lifecycle = threading.Lock()  # creation against abort
        self._crc_full: int | None = 0  # of every byte written; None once parts come from elsewhere
        self.owns_upload = shared.owned
        self.head = bytearray()
        self._head_size = shared.head_size
        self.tail = b""
        if self._coordinator is not None:
            # Registered with the uploader, before its upload exists: once the cleanups ran, a
            # lazy creation is refused (``_create``), so no upload is ever created unseen.
            self._coordinator.add_failure_cleanup(self.abort)

    def _stopping(self) -> bool:
        return self._aborted.is_set() or (self._coordinator is not None and self._coordinator.is_set())

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.key}"

    def write(self, data: bytes) -> None:
        if len(self.head) < self._head_size:
            take = self._head_size - len(self.head)
            self.head += data[:take]
            data = data[take:]
            if not data:
                return
        self.bytes_written += len(data)
        if self._crc_full is not None:
            self._crc_full = checksums.crc32c(data, self._crc_full)
        self._buf.append(data)
        self._buffered += len(data)
        while self._buffered >= self._part_size:
            if len(self._parts) >= self.max_parts - 1:
                raise BadArgument(f"{self.url} would need more than {self.max_parts:,} parts",
                                  hint="raise --memory-budget so that larger parts fit")
            self._submit(self._cut(self._part_size))
            self._part_size = self.sizer.next_size(len(self._parts), self.bytes_written - self._buffered)

    def _cut(self, size: int) -> "PartBody":
        """The first ``size`` buffered bytes as one part, without copying them: the pieces
        written are handed over as they are (only a piece that straddles the cut is split)."""
        pieces, taken = [], 0
        while taken < size:
            piece = self._buf.popleft()
            if taken + len(piece) > size:
                keep = size - taken
                self._buf.appendleft(piece[keep:])
                piece = piece[:keep]
            pieces.append(piece)
            taken += len(piece)
        self._buffered -= taken
        return PartBody(pieces)

    def _submit(self, part: "PartBody") -> None:
        if self._stopping():
            raise Stopped("upload stopped")
        if self.upload_id is None:
            self._create()
        for fut in self._parts:  # surface a failed part early instead of at the end
            failure = fut.exception() if fut.done() else None
            if failure is not None:
                raise failure
        with self._cond:
            while self._inflight and self._inflight + len(part) > self.memory:
                if self._stopping():
                    raise Stopped("upload stopped")
                self._cond.wait(0.2)
            self._inflight += len(part)
        number = self.first_part + len(self._parts)
        self._parts.append(self._pool.submit(self._upload_part, number, part))

    def _create(self) -> None:
        # Under the lock abort() takes: an upload is either created before an abort (which
        # then aborts it) or refused after it, never created unseen.
        with self._lifecycle:
            if self._done or self._stopping():
                raise Stopped("upload stopped")
            self.upload_id = create_upload(self.store, self.bucket, self.key, storage_class=self.storage_class,
                                           extra_args=self.extra_args)

    def _upload_part(self, number: int, data: "PartBody") -> UploadedPart:
        request = self._coordinator.track(f"UploadPart {number} of {self.url}") if self._coordinator else None
        try:
            if self._stopping():
                raise Stopped("upload stopped")
            return self.put_part(number, data)
        except BaseException as exc:
            if self._coordinator is not None:
                self._coordinator.set_exception(exc)  # the first real failure wins; Stopped is none
            raise
        finally:
            if request is not None:
                self._coordinator.untrack(request)  # type: ignore[union-attr]
            with self._cond:
                self._inflight -= len(data)
                self._cond.notify_all()

    def put_part(self, number: int, data: "PartBody | bytes") -> UploadedPart:
        """Upload one part with this number now, on the caller's thread (the assembler's
        boundary parts); S3 replaces a part uploaded before under the same number."""
        data = data if isinstance(data, PartBody) else PartBody([data])
        crc = data.crc32c()
        b64 = b64_crc(crc)
        resp = self.store.call("upload_part", f"upload part {number} of {self.url}", "upload",
                               Bucket=self.bucket, Key=self.key, UploadId=self.upload_id, PartNumber=number,
                               Body=data, ChecksumCRC32C=b64, **as_args(sse_customer_args(self.extra_args)))
        if resp.get("ChecksumCRC32C") not in (None, b64):
            raise IntegrityError(f"part {number} of {self.url}: S3 stored CRC32C "
                                 f"{resp['ChecksumCRC32C']}, sent {b64}")
        return UploadedPart(number, resp["ETag"], crc, len(data))

    @property
    def single_put(self) -> bool:
        """The whole stream is still buffered, no upload was started, and it is the whole
        object: ``complete`` sends it as one conditional PutObject (one round trip instead of
        create, part, complete and HEAD)."""
        return (self.upload_id is None and not self._parts and self.owns_upload and self.first_part == 1
                and not self._head_size and self._crc_full is not None)

    def finish_parts(self, keep_short_tail: bool = False) -> list[UploadedPart]:
        """Upload what is buffered and wait for every part; the upload stays open. With
        ``keep_short_tail``, a rest shorter than a part is kept as ``tail`` instead (a
        segment's: S3 wants every part but the last to be 5 MiB or more). A stream that never
        filled a part stays buffered for ``complete``'s single PUT."""
        if self.single_put and not keep_short_tail:
            return []
        if keep_short_tail and 0 < self._buffered < self.sizer.min_part:
            self.tail = self._cut(self._buffered).tobytes()
        elif self._buffered or (not self._parts and not keep_short_tail):
            self._submit(self._cut(self._buffered))
        return [f.result() for f in self._parts]

    def include(self, parts: list[UploadedPart]) -> None:
        """Parts uploaded elsewhere (by segments, or ``put_part``) that this upload is to be
        completed with, in order. Not to be mixed with ``write``."""
        for part in parts:
            done: Future = Future()
            done.set_result(part)
            self._parts.append(done)
        self._crc_full = None  # the whole object's CRC is no longer known here

    def complete(self, *, if_none_match: bool = False, if_match: str | None = None) -> UploadResult:
        """Complete the upload and check what S3 reports. With a condition, a destination
        that another writer changed meanwhile fails as ConcurrentRun, and nothing is replaced."""
        if self.single_put:
            return self._put_whole(if_none_match=if_none_match, if_match=if_match)
        parts = self.finish_parts()
        assert self.upload_id is not None  # finish_parts created it
        result = complete_upload(self.store, self.bucket, self.key, self.upload_id, parts,
                                 if_none_match=if_none_match, if_match=if_match, extra_args=self.extra_args,
                                 full_crc32c=self._crc_full)
        self._done = True
        self._pool.shutdown()
        return result

    def _put_whole(self, *, if_none_match: bool, if_match: str | None) -> UploadResult:
        """The buffered stream as one PutObject, conditional like a completion, carrying its
        CRC32C: S3 refuses bytes that do not match it, so no HEAD is needed to verify them."""
        body = self._cut(self._buffered)
        crc = b64_crc(self._crc_full or 0)
        written = Written(len(body), frozenset([crc]), sse_customer=sse_customer_args(self.extra_args))
        try:
            resp = self.store.write("put_object", f"write {self.url}", "commit", written,
                                   Bucket=self.bucket, Key=self.key, Body=body, ChecksumCRC32C=crc,
                                   StorageClass=self.storage_class, **self.extra_args,
                                   **condition_args(if_none_match, if_match))
        finally:
            self._done = True
            self._pool.shutdown()
        if resp.get("ChecksumCRC32C") not in (None, crc):
            raise IntegrityError(f"{self.url}: S3 stored CRC32C {resp['ChecksumCRC32C']}, sent {crc}")
        return UploadResult(self.key, len(body), 1, crc, resp["ETag"])

    def abort(self) -> ArchiverError | None:
        """Give up: stop pending parts and abort the upload. Safe to call more than once.
        Returns (never raises) the error of a failed abort, so it cannot hide the failure
        that made the caller give up."""
        with self._lifecycle:
            if self._done:
                return None
            self._done = True
        self._aborted.set()
        if not self.owns_upload:
            self._pool.shutdown(wait=False, cancel_futures=True)
            return None
        # Not waiting for parts in flight (one may hang on a dead connection for minutes): the
        # upload is aborted now, and again as each of them ends, since S3 may keep a part that
        # was in flight during the abort.
        self._pool.shutdown(wait=False, cancel_futures=True)
        if not self.upload_id:
            return None
        try:
            abort_upload(self.store, self.bucket, self.key, self.upload_id,
                         f"abort the upload to {self.url} (left for the next run or a lifecycle rule to remove)")
        except ArchiverError as error:
            return error
        for part in self._parts:
            if not part.done():
                part.add_done_callback(lambda _: self._abort_quietly())
        return None

    def _abort_quietly(self) -> None:
        assert self.upload_id is not None  # only called once the upload was aborted
        try:
            abort_upload(self.store, self.bucket, self.key, self.upload_id)
        except Exception:  # noqa: BLE001 - best effort; the first abort's outcome was reported
            pass


def upload_memory(inflight: int, max_part: int) -> int:
    """What a PartUploader holds at most: parts in flight and the part being filled."""
    return inflight + max_part


class PartBody(io.RawIOBase):
    """A part as the list of pieces it was written in, read as one seekable stream.

    botocore reads the body to sign it and seeks back to retry; joining the pieces into one
    bytes object would hold every part twice while it is cut."""

    def __init__(self, pieces: list[bytes]):
        self._pieces = pieces
        self._starts = list(itertools.accumulate((len(p) for p in pieces), initial=0))
        self._size = self._starts[-1]
        self._pos = 0

    def __len__(self) -> int:
        return self._size

    def tobytes(self) -> bytes:
        return b"".join(self._pieces)

    def crc32c(self) -> int:
        crc = 0
        for piece in self._pieces:
            crc = checksums.crc32c(piece, crc)
        return crc

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, min(self._size, base + offset))
        return self._pos

    def readinto(self, buffer) -> int:
        out = memoryview(buffer).cast("B")
        done = 0
        while done < len(out) and self._pos < self._size:
            i = bisect.bisect_right(self._starts, self._pos) - 1
            piece = self._pieces[i]
            offset = self._pos - self._starts[i]
            n = min(len(out) - done, len(piece) - offset)
            out[done:done + n] = piece[offset:offset + n]
            done += n
            self._pos += n
        return done
