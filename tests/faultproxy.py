"""A fault-injecting HTTP proxy for tests, in front of the embedded MinIO on loopback.

Clients point their endpoint at the proxy; requests are forwarded unchanged (the Host
header too, so SigV4 signatures stay valid) over keep-alive connections to the upstream,
and responses are streamed back, unless a rule says otherwise. Rules are set per test:

    proxy.add(Fault("status", status=503, rate=0.08, match=is_get))   # SlowDown on 8% of GETs
    proxy.add(Fault("reset", rate=0.05, match=is_get))                # RST in the middle of the body
    proxy.add(Fault("reset", at=0, match=is_manifest_get))            # RST right after the head
    proxy.add(Fault("drop", count=1, match=is_complete_upload))        # RST instead of any answer
    proxy.add(Fault("lost", count=1, match=is_lease_put))              # the server applies it, the answer is lost
    proxy.add(Fault("truncate", count=3, match=is_get))               # short body, then close
    proxy.add(Fault("stall", seconds=30, count=1, match=is_get))      # hold the response back
    proxy.add(Fault("stall", until=event, count=1, match=is_get))     # ... until the test sets ``event``
    proxy.add(Fault("status", status=500, match=is_complete_upload))  # every matching request
    proxy.add(Fault("status", status=503, window=30, match=is_get))   # SlowDown to every GET for 30 s
    proxy.add(Fault("status", status=503, above_rate=50, match=is_get))  # SlowDown above 50 GETs/s
    proxy.add(Fault("status", status=400, code="ExpiredToken"))        # any S3 error code
    proxy.add(Fault("header", headers={"x-amz-restore": 'ongoing-request="true"'}, count=2))
    proxy.add(Fault("rewrite", rewrite=lambda body: body.replace(b"STANDARD", b"GLACIER"), match=is_list))

Each rule counts what it injected (``fault.injected``), so a test can prove the fault
actually happened. Randomness is seeded. The server runs in daemon threads, stops itself
after ``max_lifetime`` seconds, and ``stop()`` shuts it down and releases stalled requests.
"""

from __future__ import annotations

import bisect
import http.client
import random
import socket
import struct
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

_S3_ERROR = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>"
             "<Message>injected by the test proxy</Message><RequestId>faultproxy</RequestId></Error>")
_CODES = {500: "InternalError", 503: "SlowDown"}


@dataclass
class Request:
    method: str
    path: str  # percent-encoded path
    query: dict[str, list[str]]
    headers: dict[str, str] = field(default_factory=dict)  # names in lower case

    @property
    def key(self) -> str:
        """bucket/key of a path-style request, decoded."""
        return urllib.parse.unquote(self.path.lstrip("/"))


def is_get(r: Request) -> bool:
    return r.method == "GET" and "/" in r.key and "list-type" not in r.query and "uploads" not in r.query


def is_manifest_get(r: Request) -> bool:
    """A GET of an archive's manifest (whole or ranged), not of its index."""
    return r.method == "GET" and r.key.endswith(".manifest.jsonl.gz")


def is_archive_get(r: Request) -> bool:
    """A GET of an archive's body (whole or ranged): its key ends in .tar.gz or .tar.zst."""
    return r.method == "GET" and r.key.endswith((".tar.gz", ".tar.zst")) and "uploads" not in r.query


def is_segment_records_get(r: Request) -> bool:
    """A GET of one segment's records (a temporary under the archive's .segments/ prefix)."""
    return r.method == "GET" and ".segments/" in r.key and r.key.endswith(".manifest.jsonl.gz")


def is_list(r: Request) -> bool:
    return r.method == "GET" and "list-type" in r.query


def is_upload_part(r: Request) -> bool:
    return r.method == "PUT" and "partNumber" in r.query and "uploadId" in r.query


def is_complete_upload(r: Request) -> bool:
    return r.method == "POST" and "uploadId" in r.query


def is_uploads_listing(r: Request, suffix: str = "") -> bool:
    """A listing of a bucket's open multipart uploads (of keys ending in ``suffix``: MinIO
    lists a key's uploads when asked for that exact key)."""
    return r.method == "GET" and "uploads" in r.query and r.query.get("prefix", [""])[0].endswith(suffix)


def is_delete_objects(r: Request, bucket: str | None = None) -> bool:
    """A DeleteObjects batch (of ``bucket``'s objects)."""
    return r.method == "POST" and "delete" in r.query and (bucket is None or r.key.split("/")[0] == bucket)


def is_lease_put(r: Request) -> bool:
    """A write of a prefix's lease: its create, renewal or take-over."""
    return r.method == "PUT" and r.key.endswith(".lease.json")


def makes_visible(r: Request, suffix: str) -> bool:
    """The request that makes an object ending in ``suffix`` visible: the completion of its
    multipart upload, or the single PUT of one smaller than a part."""
    return r.key.endswith(suffix) and (is_complete_upload(r) or (r.method == "PUT" and "partNumber" not in r.query))


