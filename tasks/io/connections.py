"""The plain GET path: source GETs, HEADs and tag reads on a pool of ``awscrt.http``
connections, each signed with awscrt's SigV4 signer; an extract's PUTs of small objects go
the same way (``PlainDataPlane.put``, tasks/restore/to_s3.py).

awscrt's S3 client wraps every request in a meta-request (part splitting, its own queues and
retries); for an object smaller than a part that machinery buys nothing and costs client CPU
(issue 33: about 0.20 ms per GET at 64 in flight against 0.13 ms here). It also has no proxy
option, and these connections take one: tunnelled (CONNECT) to an HTTPS endpoint, forwarded
to a plain-HTTP one, found as botocore finds it (the client config's ``proxies``, else
HTTPS_PROXY / HTTP_PROXY / NO_PROXY).

One request per connection at a time, kept alive and handed to the next request; a closed
or broken connection is dropped and a new one opened when a request needs it. As in Go's
net/http and urllib3, a connection idle longer than ``IDLE_LIMIT`` is closed instead of
reused (the server, or a load balancer on the way, may have dropped it without a word), and a
request that fails on a reused connection before any byte of the answer is sent again at
once on a new connection, without spending a retry: it met a connection that had died while
idle, not a fault of the request. Any other connection failure before the first byte of the
answer, and a 5xx other than throttling, are sent again here (``backoff.CONNECTION``): the
fetcher never sees them. An answer
of up to ``HOLD_LIMIT`` bytes (tag sets, small objects) is held until it is complete, so a
reset in its body is sent again here too, as the CRT client did with a whole part. Throttling
is the fetcher's (tasks/io/fetching.py: it waits it out and sends fewer requests), and a fault
after body bytes of a larger answer were handed on is too, since only it can throw those
bytes away.
"""

from __future__ import annotations

import io
import threading
import time
from collections import deque
from typing import Any, Callable

from s3arch.core import backoff
from s3arch.core.errors import ArchiverError
from s3arch.io.classify import THROTTLE_CODES, Subject, error_for, tls_failure
from s3arch.io.dataplane import BucketRoute, SourceRequests, parse_error_body
from s3arch.io.proxies import Proxy
from s3arch.io.store import Sent

HOLD_LIMIT = 64 << 10  # bytes: at 64 in flight, 4 MiB held at most
# Seconds a pooled connection may idle and still be reused: under the keep-alive after which
# common servers close one (S3 about 20 s, MinIO 30 s, nginx 75 s; Apache's 5 s is the odd
# one out, and a close it sends in time is seen by ``is_open``).
IDLE_LIMIT = 15.0
CONNECT_TIMEOUT_MS = 10_000  # botocore's connect_timeout in S3Clients


class ConnectionPool:
    """Up to ``size`` keep-alive connections to one endpoint (host, port, TLS, proxy). A
    request waits for a free connection; one found closed, or idle past ``IDLE_LIMIT``, is
    replaced by a new one."""

    def __init__(self, bootstrap, host: str, port: int, tls_context, proxy: Proxy | None, size: int):
        from awscrt import http, io

        self._http = http
        self.host, self.port = host, port
        self._bootstrap = bootstrap
        self._tls = tls_context
        self._proxy = proxy.options(tunnel=tls_context is not None) if proxy else None
        self._socket = io.SocketOptions()
        self._socket.connect_timeout_ms = CONNECT_TIMEOUT_MS
        self._socket.keep_alive = True
        self.size = max(1, size)
        self.opened = 0  # connections open or opening
        self._idle: deque[tuple[Any, float]] = deque()  # (connection, when it was released), newest last
        self._waiting: deque[tuple[Callable, bool]] = deque()  # (ready, fresh)
        self._lock = threading.Lock()

    def acquire(self, ready: Callable[[object, BaseException | None, bool], None], *, fresh: bool = False) -> None:
        """Call ``ready(connection, None, reused)`` with a connection for one request, now or once
        one is free, or ``ready(None, error, False)`` if opening one failed. ``reused``: the
        connection carried an earlier request. ``fresh`` asks for a newly opened one."""
        retired = []
        waits = False
        with self._lock:
            now = time.monotonic()
            while self._idle and now - self._idle[0][1] > IDLE_LIMIT:  # the oldest are first
                retired.append(self._idle.popleft()[0])
            connection = None
            while self._idle and connection is None and not fresh:
                candidate = self._idle.pop()[0]
                if candidate.is_open():
                    connection = candidate
                else:
                    retired.append(candidate)
            if fresh and self._idle and self.opened - len(retired) >= self.size:
                retired.append(self._idle.popleft()[0])  # its slot opens the new connection
            self.opened -= len(retired)
            if connection is None:
                waits = self.opened >= self.size
                if waits:
                    self._waiting.append((ready, fresh))
                else:
                    self.opened += 1
        for old in retired:
            old.close()
        if connection is not None:
            ready(connection, None, True)
        elif not waits:
            self._open(ready)

    def release(self, connection) -> None:
        """Give ``connection`` back after its request ended (closed ones are dropped)."""
        with self._lock:
            reusable = connection.is_open()
            if not self._waiting:
                if reusable:
                    self._idle.append((connection, time.monotonic()))
                else:
                    self.opened -= 1
                return
            ready, fresh = self._waiting.popleft()
        if reusable and not fresh:
            ready(connection, None, True)
            return
        if reusable:
            connection.close()  # the waiter asked for a new connection: this slot opens one
        self._open(ready)

    def _open(self, ready) -> None:
        tls = None
        if self._tls is not None:
            tls = self._tls.new_connection_options()
            tls.set_server_name(self.host)  # SNI, and the name the certificate must carry
        future = self._http.HttpClientConnection.new(self.host, self.port, self._bootstrap, self._socket, tls,
                                                     self._proxy)

        def opened(future) -> None:
            error = future.exception()
            if error is not None:
                with self._lock:  # a request waiting for a connection gets this one's place
                    waiter = self._waiting.popleft()[0] if self._waiting else None
                    if waiter is None:
                        self.opened -= 1
                if waiter is not None:
                    self._open(waiter)
                ready(None, error, False)
            else:
                ready(future.result(), None, False)

        future.add_done_callback(opened)


