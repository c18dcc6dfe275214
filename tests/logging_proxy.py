"""An egress HTTP proxy for tests that records what went through it.

It does what a corporate egress proxy does for S3 clients: ``CONNECT host:port`` opens a
tunnel (HTTPS endpoints: the proxy sees only the host), and a request with an absolute URI
(``GET http://host:port/bucket/key HTTP/1.1``: plain-HTTP endpoints) is forwarded upstream
and its answer streamed back, over keep-alive connections both ways. ``resolve`` maps a name
("name" -> "address") or a name and port ("name:port" -> "address:port") to where the proxy
connects, so an endpoint named that way (a port nothing listens on, say) cannot be reached
except through the proxy. With ``credentials`` it demands Basic proxy authentication (407).

Every request is recorded: ``seen`` holds (method, target, client connection number), and
``connections`` counts the client connections accepted.
"""

from __future__ import annotations

import base64
import http.client
import select
import socket
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-connection", "te", "trailer",
               "transfer-encoding", "upgrade"}


class LoggingProxy:
    def __init__(self, resolve: dict[str, str] | None = None, credentials: tuple[str, str] | None = None):
        self.resolve = resolve or {}
        self.seen: list[tuple[str, str, int]] = []
        self.refused = 0  # requests answered 407
        self.connections = 0
        self._lock = threading.Lock()
        expected = None
        if credentials:
            expected = "Basic " + base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                with proxy._lock:
                    proxy.connections += 1
                    self.number = proxy.connections
                self.upstreams: dict[tuple[str, int], http.client.HTTPConnection] = {}

            def log_message(self, *args):
                pass

            def handle_error(self, request, client_address):
                pass

            def _authorized(self) -> bool:
                if expected is None or self.headers.get("Proxy-Authorization") == expected:
                    return True
                with proxy._lock:
                    proxy.refused += 1
                self.send_response(407)
                self.send_header("Proxy-Authenticate", 'Basic realm="test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return False

            def _address(self, host: str, port: int) -> tuple[str, int]:
                target = proxy.resolve.get(f"{host}:{port}") or proxy.resolve.get(host)
                if target is None:
                    return host, port
                name, _, mapped = target.partition(":")
                return name, int(mapped) if mapped else port

            def do_CONNECT(self):
                with proxy._lock:
                    proxy.seen.append(("CONNECT", self.path, self.number))
                if not self._authorized():
                    return
                host, _, port = self.path.rpartition(":")
                try:
                    upstream = socket.create_connection(self._address(host, int(port)), timeout=10)
                except OSError:
                    self.send_error(502)
                    return
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                self._pipe(self.connection, upstream)
                self.close_connection = True

            def _pipe(self, client: socket.socket, upstream: socket.socket) -> None:
                upstream.settimeout(None)
                client.settimeout(None)
                try:
                    while True:
                        readable, _, _ = select.select([client, upstream], [], [], 60)
                        if not readable:
                            return
                        for source in readable:
                            data = source.recv(65536)
                            if not data:
                                return
                            (upstream if source is client else client).sendall(data)
                except OSError:
                    return
                finally:
                    upstream.close()

            def _forward(self):
                with proxy._lock:
                    proxy.seen.append((self.command, self.path, self.number))
                if not self._authorized():
                    return
                url = urllib.parse.urlsplit(self.path)
                if url.scheme != "http" or not url.hostname:
                    self.send_error(400, "a proxy wants an absolute http:// URI")
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = self._read_chunked()
                else:
                    body = self.rfile.read(length) if length else b""
                address = self._address(url.hostname, url.port or 80)
                upstream = self.upstreams.get(address)
                if upstream is None:
                    upstream = self.upstreams[address] = http.client.HTTPConnection(*address, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                if body or self.command in ("PUT", "POST"):
                    headers["Content-Length"] = str(len(body))
                target = url.path + (f"?{url.query}" if url.query else "")
                try:
                    upstream.request(self.command, target, body=body, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                except (OSError, http.client.HTTPException):
                    upstream.close()
                    del self.upstreams[address]
                    self.send_error(502)
                    return
                self.send_response(response.status, response.reason)
                for name, value in response.getheaders():
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                if self.command != "HEAD":
                    self.send_header("Content-Length", str(len(payload)))
                elif response.getheader("Content-Length") is not None:
                    self.send_header("Content-Length", response.getheader("Content-Length"))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def _read_chunked(self) -> bytes:
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        class Server(ThreadingHTTPServer):
            request_queue_size = 256  # the listen backlog: 64 GETs connect at once (the default 5 drops SYNs)

        self._server = Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._server.serve_forever, name="logging-proxy", daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
