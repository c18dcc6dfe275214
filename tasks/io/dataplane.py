"""What the two GET paths of the data plane share (``s3.DataPlane``, awscrt's S3 client;
``connections.PlainDataPlane``, plain connections): where a bucket's requests go
(``BucketRoute``, found by ``S3Clients.check_bucket``), the requests a path makes
(``SourceRequests``), keys in request paths, and S3's XML error bodies.

Each request a plane is asked for is counted once in its clients' ``Sent`` (the control
plane's counter, ``S3Clients.store.sent``) under boto3's name for it (``get_object``,
``head_object``, ``get_object_tagging``, ``put_object``), as ``Store.call`` counts a call once
whatever botocore resends inside it: the resends of a request after a connection fault or a
5xx (tasks/io/connections.py ``Call``; the CRT client's own retries) are not counted again. A
request the fetcher asks for again (throttled, or cut after its body began) counts again."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Callable

from s3arch.core.errors import ArchiverError
from s3arch.io.store import Sent


@dataclass(frozen=True)
class BucketRoute:
    """Where botocore sent a request for ``bucket``, and the region the bucket answered from."""

    bucket: str
    host: str          # netloc, e.g. logs.s3.eu-west-1.amazonaws.com or 127.0.0.1:9000
    path_prefix: str   # "" for virtual-hosted requests, "/BUCKET" for path-style ones
    tls: bool
    region: str


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_~/\-]+(?:\.[A-Za-z0-9_~/\-]+)*")


def quote_key(key: str) -> str:
    """Percent-encode a key for a request path; dot segments are encoded too, so no layer
    on the way can normalise ``a/../b`` into another key."""
    if _PLAIN_KEY.fullmatch(key) and "/./" not in key:
        return key  # the common case: nothing to encode, and no dot segments
    parts = []
    for seg in key.split("/"):
        q = urllib.parse.quote(seg, safe="~")
        parts.append(q.replace(".", "%2E") if seg in (".", "..") else q)
    return "/".join(parts)


class SourceRequests:
    """The requests of the data plane for one bucket's source objects: a GET, a HEAD and a tag
    read, each with ``on_done`` receiving None or the typed error (``error_for``); what each
    returns has a ``cancel()`` that ends it at once with a retryable error. ``_send`` is the
    GET path's (``DataPlane``: awscrt's S3 client; ``connections.PlainDataPlane``: plain
    connections). Each request is counted in ``sent`` as it is asked for (the module says how)."""

    route: BucketRoute
    sent: Sent
    _owner: list[tuple[str, str]]

    def get(self, key: str, *, etag: str | None, byte_range: tuple[int, int] | None,
            on_body: Callable[[bytes], None], on_done: Callable[[ArchiverError | None], None],
            on_headers: Callable[[list[tuple[str, str]]], None] | None = None):
        """Start one GET (of ``byte_range`` = [start, end) if given), pinned to ``etag``, asking
        for the object's checksum. ``on_headers`` receives a successful response's headers.

        ``on_done`` receives None or the typed error; all callbacks run on CRT's thread.
        """
        headers = [("x-amz-checksum-mode", "ENABLED")]
        if etag:
            headers.append(("If-Match", etag))
        if byte_range:
            headers.append(("Range", f"bytes={byte_range[0]}-{byte_range[1] - 1}"))
        self.sent.add("get_object")
        return self._send("GET", "GetObject", key, "", headers, on_done, on_body=on_body, on_headers=on_headers)

    def head(self, key: str, *, etag: str | None, on_headers: Callable[[list[tuple[str, str]]], None],
             on_done: Callable[[ArchiverError | None], None]):
        """HEAD the object pinned to ``etag``, with its checksum (which a ranged GET lacks)."""
        headers = [("x-amz-checksum-mode", "ENABLED")] + ([("If-Match", etag)] if etag else [])
        self.sent.add("head_object")
        return self._send("HEAD", "HeadObject", key, "", headers, on_done, on_headers=on_headers)

    def tagging(self, key: str, *, version_id: str | None, on_body: Callable[[bytes], None],
                on_done: Callable[[ArchiverError | None], None]):
        """GetObjectTagging of the object (of ``version_id``, the version that was archived)."""
        query = "?tagging" + (f"&versionId={urllib.parse.quote(version_id, safe='')}" if version_id else "")
        self.sent.add("get_object_tagging")
        return self._send("GET", "GetObjectTagging", key, query, [], on_done, on_body=on_body)

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.route.tls else 'http'}://{self.route.host}"

    def _path(self, key: str, query: str) -> str:
        return f"{self.route.path_prefix}/{quote_key(key)}{query}"

    def _what(self, operation: str, key: str) -> str:
        verb = {"GetObject": "GET", "PutObject": "write"}.get(operation, operation)
        return f"{verb} s3://{self.route.bucket}/{key}"

    def _send(self, method: str, operation: str, key: str, query: str, headers: list[tuple[str, str]],
              on_done: Callable[[ArchiverError | None], None], *, on_body=None, on_headers=None):
        raise NotImplementedError


def parse_error_body(body: bytes | None) -> tuple[str, str]:
    if not body:
        return "", ""
    text = body.decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]*)</Code>", text)
    message = re.search(r"<Message>([^<]*)</Message>", text)
    return (code.group(1) if code else ""), (message.group(1) if message else "")