class Signer:
    """SigV4 for S3 with awscrt's signer, from the credential provider the CRT S3 client used
    (refreshing credentials keep working). A signing config carries its own date: one per
    second is built and shared."""

    def __init__(self, provider, region: str):
        from awscrt import auth

        self._auth = auth
        self._provider = provider
        self.region = region
        self._config = None
        self._second = -1

    def sign(self, request, done: Callable) -> None:
        auth = self._auth
        second = int(time.time())
        config = self._config
        if second != self._second or config is None:
            config = self._config = auth.AwsSigningConfig(
                algorithm=auth.AwsSigningAlgorithm.V4, signature_type=auth.AwsSignatureType.HTTP_REQUEST_HEADERS,
                credentials_provider=self._provider, region=self.region, service="s3",
                use_double_uri_encode=False, should_normalize_uri_path=False,
                signed_body_value=auth.AwsSignedBodyValue.UNSIGNED_PAYLOAD,
                signed_body_header_type=auth.AwsSignedBodyHeaderType.X_AMZ_CONTENT_SHA_256)
            self._second = second
        auth.aws_sign_request(request, config).add_done_callback(done)


class Call:
    """One request through the pool, retried here as the module says; ``cancel()`` ends it at
    once with a retryable error (the stall watchdog's and the stream's cancel)."""

    __slots__ = ("_plane", "_build", "_what", "_subject", "_on_headers", "_on_body", "_on_done", "_attempt",
                 "_fresh", "_reused", "_connection", "_status", "_error_body", "_held", "_delivered", "_cancelled", "_finished", "_lock")

    def __init__(self, plane, build, what, on_headers, on_body, on_done, subject: Subject = "source"):
        self._plane = plane
        self._build = build
        self._what = what
        self._subject = subject
        self._on_headers = on_headers
        self._on_body = on_body
        self._on_done = on_done
        self._attempt = 0
        self._fresh = False  # the next attempt asks the pool for a new connection
        self._reused = False  # the connection of this attempt carried an earlier request
        self._connection = None
        self._status = 0
        self._error_body: list[bytes] = []
        self._held: tuple | None = None  # (headers, body chunks) of a small answer, until it is complete
        self._delivered = False
        self._cancelled = False
        self._finished = False
        self._lock = threading.Lock()

    def start(self) -> None:
        self._plane.signer.sign(self._build(), self._signed)

    def cancel(self) -> None:
        with self._lock:  # held while closing: the connection cannot go back to the pool meanwhile
            if self._finished or self._cancelled:
                return
            self._cancelled = True
            connection = self._connection
            if connection is not None:
                connection.close()  # asynchronous: the stream ends in error, and _complete finishes
        if connection is None:  # signing, waiting for a connection or for a retry: nothing to interrupt
            self._finish(self._cancelled_error())

    def _cancelled_error(self) -> ArchiverError:
        return error_for("", None, "cancelled (no progress, or the stream stopped)", what=self._what,
                         subject=self._subject)

    def _signed(self, future) -> None:
        error = future.exception()
        if error is not None:
            self._finish(error_for("", None, f"signing failed: {error}", what=self._what, subject=self._subject))
        elif not self._cancelled:
            fresh, self._fresh = self._fresh, False
            self._plane.pool.acquire(lambda connection, error, reused: self._connected(future.result(), connection,
                                                                                      error, reused), fresh=fresh)

    def _connected(self, request, connection, error, reused: bool) -> None:
        self._reused = reused
        if error is not None:
            self._failed(error)
            return
        with self._lock:
            cancelled = self._cancelled
            if not cancelled:
                self._connection = connection
        if cancelled:  # cancel() has finished the call
            self._plane.pool.release(connection)
            return
        self._status = 0
        self._error_body = []
        self._held = None
        try:
            stream = connection.request(request, self._response, self._body)
            stream.activate()
        except Exception as exc:  # noqa: BLE001 - the connection closed under us: like a reset
            self._connection = None
            self._plane.pool.release(connection)
            self._failed(exc)
            return
        stream.completion_future.add_done_callback(self._complete)

    def _response(self, http_stream, status_code, headers, **_) -> None:
        self._status = status_code
        if 200 <= status_code < 300:
            length = next((v for k, v in headers if k.lower() == "content-length"), None)
            if length is not None and length.isdigit() and int(length) <= HOLD_LIMIT:
                self._held = (headers, [])
                return
            self._delivered = True  # headers handed on are not handed on twice: no retry here after this
            if self._on_headers is not None:
                self._on_headers(headers)

    def _body(self, http_stream, chunk, **_) -> None:
        if self._held is not None:
            self._held[1].append(bytes(chunk))
        elif 200 <= self._status < 300:
            if self._on_body is not None:
                self._on_body(chunk)
        else:
            self._error_body.append(bytes(chunk))

    def _complete(self, future) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
        if connection is not None:
            self._plane.pool.release(connection)
        error = future.exception()
        if error is not None:
            self._failed(error)
            return
        status = self._status
        if status < 300:
            if self._held is not None:  # complete: handed on now, once
                headers, chunks = self._held
                self._held, self._delivered = None, True
                if self._on_headers is not None:
                    self._on_headers(headers)
                if self._on_body is not None and chunks:
                    self._on_body(b"".join(chunks) if len(chunks) > 1 else chunks[0])
            self._finish(None)
            return
        code, message = parse_error_body(b"".join(self._error_body))
        resent_here = status >= 500 and code not in THROTTLE_CODES and (code or status != 503)
        if resent_here and self._retry():
            return
        error = error_for(code, status, message or f"HTTP {status}", what=self._what, subject=self._subject)
        error.retries_spent = bool(resent_here and not self._cancelled)
        self._finish(error)

    def _failed(self, error: BaseException) -> None:
        """A connection that could not be opened, or broke before the answer was complete."""
        if self._cancelled:
            self._finish(self._cancelled_error())
            return
        name = getattr(error, "name", type(error).__name__)
        untrusted = tls_failure(name, self._what, self._plane.endpoint)
        if untrusted is not None:
            self._finish(untrusted)
        elif self._reused and not self._status:  # died while idle in the pool: not this request's fault
            self._fresh = True
            self.start()
        elif self._delivered or not self._retry():  # bytes handed on: only the fetcher can drop them
            failure = error_for("", None, f"{name}: {error}", what=self._what, subject=self._subject)
            failure.retries_spent = not self._delivered and not self._cancelled
            self._finish(failure)

    def _retry(self) -> bool:
        if self._cancelled or not backoff.CONNECTION.allows(self._attempt + 1):
            return False
        self._attempt += 1
        timer = threading.Timer(backoff.CONNECTION.pause(self._attempt), self._again)
        timer.daemon = True
        timer.start()
        return True

    def _again(self) -> None:
        if not self._cancelled:  # else cancel() has finished the call
            self.start()

    def _finish(self, error: ArchiverError | None) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
        self._on_done(error)


