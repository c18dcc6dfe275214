"""A data file's bytes as a file object: streamed from S3 by chunks, every byte counted and
hashed on the way, so that its MD5 and size are checked against the report's manifest once read."""

from __future__ import annotations

import hashlib
import io
from typing import Generator

CHUNK = 1 << 20


class HashedBody(io.RawIOBase):
    """An object's bytes (``Store.stream``'s chunks: a fault mid-body resumes, and fails typed)
    as a file, every byte read counted and hashed."""

    def __init__(self, body: Generator[bytes, None, None]):
        self.body = body
        self._left = memoryview(b"")  # of the last chunk, not read yet
        self.md5 = hashlib.md5()
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if not self._left:
            self._left = memoryview(next(self.body, b""))
        chunk = self._left[:len(buffer)]
        self._left = self._left[len(chunk):]
        n = len(chunk)
        buffer[:n] = chunk
        self.md5.update(chunk)
        self.count += n
        return n

    def drain(self) -> None:
        while self.read(CHUNK):
            pass
