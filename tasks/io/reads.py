"""Response bodies: every read of an object through boto3, whole (``read_object``) or streamed
(``stream_object``), resumed after a fault; the store (tasks/io/store.py) is their caller.
"""

from __future__ import annotations

import time
from typing import Iterator

from s3arch.core import backoff
from s3arch.core.errors import ArchiverError, TransientError
from s3arch.io.classify import IO_ERRORS, status_of, translate
from s3arch.io.listed import key_listed

# A GET's answer is classified where the call is made (``translate``); its body arrives later,
# and a connection reset, a read timeout or a short body in the middle of it is a network
# fault like any other. botocore raises those as ResponseStreamingError, ReadTimeoutError or
# IncompleteReadError (and a checksum mismatch as FlexibleChecksumError); urllib3 and the
# socket may let ProtocolError, ReadTimeoutError or ConnectionResetError through. Every one is
# retryable, and a retry is cheap: the read resumes with a ranged GET from the first byte it
# lacks, pinned to the ETag of the first answer, so the bytes joined are one object's.

# Pauses between attempts of a body read that made no progress: ``backoff.BODY_READ``.


def _body_fault_types() -> tuple[type[BaseException], ...]:
    import http.client

    import urllib3.exceptions
    from botocore.exceptions import BotoCoreError

    return (BotoCoreError, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError)


BODY_FAULTS: tuple[type[BaseException], ...] = _body_fault_types()


def body_fault(exc: BaseException, what: str, read: int, expected: int | None) -> ArchiverError:
    """A fault while reading a response body (``BODY_FAULTS``) as the retryable error that
    names what was read and how far it got. Anything else is ours and is re-raised."""
    if isinstance(exc, ArchiverError):
        return exc
    if not isinstance(exc, BODY_FAULTS):
        raise exc
    of = f" of {expected:,}" if expected is not None else ""
    return TransientError(f"{what}: the connection failed while reading the body, {read:,}{of} bytes read "
                          f"({type(exc).__name__}: {exc})", hint="retried with backoff and still failing; "
                                                                  "try again later")


def _pause(attempt: int) -> None:
    time.sleep(backoff.BODY_READ.pause(attempt))


def read_object(control, bucket: str, key: str, what: str, *, missing_ok: bool = False, subject="object",
                attempts: int = backoff.BODY_READ.tries, **get_args) -> dict | None:
    """One GET of a small object (or range) read whole: the response with ``Body`` replaced by
    its bytes, or None for a 404 when ``missing_ok``. A body cut short is read again (the whole
    GET, pinned to the first answer's ETag) after a pause; other failures as ``translate`` types
    them."""
    failures = 0
    while True:
        try:
            response = control.get_object(Bucket=bucket, Key=key, **get_args)
        except IO_ERRORS as exc:
            status = status_of(exc)
            if status == 404 and missing_ok:
                return None
            if status == 403 and missing_ok:  # 404 to a caller with s3:ListBucket on it, else 403
                if not key_listed(control, bucket, key, what):
                    return None
            if status == 412 and failures:
                raise _changed(what) from exc
            raise translate(exc, what, subject) from exc
        body = response["Body"]
        try:
            data = body.read()
        except BaseException as exc:
            error = body_fault(exc, what, 0, response.get("ContentLength"))
            body.close()
            failures += 1
            if failures >= attempts:
                raise error from exc
            if response.get("ETag"):
                get_args = {**get_args, "IfMatch": response["ETag"]}
            _pause(failures)
            continue
        return {**response, "Body": data}


def _changed(what: str) -> ArchiverError:
    return TransientError(f"{what}: the object was replaced while it was being read",
                          hint="another run rewrote it; try again")


def stream_object(control, bucket: str, key: str, what: str, *, start: int = 0, end: int | None = None,
                  window: int | None = None, eager: bool = False, chunk: int = 1 << 20, etag: str | None = None,
                  subject="object", attempts: int = backoff.BODY_READ.tries):
    """The bytes [start, end) of an object (to its end if ``end`` is None), in chunks of at most
    ``chunk`` bytes, read by as few GETs as faults allow.

    A fault in a body resumes with a ranged GET from the first byte not yet yielded, pinned to
    the first answer's ETag (or ``etag``), after a pause; ``attempts`` failures in a row without
    a byte of progress raise the retryable error naming the object and how far it got.
    ``window``: no GET asks for more than this many bytes; with ``eager`` each window is read
    whole before its first chunk is yielded, so no connection stays open while the caller works
    (a deletion reading its manifest between batches).
    """
    position = start
    total = end  # learned from the first answer when not given
    failures = faults = 0
    while total is None or position < total:
        stop = total if window is None else position + window if total is None else min(total, position + window)
        response = _ranged_get(control, bucket, key, what, subject, (position, stop), etag,
                               first=total is None, resent=failures > 0)
        if response is None:
            return  # an empty object: no byte to ask a range of
        etag = etag or response.get("ETag")
        if total is None:
            content_range = response.get("ContentRange")
            total = int(content_range.rsplit("/", 1)[1]) if content_range else position + response["ContentLength"]
            stop = total if stop is None else min(stop, total)
        body = response["Body"]
        read_before = position
        assert stop is not None  # known from the first answer on
        try:
            for piece in _body_pieces(body, stop - position, eager, chunk):
                position += len(piece)
                yield piece
        except GeneratorExit:
            body.close()
            raise
        except BaseException as exc:
            body.close()
            error = body_fault(exc, what, position - start, None if total is None else total - start)
            failures = 0 if position > read_before else failures + 1
            faults += 1
            if failures >= attempts or faults >= 4 * attempts:
                raise error from exc
            _pause(max(failures, 1))
            continue
        body.close()
        failures = 0


def _ranged_get(control, bucket: str, key: str, what: str, subject, span: tuple[int, int | None],
                etag: str | None, *, first: bool, resent: bool) -> dict | None:
    """The GET of [position, stop) (to the end if ``stop`` is None), pinned to ``etag``; None for
    the 416 of an empty object's ``first`` range. A 412 on a resend: the object was replaced."""
    position, stop = span
    args: dict = {}
    if position or stop is not None:
        args["Range"] = f"bytes={position}-{'' if stop is None else stop - 1}"
    if etag:
        args["IfMatch"] = etag
    try:
        return control.get_object(Bucket=bucket, Key=key, **args)
    except IO_ERRORS as exc:
        status = status_of(exc)
        if status == 416 and position == 0 and first:
            return None
        if status == 412 and resent:
            raise _changed(what) from exc
        raise translate(exc, what, subject) from exc


def _body_pieces(body, expected: int, eager: bool, chunk: int) -> Iterator[bytes]:
    """A GET's body in pieces of at most ``chunk`` bytes; IncompleteReadError if it ends before
    ``expected`` bytes. ``eager``: read whole first (no connection held while the caller works)."""
    from botocore.exceptions import IncompleteReadError

    got = 0
    if eager:
        data = body.read()
        if len(data) != expected:
            raise IncompleteReadError(actual_bytes=len(data), expected_bytes=expected)
        for i in range(0, len(data), chunk):
            yield data[i:i + chunk]
        return
    for piece in body.iter_chunks(chunk):
        got += len(piece)
        yield piece
    if got < expected:
        raise IncompleteReadError(actual_bytes=got, expected_bytes=expected)