class PlainDataPlane(SourceRequests):
    """The data plane's requests of one bucket on a ``ConnectionPool``, signed by ``signer``:
    the source GETs, HEADs and tag reads, and the PUTs of small objects an extract writes, each
    counted once in ``sent`` (its clients' ``Sent``; a ``Call``'s resends are not counted again)."""

    def __init__(self, pool: ConnectionPool, signer: Signer, route: BucketRoute, expected_owner: str | None = None,
                 *, sent: Sent):
        from awscrt import http

        self._http = http
        self.pool = pool
        self.signer = signer
        self.route = route
        self.sent = sent
        self._owner = [("x-amz-expected-bucket-owner", expected_owner)] if expected_owner else []

    def put(self, key: str, body: bytes, headers: list[tuple[str, str]],
            on_done: Callable[[ArchiverError | None], None]) -> Call:
        """PutObject of ``body`` (whole, in one request) with ``headers`` (its attributes, its
        checksum, a condition); ``on_done`` receives None or the typed error, whose ``status``
        says a 412. Connection faults and 5xx are sent again here, as for a GET; throttling and
        a 400 for a cut body are the caller's, which knows how long it may wait."""
        self.sent.add("put_object")
        return self._send("PUT", "PutObject", key, "", headers, on_done, body=body, subject="object")

    def _send(self, method: str, operation: str, key: str, query: str, headers: list[tuple[str, str]],
              on_done: Callable[[ArchiverError | None], None], *, on_body=None, on_headers=None,
              body: bytes | None = None, subject: Subject = "source") -> Call:
        http = self._http
        path = self._path(key, query)
        headers = [("Host", self.route.host)] + self._owner + headers
        if body is not None:
            headers.append(("Content-Length", str(len(body))))

        def build():  # each attempt is signed anew (the signer adds its headers), its body read from the start
            return http.HttpRequest(method, path, http.HttpHeaders(headers),
                                    io.BytesIO(body) if body is not None else None)

        call = Call(self, build, self._what(operation, key), on_headers, on_body, on_done, subject)
        call.start()
        return call