@dataclass
class Fault:
    kind: str  # status | reset | drop | lost | truncate | stall | header | rewrite
    match: Callable[[Request], bool] = lambda r: True
    rate: float = 1.0
    count: int | None = None  # at most this many injections
    after: int = 0  # let this many matching requests through first
    status: int = 503
    code: str | None = None  # S3 error code of a "status" fault (default: by status)
    seconds: float = 30.0
    headers: dict[str, str] = field(default_factory=dict)  # a "header" fault sets these on the response
    at: int | None = None  # a "reset"/"truncate" fault sends this many body bytes first (default: half)
    rewrite: Callable[[bytes], bytes] | None = None  # a "rewrite" fault answers this of the upstream's body
    window: float | None = None  # fires only during this many seconds from the first matching request
    above_rate: float | None = None  # a token bucket: lets this many matching requests a second through
    first_seen: float | None = None
    last_injected: float | None = None
    _tokens: float = 0.0
    _refilled: float = 0.0
    injected: int = 0
    seen: int = 0
    on_inject: Callable[[Request], None] | None = None
    until: threading.Event | None = None  # a "stall" fault holds its request until this is set (``seconds`` at most)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def fires(self, request: Request, rng: random.Random) -> bool:
        if not self.match(request):
            return False
        with self._lock:
            self.seen += 1
            if self.seen <= self.after:
                return False
            if self.count is not None and self.injected >= self.count:
                return False
            now = time.monotonic()
            if self.first_seen is None:
                self.first_seen = self._refilled = now
                self._tokens = self.above_rate or 0.0
            if self.window is not None and now - self.first_seen >= self.window:
                return False
            if self.above_rate is not None:
                self._tokens = min(self.above_rate, self._tokens + (now - self._refilled) * self.above_rate)
                self._refilled = now
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return False
            if rng.random() >= self.rate:
                return False
            self.injected += 1
            self.last_injected = now
        if self.on_inject:
            self.on_inject(request)
        return True


