"""The dry run's sample: a bounded number of the listed objects, fetched while the listing goes
on and compressed as the archive would hold them, to estimate the archive's size.

The GETs go through the data plane (``S3Clients.data_for``), the path the archive's own GETs
take: a boto3 GET cost about 1 ms of client CPU, a quarter of a 60,000-key dry run's, and needs
a thread each. A GET the data plane gives up on with a transient fault (throttling, a
connection cut after the body began) or that stalls is asked again through the control plane,
whose retries and read timeout deal with such faults; a changed or vanished object fails the dry run as it would fail
the archive.
"""

from __future__ import annotations

from concurrent.futures import Future, TimeoutError
from typing import Any

from s3arch.core.config import ArchiveSpec, MiB
from s3arch.core.errors import ArchiverError, SourceChanged
from s3arch.format.compression import codec_for
from s3arch.format.tarwriter import member_header, member_name, member_size_bound
from s3arch.io.dataplane import SourceRequests
from s3arch.io.listed import ListedObject
from s3arch.io.listing import NEEDS_RESTORE
from s3arch.io.s3 import S3Clients

# At most this many bytes, from at most this many objects of at most 4 MiB each, this many
# GETs in flight.
SAMPLE_BYTES, SAMPLE_OBJECTS, SAMPLE_GETS = 8 * MiB, 256, 16
_LARGEST = 4 * MiB


class Sample:
    """The objects ``offer`` is given, the first that fit the bounds fetched at once."""

    def __init__(self, spec: ArchiveSpec, clients: S3Clients):
        self._spec = spec
        self._clients = clients
        self._plane: SourceRequests | None = None  # made on the first GET: a prefix of Glacier objects needs none
        self._taken: list[tuple[ListedObject, Future, Any]] = []  # (listed object, its body, its GET)
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._taken)

    def offer(self, o: ListedObject) -> None:
        if self._bytes >= SAMPLE_BYTES or len(self._taken) >= SAMPLE_OBJECTS or not 0 < o.size <= _LARGEST \
                or o.storage_class in NEEDS_RESTORE:
            return
        if self._plane is None:
            self._plane = self._clients.data_for(self._spec.source.bucket, SAMPLE_GETS)
        body: Future = Future()
        chunks: list[bytes] = []

        def done(error: ArchiverError | None) -> None:
            if error is None:
                body.set_result(b"".join(chunks))
            else:
                body.set_exception(error)

        call = self._plane.get(o.key, etag=o.etag, byte_range=None, on_body=chunks.append, on_done=done)
        self._taken.append((o, body, call))
        self._bytes += o.size

    def compressed(self) -> tuple[int, int, int]:
        """(bytes in; their tar members' bytes as the listing's tally counts them; those members
        compressed): the sample compressed as the archive holds it, headers, data and padding in
        the archive's blocks. Headers and padding so count at their own ratio, not at the
        data's: on gzipped logs of a few KiB with long keys (CloudTrail's) the data's ratio
        applied to the whole tar stream put the archive at twice its size."""
        spec = self._spec
        codec = codec_for(spec.codec, spec.effective_level)
        bytes_in = compressed = 0
        pending = bytearray()
        for o, fetched, call in self._taken:
            body = self._body(o, fetched, call)
            name, is_dir = member_name(o.key, len(body))
            pending += member_header(name, len(body), 0, is_dir) + body + bytes(-len(body) % 512)
            bytes_in += len(body)
            while len(pending) >= spec.block_size:  # a block at a time: the sample is held once
                compressed += len(codec.compress(bytes(pending[:spec.block_size]), False)[0])
                del pending[:spec.block_size]
        if pending or not compressed:
            compressed += len(codec.compress(bytes(pending), True)[0])
        return bytes_in, sum(member_size_bound(o.key, o.size) for o, _, _ in self._taken), compressed

    def close(self) -> None:
        """End the GETs still in flight (the listing failed, or the run was stopped)."""
        for _, fetched, call in self._taken:
            if not fetched.done():
                call.cancel()

    def _body(self, o: ListedObject, fetched: Future, call: Any) -> bytes:
        try:
            return fetched.result(timeout=self._spec.stall_timeout)  # the whole sample is at most 8 MiB
        except TimeoutError:
            call.cancel()
        except ArchiverError as exc:
            if not exc.retryable or isinstance(exc, SourceChanged):
                raise
        source = self._spec.source
        response = self._clients.store.read(source.bucket, o.key, f"sample s3://{source.bucket}/{o.key}",
                                            subject="source", IfMatch=o.etag)
        assert response is not None  # not missing_ok: a 404 raises
        return response["Body"]
