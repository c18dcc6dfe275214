"""A lean POSIX pax tar writer over fetched buffers.

Python's tarfile builds a TarInfo and re-encodes headers per member; here a member costs one
512-byte ustar header (plus a pax header only when the name or size needs it) and the data is
appended from the fetched chunks without joining them. See docs/FORMAT.md for the layout.
"""

from __future__ import annotations

import zlib
from typing import Callable

BLOCK = 512
_ZEROS = bytes(BLOCK * 2)
_USTAR_NAME_MAX = 100
_OCTAL_SIZE_MAX = 8**11 - 1  # 11 octal digits: sizes of 8 GiB and more need pax


def member_name(key: str, size: int) -> tuple[str, bool]:
    """The tar member name for an S3 key, and whether it is a directory entry.

    Keys are stored as they are, except what would let an extractor leave its target
    directory or silently merge two keys: empty path segments (a leading ``/``, ``a//b``)
    become ``%2F`` and ``.``/``..`` segments become ``%2E``/``%2E%2E``. A zero-byte object whose
    key ends in ``/`` (a "folder marker") becomes a directory entry; any other key ending in
    ``/`` keeps its data under a last segment ``%2F``. The manifest records the exact key.
    """
    if _as_it_is(key):
        return key, False
    is_dir = size == 0 and key.endswith("/")
    segments = key.split("/")
    if is_dir:
        segments.pop()
    safe = []
    for seg in segments:
        if seg == "":
            safe.append("%2F")
        elif seg in (".", ".."):
            safe.append(seg.replace(".", "%2E"))
        else:
            safe.append(seg)
    name = "/".join(safe)
    return (name + "/", True) if is_dir else (name, False)


def _as_it_is(key: str) -> bool:
    """Whether ``member_name`` keeps the key unchanged: no empty, ``.`` or ``..`` segment and no
    trailing ``/`` (it errs towards False: ``a/.b`` takes the long way and stays itself)."""
    return not (key.startswith(("/", ".")) or "//" in key or "/." in key or key.endswith("/"))


def member_size(key: str, size: int) -> int:
    """A member's exact bytes in the tar stream (headers, data, padding): what lets a
    segment know from the listing alone where in the tar stream its first member starts."""
    if size <= _OCTAL_SIZE_MAX and len(key) <= _USTAR_NAME_MAX and key.isascii() and _as_it_is(key):
        return BLOCK + _padded(size)  # the common case: one ustar header, the name as it is
    name, is_dir = member_name(key, size)
    return len(member_header(name, size, 0, is_dir)) + _padded(size)


END_OF_ARCHIVE = 2 * BLOCK


def member_size_bound(key: str, size: int) -> int:
    """Upper bound of a member's bytes in the tar stream (headers, data, padding)."""
    header = BLOCK + (BLOCK + _padded(len(key.encode("utf-8", "surrogateescape")) * 3 + 64))
    return header + _padded(size)