class FaultProxy:
    def __init__(self, upstream: str, *, seed: int = 1, max_lifetime: float = 600.0,
                 reconnect_stale: bool = False):
        """``reconnect_stale``: a request whose keep-alive upstream connection the server has
        closed meanwhile (MinIO closes one idle for about 30 s) is sent again on a new one, as
        a client would see a real server's close, instead of answering the client with a
        reset it would take for a fault on the way (tests whose connections idle that long)."""
        self.reconnect_stale = reconnect_stale
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port
        self.faults: list[Fault] = []
        self._synthetic: dict[tuple[str, str], tuple[int, int]] = {}
        self.requests = 0
        self.released = threading.Event()
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep test output readable
                pass

            def _forward(self):
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

        class QuietServer(ThreadingHTTPServer):
            # socketserver's default backlog of 5 drops the SYNs of a client that opens a
            # hundred connections at once (the CRT client does), costing seconds of retransmits.
            request_queue_size = 1024

            def handle_error(self, request, client_address):
                pass  # clients that gave up on a stalled or broken response are expected here

        self._server = QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="faultproxy", daemon=True)
        self._thread.start()
        self._timer = threading.Timer(max_lifetime, self.stop)
        self._timer.daemon = True
        self._timer.start()

    def synthesize_listing(self, bucket: str, prefix: str, count: int, size: int = 1024,
                           latency: float = 0.0, jitter: float = 0.0) -> None:
        """Answer ListObjectsV2 for bucket/prefix with ``count`` generated entries, page by
        page and without holding them: a prefix of millions of keys without seeding them;
        each page ``latency`` ± ``jitter`` seconds late, as from a distant region."""
        self._synthetic[(bucket, prefix)] = (count, size, latency, jitter)

    def add(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        return fault

    def clear(self) -> None:
        self.faults = []

    def stop(self) -> None:
        self.released.set()
        self._timer.cancel()
        self._server.shutdown()
        self._server.server_close()

    # -- the request path ------------------------------------------------------------

    def _pick(self, request: Request) -> Fault | None:
        with self._rng_lock:
            for fault in self.faults:
                if fault.fires(request, self._rng):
                    return fault
        return None

    def _hold(self, fault: Fault) -> None:
        """A stalled request waits ``fault.seconds``, or until ``fault.until`` is set, or until
        the proxy stops, whichever comes first."""
        if fault.until is None:
            self.released.wait(fault.seconds)
            return
        deadline = time.monotonic() + fault.seconds
        while not (fault.until.wait(0.05) or self.released.is_set()) and time.monotonic() < deadline:
            pass

    def _handle(self, handler: BaseHTTPRequestHandler) -> None:
        self.requests += 1
        split = urllib.parse.urlsplit(handler.path)
        request = Request(handler.command, split.path, urllib.parse.parse_qs(split.query, keep_blank_values=True),
                          {k.lower(): v for k, v in handler.headers.items()})
        body = _read_body(handler)
        if is_list(request):
            prefix = request.query.get("prefix", [""])[0]
            synthetic = self._synthetic.get((request.key.rstrip("/"), prefix))
            if synthetic:
                _send_synthetic_page(handler, request, prefix, *synthetic)
                return
        fault = self._pick(request)
        if fault and fault.kind == "drop":  # the request never reaches the server: a reset, no answer
            _abort(handler)
            return
        if fault and fault.kind == "status":
            _send_error(handler, fault.status, fault.code)
            return
        if fault and fault.kind == "stall":
            self._hold(fault)
        upstream = _upstream_connection(handler, self.upstream_host, self.upstream_port)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("transfer-encoding", "connection")}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        try:
            try:
                upstream.request(handler.command, handler.path, body=body, headers=headers)
                response = upstream.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                if not (self.reconnect_stale and getattr(handler, "_upstream_used", False)):
                    raise
                upstream.close()  # the server closed it while idle: nothing was processed
                upstream.request(handler.command, handler.path, body=body, headers=headers)
                response = upstream.getresponse()
            handler._upstream_used = True
        except OSError:
            handler.close_connection = True
            _abort(handler)
            return
        if fault and fault.kind == "lost":  # the server did it; its answer never reaches the client
            response.read()
            _abort(handler)
            return
        length = response.getheader("Content-Length")
        handler.send_response_only(response.status, response.reason)
        replaced = {k.lower(): v for k, v in fault.headers.items()} if fault and fault.kind == "header" else {}
        payload = response.read()
        if fault and fault.kind == "rewrite" and fault.rewrite is not None:
            payload = fault.rewrite(payload)
            length, replaced = None, {"content-length": None}
        for name, value in response.getheaders():
            if name.lower() not in ("transfer-encoding", "connection", "date", "server", *replaced):
                handler.send_header(name, value)
        for name, value in replaced.items():
            if value is not None:
                handler.send_header(name, value)
        if length is None:
            handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        if handler.command == "HEAD" or not payload:
            return
        if fault and fault.kind in ("reset", "truncate") and len(payload) > (1 if fault.at is None else fault.at):
            handler.wfile.write(payload[: len(payload) // 2 if fault.at is None else fault.at])
            handler.wfile.flush()
            handler.close_connection = True
            if fault.kind == "reset":
                _abort(handler)
            else:
                handler.connection.shutdown(socket.SHUT_WR)
            return
        handler.wfile.write(payload)


def _read_body(handler) -> bytes | None:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else (b"" if handler.command in ("PUT", "POST") else None)


def _upstream_connection(handler, host, port) -> http.client.HTTPConnection:
    """One keep-alive upstream connection per client connection."""
    connection = getattr(handler, "_upstream", None)
    if connection is None:
        connection = http.client.HTTPConnection(host, port, timeout=120)
        handler._upstream = connection
    return connection


def _send_synthetic_page(handler, request: Request, prefix: str, count: int, size: int,
                         latency: float, jitter: float) -> None:
    if latency:
        time.sleep(max(0.0, random.uniform(latency - jitter, latency + jitter)))
    start = int(request.query.get("continuation-token", ["0"])[0])
    after = request.query.get("start-after", [""])[0]
    if after and "continuation-token" not in request.query:  # the first key after it: keys sort as numbers
        start = bisect.bisect_right(range(count), after.encode(), key=lambda i: f"{prefix}{i:09d}.log".encode())
    end = min(count, start + int(request.query.get("max-keys", ["1000"])[0]))
    bucket = request.key.rstrip("/")
    entries = "".join(
        f"<Contents><Key>{prefix}{i:09d}.log</Key><LastModified>2026-11-01T00:00:00.000Z</LastModified>"
        f"<ETag>&quot;{i:032x}&quot;</ETag><Size>{size}</Size><StorageClass>STANDARD</StorageClass></Contents>"
        for i in range(start, end))
    more = end < count
    body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
            f"<Name>{bucket}</Name><Prefix>{prefix}</Prefix><KeyCount>{end - start}</KeyCount>"
            f"<MaxKeys>1000</MaxKeys><IsTruncated>{'true' if more else 'false'}</IsTruncated>"
            + (f"<NextContinuationToken>{end}</NextContinuationToken>" if more else "")
            + entries + "</ListBucketResult>").encode()
    handler.send_response_only(200)
    handler.send_header("Content-Type", "application/xml")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _send_error(handler, status: int, code: str | None = None) -> None:
    # A 2xx "status" fault is a bare success the server never gave (a store that ignored a condition).
    body = b"" if 200 <= status < 300 else _S3_ERROR.format(code=code or _CODES.get(status, "InternalError")).encode()
    handler.send_response_only(status)
    handler.send_header("Content-Type", "application/xml")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


def _abort(handler) -> None:
    """Close with RST (SO_LINGER 0), as a dropped connection looks to the client."""
    try:
        handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        handler.connection.close()
    except OSError:
        pass
    handler.close_connection = True


def wait_until(condition, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False
