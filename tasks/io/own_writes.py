"""Conditional writes that recognise their own success.

S3 may apply a conditional write (``If-None-Match: *``, ``If-Match: E``) and lose its answer
on the way back. botocore then sends the same request again, and S3 answers the resend as it
would answer another writer: 412 PreconditionFailed (the condition no longer holds, because
the object is now this run's), or 404 (NoSuchUpload for a completed upload, NoSuchKey for an
``If-Match`` on a key this run's first request replaced). A refusal is therefore not proof of
another run. Every conditional write of the engine (the lease's create, renewal and take-over,
the single PUT of a small archive or manifest, the multipart completion) names what it writes
(``Written``) to the store (tasks/io/store.py), which on such a refusal compares the object now
at the key with what this write leaves there (``Written``: size and CRC32C, and for a small object its exact bytes,
which carry the lease's owner token) and carries on with it when it is this run's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from s3arch.io.classify import IO_ERRORS

# The answers a resend of an applied conditional write gets (409: a conflicting write in flight).
REFUSED = (404, 409, 412)


@dataclass(frozen=True)
class Written:
    """What a write leaves at its key, precisely enough to tell it from any other writer's."""

    size: int
    crc32c: frozenset[str]  # base64 CRC32C values S3 may report for it (full object, or composite)
    body: bytes | None = None  # a small object's exact bytes: compared whole (a GET), not by checksum
    sse_customer: tuple[tuple[str, str], ...] = ()  # the SSE-C arguments a HEAD of it needs


def own_object(control, bucket: str, key: str, written: Written) -> dict | None:
    """The object at ``key`` (a HEAD's or GET's answer) if it is ``written``, else None:
    another writer's object, none, or one that cannot be read to tell."""
    try:
        if written.body is not None:
            response = control.get_object(Bucket=bucket, Key=key, **dict(written.sse_customer))
            same = response["Body"].read() == written.body
        else:
            response = control.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED",
                                           **dict(written.sse_customer))
            same = (response["ContentLength"] == written.size
                    and response.get("ChecksumCRC32C") in written.crc32c)
    except IO_ERRORS:
        return None  # cannot tell: the refusal stands
    return response if same else None
