"""An HTTPS proxy on loopback that answers as AWS S3 does for buckets in other regions.

Clients keep their AWS endpoints (no endpoint URL: botocore picks ``BUCKET.s3.REGION.amazonaws.com``
or ``s3.amazonaws.com``) and reach the proxy as an egress proxy (``HTTPS_PROXY``); they trust
its certificate through ``AWS_CA_BUNDLE`` (``ca_file``). For every tunnelled request the proxy
decides as S3 does, from the Host and the region in the SigV4 credential scope:

- a regional host of another region than the bucket's: ``301 PermanentRedirect`` naming the
  bucket's endpoint, with ``x-amz-bucket-region`` (a HEAD: the status and the header only);
- the right host signed for another region: ``400 AuthorizationHeaderMalformed`` with
  ``<Region>`` and ``x-amz-bucket-region``. ``BUCKET.s3.amazonaws.com`` (what botocore uses
  for us-east-1) is the right host for every bucket: AWS's DNS sends it to the bucket's region;
  ``s3.amazonaws.com/BUCKET`` is us-east-1;
- otherwise the request goes, path-style, to the backend (moto server, which does not check
  signatures, so the rewritten Host does not matter), and its answer comes back.

``deny_head_bucket`` answers HeadBucket 403, as S3 does for a caller whose s3:ListBucket is
narrowed to a prefix. ``requests`` records what arrived (host, signing region, status, expected-owner header), so a
test can show the redirect happened on the wire.
"""

from __future__ import annotations

import http.client
import re
import socketserver
import ssl
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from helpers import make_ca_and_certificate

_HOST = re.compile(r"(?:(?P<bucket>[a-z0-9-]+)\.)?s3(?:\.(?P<region>[a-z0-9-]+))?\.amazonaws\.com")
_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/(?P<region>[^/]+)/s3/aws4_request")
_ERROR = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message>"
          "{extra}<RequestId>regionproxy</RequestId></Error>")


@dataclass
class Seen:
    method: str
    host: str
    bucket: str | None
    signed_for: str | None
    status: int
    expected_owner: str | None


class RegionProxy:
    """``bucket_regions``: where each bucket lives; ``backend``: the server that holds them all."""

    def __init__(self, backend: str, bucket_regions: dict[str, str], directory: Path,
                 regions: tuple[str, ...] = ("us-east-1", "us-west-2", "eu-west-1")):
        self.backend = urllib.parse.urlsplit(backend).netloc
        self.bucket_regions = bucket_regions
        self.deny_head_bucket = False
        self.requests: list[Seen] = []
        names = ["s3.amazonaws.com", "*.s3.amazonaws.com"]
        names += [n for r in regions for n in (f"s3.{r}.amazonaws.com", f"*.s3.{r}.amazonaws.com")]
        self.ca_file, cert_file, key_file = make_ca_and_certificate(directory, names)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert_file, key_file)
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, name="region-proxy", daemon=True).start()

    def env(self) -> dict[str, str]:
        """What points a process's AWS SDK through this proxy at 'AWS'."""
        return {"HTTPS_PROXY": self.url, "https_proxy": self.url, "NO_PROXY": "", "no_proxy": "",
                "AWS_CA_BUNDLE": str(self.ca_file)}

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Handler(BaseHTTPRequestHandler):
    owner: RegionProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def do_CONNECT(self):
        self.send_response(200, "Connection Established")
        self.end_headers()
        tunnel = self.owner.tls.wrap_socket(self.connection, server_side=True)
        # The rest of this connection is HTTP inside the tunnel, read by the same handler.
        self.connection = tunnel
        self.rfile = tunnel.makefile("rb")
        self.wfile = socketserver._SocketWriter(tunnel)  # type: ignore[attr-defined]
        self.close_connection = False  # urllib3 sends CONNECT as HTTP/1.0, which would end here

    def do_GET(self):
        host = (self.headers.get("Host") or "").split(":")[0]
        url = urllib.parse.urlsplit(self.path)
        match = _HOST.fullmatch(host)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if match is None:
            return self._answer(502, {}, f"region proxy: {host} is not an S3 endpoint".encode(), host, None, None)
        virtual = match["bucket"]
        bucket = virtual or (url.path.split("/")[1] or None)
        home = self.owner.bucket_regions.get(bucket or "")
        at = match["region"] or (home if virtual else "us-east-1")
        scope = _SCOPE.search(self.headers.get("Authorization") or "")
        signed_for = scope["region"] if scope else None
        if home and at != home:
            return self._error(301, "PermanentRedirect", "The bucket you are attempting to access must be addressed "
                               "using the specified endpoint. Please send all future requests to this endpoint.",
                               f"<Endpoint>{bucket}.s3.{home}.amazonaws.com</Endpoint><Bucket>{bucket}</Bucket>",
                               home, host, bucket, signed_for)
        if home and signed_for != home:
            return self._error(400, "AuthorizationHeaderMalformed", f"The authorization header is malformed; the "
                               f"region '{signed_for}' is wrong; expecting '{home}'", f"<Region>{home}</Region>",
                               home, host, bucket, signed_for)
        path = f"/{bucket}{url.path}" if virtual else url.path
        if self.owner.deny_head_bucket and self.command == "HEAD" and path.rstrip("/") == f"/{bucket}":
            return self._answer(403, {}, b"", host, bucket, signed_for)
        headers = {k: v for k, v in self.headers.items()
                   if k.lower() not in ("host", "connection", "proxy-connection", "keep-alive")}
        upstream = http.client.HTTPConnection(self.owner.backend, timeout=60)
        try:
            upstream.request(self.command, path + (f"?{url.query}" if url.query else ""), body=body, headers=headers)
            response = upstream.getresponse()
            data = response.read()
            kept = {k: v for k, v in response.getheaders()
                    if k.lower() not in ("transfer-encoding", "connection", "keep-alive", "content-length")}
            if self.command == "HEAD":
                kept["Content-Length"] = response.getheader("Content-Length") or "0"
            self._answer(response.status, kept, data, host, bucket, signed_for)
        finally:
            upstream.close()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_GET

    def _error(self, status: int, code: str, message: str, extra: str, home: str, host: str, bucket: str | None,
               signed_for: str | None) -> None:
        body = _ERROR.format(code=code, message=message, extra=extra).encode()
        self._answer(status, {"x-amz-bucket-region": home, "Content-Type": "application/xml"}, body, host, bucket,
                     signed_for)

    def _answer(self, status: int, headers: dict[str, str], body: bytes, host: str, bucket: str | None,
                signed_for: str | None) -> None:
        self.owner.requests.append(Seen(self.command, host, bucket, signed_for, status,
                                        self.headers.get("x-amz-expected-bucket-owner")))
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        if self.command != "HEAD":  # a HEAD answer has the headers of a GET and no body (S3's too)
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
