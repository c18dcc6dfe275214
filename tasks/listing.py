"""List a prefix page by page; pages stream to the fetch stage as they arrive."""

from __future__ import annotations

import queue
import re
import threading
import urllib.parse
from dataclasses import dataclass
from datetime import datetime
from typing import Iterator

from .errors import IO_ERRORS, translate
from .s3 import parse_s3_time


@dataclass(slots=True, frozen=True)
class ListedObject:
    key: str
    size: int
    etag: str
    last_modified: datetime


def iter_pages(control, bucket: str, prefix: str, start_after: str | None = None,
               last_key: str | None = None, page_size: int = 1000) -> Iterator[list[ListedObject]]:
    """Pages of up to ``page_size`` objects in S3's (UTF-8 binary) key order; with
    ``start_after``/``last_key``, only the keys after the one and up to the other (a segment)."""
    paginator = control.get_paginator("list_objects_v2")
    extra = {"StartAfter": start_after} if start_after else {}
    end = key_order(last_key) if last_key is not None else None
    try:
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix, **extra,
                                       PaginationConfig={"PageSize": page_size}):
            listed = page.get(PAGE_KEY)
            if listed is None:  # an answer the page parser left to botocore
                listed = [ListedObject(o["Key"], o["Size"], o["ETag"], parse_s3_time(o["LastModified"]))
                          for o in page.get("Contents") or ()]
            if listed:
                if end is not None and key_order(listed[-1].key) > end:
                    listed = [o for o in listed if key_order(o.key) <= end]
                    if listed:
                        yield listed
                    return
                yield listed
    except IO_ERRORS as exc:
        raise translate(exc, f"list s3://{bucket}/{prefix}") from exc


# ListObjectsV2 pages read without botocore's XML parser (tasks/s3.py installs it): one regex
# over the page's bytes makes the ListedObjects, and botocore parses what is left (the
# continuation token). S3 writes each <Contents> with its elements in one order (Key,
# LastModified, ETag, checksums, Size, ...); a page any of whose entries does not match is
# left to botocore whole, so an endpoint that writes them otherwise is slower, never wrong.
_ENTRY = re.compile(rb"<Contents><Key>([^<]*)</Key><LastModified>([^<]*)</LastModified><ETag>([^<]*)</ETag>"
                    rb"(?:<Checksum\w*>[^<]*</Checksum\w*>)*<Size>(\d+)</Size>.*?</Contents>", re.S)
_ENTITY = re.compile(rb"&(#x[0-9a-fA-F]+|#[0-9]+|quot|amp|lt|gt|apos);")
_NAMED = {b"quot": b'"', b"amp": b"&", b"lt": b"<", b"gt": b">", b"apos": b"'"}
PAGE_KEY = "S3archListed"


def _unescape(raw: bytes) -> str:
    if b"&" in raw:
        raw = _ENTITY.sub(lambda m: _NAMED.get(m.group(1)) or chr(int(m.group(1)[2:], 16) if m.group(1)[1:2] in b"xX"
                                                                   else int(m.group(1)[1:])).encode(), raw)
    return raw.decode("utf-8", "surrogateescape")


def parse_listing_page(body: bytes) -> tuple[list[ListedObject], bytes] | None:
    """(objects, the page without them) of a ListObjectsV2 answer, or None to leave it to botocore."""
    entries = _ENTRY.findall(body)
    if len(entries) != body.count(b"<Contents>"):
        return None
    url = b"<EncodingType>url</EncodingType>" in body
    listed = []
    for key, modified, etag, size in entries:
        k = _unescape(key)
        if url and (b"%" in key or b"+" in key):
            k = urllib.parse.unquote_plus(k, errors="surrogateescape")
        listed.append(ListedObject(k, int(size), _unescape(etag), parse_s3_time(modified.decode())))
    return listed, _ENTRY.sub(b"", body)


def install_page_parser(client) -> None:
    def before_parse(response_dict, customized_response_dict, **_):
        if response_dict.get("status_code") != 200:
            return
        parsed = parse_listing_page(response_dict["body"])
        if parsed is not None:
            customized_response_dict[PAGE_KEY], response_dict["body"] = parsed

    client.meta.events.register("before-parse.s3.ListObjectsV2", before_parse)


def key_order(key: str) -> bytes:
    """S3 lists keys in the binary order of their UTF-8 bytes, not Python's str order."""
    return key.encode("utf-8", "surrogateescape")


class ListingFeed:
    """Runs the listing in a thread, a bounded number of pages ahead of the consumer.

    Memory stays bounded (``pages_ahead`` x 1,000 entries) whatever the prefix size, and the
    totals listed so far are visible to the stages that size things from them.
    """

    _END = object()

    def __init__(self, control, bucket: str, prefix: str, pages_ahead: int = 8,
                 start_after: str | None = None, last_key: str | None = None, pages=None):
        """``pages``: a listing made already (iterated instead of listing again)."""
        self.objects_listed = 0
        self.bytes_listed = 0
        self.tar_bytes_bound = 0
        self.short_of_min_billable = 0  # for the cost figures (tasks/cost.py)
        self.finished = False
        self._queue: queue.Queue = queue.Queue(pages_ahead)
        self._stop = threading.Event()
        if pages is None:
            pages = iter_pages(control, bucket, prefix, start_after, last_key)
        self._thread = threading.Thread(target=self._run, args=(pages,),
                                        name="s3arch-list", daemon=True)
        self._thread.start()

    def _run(self, pages):
        from .cost import short_of_minimum
        from .tarwriter import member_size_bound

        try:
            for page in pages:
                for o in page:
                    self.tar_bytes_bound += member_size_bound(o.key, o.size)
                    self.short_of_min_billable += short_of_minimum(o.size)
                self.objects_listed += len(page)
                self.bytes_listed += sum(o.size for o in page)
                if not self._put(page):
                    return
            self.finished = True
            self._put(self._END)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.2)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[ListedObject]:
        while True:
            item = self._queue.get()
            if item is self._END:
                return
            if isinstance(item, BaseException):
                raise item
            yield from item

    def close(self):
        self._stop.set()
