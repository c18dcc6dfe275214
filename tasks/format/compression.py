"""Block-parallel compression into one stream that every reader reads whole.

gzip: one gzip member. Each tar block is deflated independently (no shared window) and ends
byte-aligned with a sync flush; the last one ends the deflate stream. The blocks concatenate
into a single valid deflate stream (as pigz does), the CRCs of the blocks combine into the
member's CRC, and a raw inflater can start at any block boundary, which is what lets one
object be read with one ranged GET. Python's tarfile in stream mode (``r|gz``) reads it
whole, unlike a multi-member gzip.

zstd: one zstd frame per block, concatenated (readers decode frames back to back).

Workers are threads: ISA-L and zstd release the GIL while they compress.
"""

from __future__ import annotations

import struct
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable

from isal import isal_zlib

from s3arch.core.coordinator import Stopped


@dataclass(slots=True)
class CompressedBlock:
    index: int
    raw_size: int
    data: bytes
    crc: int  # CRC32 of the uncompressed block (gzip trailer)


class GzipBlocks:
    extension = ".tar.gz"

    def __init__(self, level: int):
        self.level = level

    def context_memory(self, block_size: int) -> int:
        """Working memory of one compressor: ISA-L's level buffers are a few hundred KiB."""
        return 512 << 10

    def header(self) -> bytes:
        # magic, deflate, no flags, mtime 0, XFL 0, OS 255 (unknown): reproducible bytes.
        return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"

    def compress(self, block: bytes, final: bool) -> tuple[bytes, int]:
        # ISA-L's levels 0-3 are the fast end; above them zlib-ng (the same deflate format, so
        # blocks of either kind join into one member) trades speed for size.
        z = isal_zlib if self.level <= 3 else _zlib_ng()
        c = z.compressobj(self.level, z.DEFLATED, -15)
        out = c.compress(block) + c.flush(z.Z_FINISH if final else z.Z_SYNC_FLUSH)
        return out, isal_zlib.crc32(block)

    def combine(self, crc: int, block_crc: int, block_len: int) -> int:
        return isal_zlib.crc32_combine(crc, block_crc, block_len)

    def trailer(self, crc: int, total: int) -> bytes:
        return struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF)


def _zlib_ng():
    from zlib_ng import zlib_ng

    return zlib_ng


class ZstdBlocks:
    extension = ".tar.zst"

    def __init__(self, level: int):
        import zstandard

        self._local = threading.local()
        self._zstd = zstandard
        self.level = level

    def context_memory(self, block_size: int) -> int:
        """zstd's own estimate for one context at this level on blocks of this size (about
        1.2 MiB at level 3, 17 MiB at level 19 for 1 MiB blocks)."""
        params = self._zstd.ZstdCompressionParameters.from_level(self.level, source_size=block_size)
        return params.estimated_compression_context_size()

    def header(self) -> bytes:
        return b""

    def compress(self, block: bytes, final: bool) -> tuple[bytes, int]:
        c = getattr(self._local, "c", None)
        if c is None:
            c = self._local.c = self._zstd.ZstdCompressor(level=self.level, write_checksum=True)
        return c.compress(block), 0

    def combine(self, crc: int, block_crc: int, block_len: int) -> int:
        return 0

    def trailer(self, crc: int, total: int) -> bytes:
        return b""


def codec_for(name: str, level: int):
    return GzipBlocks(level) if name == "gzip" else ZstdBlocks(level)


class ParallelCompressor:
    """Compresses blocks on a thread pool and delivers them in order to ``deliver``.

    ``submit`` blocks once ``max_pending`` blocks are queued or being compressed, which is
    what bounds this stage's memory. ``deliver`` runs on one collector thread; what it or a
    compression raises goes to ``on_error`` (the stream's ``set_exception``), and the
    collector stops.
    """

    def __init__(self, codec, threads: int, max_pending: int,
                 deliver: Callable[[CompressedBlock], None], on_error: Callable[[BaseException], object]):
        self.codec = codec
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="s3arch-compress")
        self._slots = threading.Semaphore(max_pending)
        self._pending: list[Future] = []
        self._cond = threading.Condition()
        self._closed = False
        self._deliver = deliver
        self._on_error = on_error
        self._collector = threading.Thread(target=self._collect, name="s3arch-collect", daemon=True)
        self._collector.start()

    def submit(self, index: int, block: bytes, final: bool, abort) -> None:
        """Queue a block, or raise ``Stopped`` once ``abort`` (the stream's coordinator, or an
        event) is set: a block is never dropped quietly (the stream would end short and read
        as corrupt, not stopped). ``Stopped`` is a signal, not a cause: the stream raises the
        cause its coordinator holds."""
        if abort.is_set():
            raise Stopped("compression stopped")
        while not self._slots.acquire(timeout=0.2):
            if abort.is_set():
                raise Stopped("compression stopped")
        fut = self._pool.submit(self._compress, index, block, final)
        with self._cond:
            self._pending.append(fut)
            self._cond.notify()

    def _compress(self, index, block, final) -> CompressedBlock:
        data, crc = self.codec.compress(block, final)
        return CompressedBlock(index, len(block), data, crc)

    def _collect(self):
        try:
            while True:
                with self._cond:
                    while not self._pending and not self._closed:
                        self._cond.wait()
                    if not self._pending:
                        return
                    fut = self._pending.pop(0)
                block = fut.result()
                self._slots.release()
                self._deliver(block)
        except BaseException as exc:  # noqa: BLE001 - reported to the pipeline
            self._on_error(exc)

    def stop(self) -> None:
        """The stream stopped: blocks not yet being compressed are dropped (their futures
        cancelled, which ends the collector), so stopping waits for no compression but the
        ones under way; then close and wait."""
        with self._cond:
            for fut in self._pending:
                fut.cancel()
        self.close(wait=True)

    def close(self, wait: bool = True) -> None:
        """No more blocks; with ``wait`` return once every block has been delivered."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if wait:
            self._collector.join()
        self._pool.shutdown(wait=wait, cancel_futures=not wait)
