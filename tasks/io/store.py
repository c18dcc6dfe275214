"""The one S3 boundary of the control plane: every boto3 request of the engine and the DAGs
goes through a ``Store``, which sends it, counts it, honours the run's stop, and turns any
failure into the engine's typed error (tasks/core/errors.py) naming what was being done.

Modules above it never see a botocore exception: they catch ``ArchiverError`` subclasses,
and where an answer's status decides (a 404 that means "not there yet"), they read
``error.status`` or ask ``maybe`` for None instead.

Resends live below it, configured once where the client is made (tasks/io/s3.py,
tasks/io/botocore_hooks.py, policies in tasks/core/backoff.py): botocore's standard attempts,
throttling waited out for the throttle budget, expired tokens retried with fresh credentials.
A resend of a conditional write whose first answer was lost is refused as another writer's
would be; ``write(..., Written(...))`` checks whether the object now at the key is this run's
own write and carries on with it (tasks/io/own_writes.py).

The data plane (GETs of source objects, an extract's small PUTs) has its own boundary, the
``Call`` of tasks/io/connections.py, since it speaks awscrt, not boto3; its requests count in
the same ``Sent`` (``S3Clients.store.sent``) under boto3's names.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Collection, Generator, Iterator

from s3arch.core.errors import AccessDenied, ArchiverError
from s3arch.io.classify import IO_ERRORS, Subject, translate
from s3arch.core.stops import Cancel, raise_if_cancelled
from s3arch.io.listed import key_listed
from s3arch.io.own_writes import REFUSED, Written, own_object
from s3arch.io.reads import read_object, stream_object

__all__ = ["Store", "Sent"]


class Sent:
    """Requests a store (and the stores bound from it) sent, by operation name (boto3's:
    ``list_objects_v2``, ``get_object``), with the data plane's of the same clients
    (tasks/io/dataplane.py: ``get_object``, ``head_object``, ``get_object_tagging``,
    ``put_object``): what a run's bill counts (tasks/protocol/bill.py).

    One request asked for counts once, however often it was sent: botocore's retries inside a
    ``Store.call`` and the data plane's resends of a request after a connection fault or a 5xx
    are not counted again. A caller that asks again (a throttled GET waited out, a read resumed
    after a fault in its body) sends, and counts, a request of its own."""

    def __init__(self) -> None:
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def add(self, operation: str, n: int = 1) -> None:
        with self._lock:
            self._counts[operation] += n

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def since(self, before: dict[str, int]) -> dict[str, int]:
        """The requests counted since ``before`` (an earlier ``counts()``), the operations with
        none left out."""
        now = self.counts()
        return {op: n - before.get(op, 0) for op, n in sorted(now.items()) if n - before.get(op, 0)}


class Store:
    """A boto3 S3 client behind the engine's boundary (see the module)."""

    def __init__(self, client: Any, *, cancel: Cancel | None = None, sent: Sent | None = None):
        self.client = client
        self.cancel = cancel
        self.sent = sent if sent is not None else Sent()

    def bound(self, cancel: Cancel | None) -> "Store":
        """This store, stopping with ``cancel`` (a task's ``on_kill``) before each request; its
        requests count with this one's."""
        return self if cancel is None or cancel is self.cancel else Store(self.client, cancel=cancel, sent=self.sent)

    def call(self, operation: str, what: str, subject: Subject = "object", /, **params: Any) -> dict:
        """Send ``operation`` (boto3's name: ``head_object``) with ``params``; its answer, or the
        typed error for "WHAT: what S3 said". ``subject`` says what a 404 or 412 means
        (classify.Subject)."""
        return self._send(operation, what, subject, None, params)

    def write(self, operation: str, what: str, subject: Subject, written: Written, /, **params: Any) -> dict:
        """``call`` for a conditional write that leaves ``written`` at its key: a resend of it
        refused as another writer's would be (404, 409, 412) is recognised as this run's own
        when the object there is ``written``, and its answer is then that object's."""
        return self._send(operation, what, subject, written, params)

    def _send(self, operation: str, what: str, subject: Subject, written: Written | None, params: dict) -> dict:
        raise_if_cancelled(self.cancel, what)
        self.sent.add(operation)
        try:
            return getattr(self.client, operation)(**params)
        except IO_ERRORS as exc:
            if written is not None and _status(exc) in REFUSED:
                own = own_object(self.client, params["Bucket"], params["Key"], written)
                if own is not None:
                    return own
            raise translate(exc, what, subject) from exc

    def maybe(self, operation: str, what: str, subject: Subject = "object", /, *,
              absent: Collection[int] = (404,), **params: Any) -> dict | None:
        """``call``, with None for an answer whose status is in ``absent`` (a key not there)."""
        try:
            return self.call(operation, what, subject, **params)
        except ArchiverError as error:
            if error.status in absent:
                return None
            raise

    def head(self, bucket: str, key: str, what: str, subject: Subject = "object", **args: Any) -> dict | None:
        """HEAD a key that may not be there: its answer, or None. S3 answers 403 rather than 404
        for a missing key to a caller without s3:ListBucket on it; such a 403 is told apart by
        listing the key (a caller whose s3:ListBucket is narrowed by a prefix condition)."""
        try:
            return self.call("head_object", what, subject, Bucket=bucket, Key=key, **args)
        except ArchiverError as error:
            if error.status == 404:
                return None
            if error.status != 403:
                raise
            self.sent.add("list_objects_v2")
            if not key_listed(self.client, bucket, key, what):
                return None
            raise AccessDenied(f"{what}: access denied (s3:GetObject on s3://{bucket}/{key}, which exists)",
                               hint="grant the caller s3:GetObject on it (docs/SECURITY.md)") from error

    def read(self, bucket: str, key: str, what: str, *, missing_ok: bool = False, subject: Subject = "object",
             **get_args: Any) -> dict | None:
        """A GET of a small object (or range) read whole: the answer with ``Body`` its bytes, or
        None for a key not there when ``missing_ok`` (a 403 told apart by listing the key). A
        body cut short is read again (tasks/io/reads.py)."""
        raise_if_cancelled(self.cancel, what)
        self.sent.add("get_object")
        return read_object(self.client, bucket, key, what, missing_ok=missing_ok, subject=subject, **get_args)

    def stream(self, bucket: str, key: str, what: str, **options: Any) -> Generator[bytes, None, None]:
        """The bytes of an object (or a range), in chunks, resumed after a fault from the first
        byte not yet yielded (``reads.stream_object``, whose options these are)."""
        raise_if_cancelled(self.cancel, what)
        self.sent.add("get_object")
        return stream_object(self.client, bucket, key, what, **options)

    def pages(self, operation: str, what: str, subject: Subject = "bucket", /, **params: Any) -> Iterator[dict]:
        """Every page of a listing ``operation`` (``list_objects_v2``), each counted as a
        request and the stop checked before it."""
        iterator = iter(self.client.get_paginator(operation).paginate(**params))
        while True:
            raise_if_cancelled(self.cancel, what)
            try:
                page = next(iterator)
            except StopIteration:
                return
            except IO_ERRORS as exc:
                self.sent.add(operation)
                raise translate(exc, what, subject) from exc
            self.sent.add(operation)
            yield page


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None) or {}
    return response.get("ResponseMetadata", {}).get("HTTPStatusCode")