def _padded(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK * BLOCK


def _pax_record(keyword: str, value: bytes) -> bytes:
    # "%d %s=%s\n" where the leading length counts the whole record, itself included.
    body = b" " + keyword.encode() + b"=" + value + b"\n"
    n = len(body) + 1
    while len(str(n)) + len(body) != n:
        n = len(str(n)) + len(body)
    return str(n).encode() + body


# Everything after the checksum field but the type flag is the same in every header: the
# link name (empty), the "ustar" magic and version, and the unused owner and prefix fields.
_MAGIC = b"ustar\x0000"
_AFTER_TYPEFLAG = bytes(100) + _MAGIC + bytes(BLOCK - 265)
_CONSTANT_SUM = sum(b" " * 8) + sum(_MAGIC)  # the checksum field counts as spaces


def _ustar_header(name: bytes, size: int, mtime: int, typeflag: bytes, mode: int) -> bytes:
    # mode, uid, gid, size, mtime
    fields = (b"%07o\0" b"0000000\0" b"0000000\0" b"%011o\0" b"%011o\0") % (
        mode, min(size, _OCTAL_SIZE_MAX), max(0, min(mtime, 8**11 - 1)))
    # The checksum is the sum of the header's bytes. adler32's low half is 1 + that sum modulo
    # 65521, and name and fields (at most 100 + 44 bytes) never reach it: adler32 sums them in
    # C, where sum() over the bytes took most of a header's time.
    checksum = (zlib.adler32(fields, zlib.adler32(name)) & 0xFFFF) - 1 + _CONSTANT_SUM + typeflag[0]
    return b"".join((name, bytes(_USTAR_NAME_MAX - len(name)), fields, b"%06o\0 " % checksum, typeflag,
                     _AFTER_TYPEFLAG))


def member_header(name: str, size: int, mtime: int, is_dir: bool) -> bytes:
    """ustar header, preceded by a pax extended header when the name or size needs one."""
    encoded = name.encode("utf-8", "surrogateescape")
    records = b""
    if len(encoded) > _USTAR_NAME_MAX or not encoded.isascii():
        records += _pax_record("path", encoded)
        short = b"s3arch-long-name"
    else:
        short = encoded
    if size > _OCTAL_SIZE_MAX:
        records += _pax_record("size", str(size).encode())
    typeflag, mode = (b"5", 0o755) if is_dir else (b"0", 0o644)
    header = _ustar_header(short, size, mtime, typeflag, mode)
    if not records:
        return header
    pax = _ustar_header(b"PaxHeader/" + short[:80], len(records), mtime, b"x", 0o644)
    return pax + records + bytes(_padded(len(records)) - len(records)) + header


class BlockSink:
    """Cuts the tar stream into fixed-size blocks for ``emit(index, block, final)``.

    Fixed sizes make the block of any tar offset ``offset // block_size``, which is all the
    manifest needs to map an object to the compressed bytes that hold it. Full blocks wait
    for ``emit_ready``, so the writer can record a member before its last block moves on.
    """

    def __init__(self, block_size: int, emit: Callable[[int, bytes, bool], None], start: int = 0):
        """``start``: the tar offset of the first byte written. A segment of a larger stream
        starts mid-block; its first block holds only the rest of that block, so block ``i``
        always covers tar offsets ``[i * block_size, (i + 1) * block_size)``."""
        self.block_size = block_size
        self.offset = start
        self._emit = emit
        self._index = start // block_size
        # One block's buffer, filled in place and copied out when full: appending to a
        # bytearray emptied after every block reallocated it as it grew, which cost more than
        # everything else a small member takes here.
        self._buf = memoryview(bytearray(block_size))
        self._filled = 0
        # The length at which the block being filled is complete: the first one of a segment
        # starting mid-block lacks the bytes that belong to an earlier segment.
        self._full = block_size - start % block_size
        self._ready: list[bytes] = []

    def write(self, data) -> None:
        n = len(data)
        self.offset += n
        filled = self._filled
        if filled + n < self._full:  # most writes: a header or an object within the block
            self._buf[filled:filled + n] = data
            self._filled = filled + n
            return
        mv = memoryview(data)
        while mv:
            piece = mv[:self._full - self._filled]
            self._buf[self._filled:self._filled + len(piece)] = piece
            self._filled += len(piece)
            mv = mv[len(piece):]
            if self._filled == self._full:
                self._ready.append(self._buf[:self._filled].tobytes())
                self._filled = 0
                self._full = self.block_size

    def emit_ready(self) -> None:
        for block in self._ready:
            self._emit(self._index, block, False)
            self._index += 1
        self._ready.clear()

    def close(self, final: bool = True) -> None:
        """Emit the last, partial block; ``final`` ends the compressed stream with it (a
        segment that is not the archive's last leaves the stream open)."""
        self.emit_ready()
        self._emit(self._index, self._buf[:self._filled].tobytes(), final)
        self._index += 1
        self._filled = 0

    @property
    def blocks(self) -> int:
        """Index of the block after the last one emitted (= blocks of a whole stream)."""
        return self._index


class TarStream:
    """Writes members into a BlockSink; returns where each landed in the tar stream."""

    def __init__(self, sink: BlockSink):
        self.sink = sink

    def begin(self, key: str, size: int, mtime: int) -> tuple[int, int]:
        """Write a member's header; its data follows through ``write`` and ``end``.

        Returns (header offset, data offset) in the uncompressed tar stream."""
        name, is_dir = member_name(key, size)
        header_offset = self.sink.offset
        self.sink.write(member_header(name, size, mtime, is_dir))
        return header_offset, self.sink.offset

    def write(self, chunk) -> None:
        self.sink.write(chunk)

    def end(self, size: int) -> None:
        if size and size % BLOCK:
            self.sink.write(_ZEROS[: BLOCK - size % BLOCK])

    def close(self, end_of_archive: bool = True) -> None:
        """End the stream; without ``end_of_archive`` (a segment followed by others) no
        end blocks are written and the compressed stream stays open."""
        if end_of_archive:
            self.sink.write(_ZEROS)
        self.sink.close(final=end_of_archive)
