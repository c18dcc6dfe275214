"""What a ListObjectsV2 answer says: one ``ListedObject`` per key, read from the page's bytes
by a parser of our own that ``S3Clients.from_session`` installs on the control client (botocore
parses the rest), and whether one key exists (``key_listed``).

Below ``s3`` and ``listing``: the client factory installs the parser, the listing reads pages."""

from __future__ import annotations

import logging
import re
import urllib.parse
from datetime import datetime
from typing import NamedTuple

from s3arch.io.classify import IO_ERRORS, missing_key_denied, status_of, translate
from s3arch.core.timestamps import parse_s3_time

_log = logging.getLogger(__name__)


class ListedObject(NamedTuple):  # a tuple: a listing makes millions of them
    key: str
    size: int
    etag: str
    last_modified: datetime
    storage_class: str = "STANDARD"  # as listed; one shared str per class (``_class``)


# Asks S3 to say, per entry, whether an object in a Glacier class is restored (readable).
# MinIO and moto ignore it.
LIST_RESTORE_STATUS = {"OptionalObjectAttributes": ["RestoreStatus"]}

# A restored copy of an object in a Glacier class (the listing's RestoreStatus, asked for
# with OptionalObjectAttributes) reads as "<class> restored" (listing.NEEDS_RESTORE).
_RESTORED = " restored"
# Keyed by the listed name alone when not restored, so that the page parser finds a class
# with one lookup.
_CLASSES: dict[bytes | str | tuple[bytes | str, bool], str] = {}


def _class(raw: bytes | str, restored: bool = False) -> str:
    """The one shared str of a listed class (a listing makes millions of entries)."""
    name = _CLASSES.get((raw, True) if restored else raw)
    if name is None:
        text = raw.decode() if isinstance(raw, bytes) else (raw or "STANDARD")
        name = _CLASSES[(raw, True) if restored else raw] = (text or "STANDARD") + (_RESTORED if restored else "")
    return name



def listed_objects(page: dict) -> list[ListedObject]:
    listed = page.get(PAGE_KEY)
    if listed is None:  # an answer the page parser left to botocore
        listed = [ListedObject(o["Key"], o["Size"], o["ETag"], parse_s3_time(o["LastModified"]),
                               _class(o.get("StorageClass") or "STANDARD",
                                      (o.get("RestoreStatus") or {}).get("IsRestoreInProgress") is False))
                  for o in page.get("Contents") or ()]
    return listed



# ListObjectsV2 pages read without botocore's XML parser (tasks/io/botocore_hooks.py installs it): one regex
# over the page's bytes makes the ListedObjects, and botocore parses what is left (the
# continuation token). S3 writes each <Contents> with its elements in one order (Key,
# LastModified, ETag, checksums, Size, ...); a page any of whose entries does not match is
# left to botocore whole, so an endpoint that writes them otherwise is slower, never wrong.
_ENTRY = re.compile(rb"<Contents><Key>([^<]*)</Key><LastModified>([^<]*)</LastModified><ETag>([^<]*)</ETag>"
                    rb"(?:<Checksum\w*>[^<]*</Checksum\w*>)*<Size>(\d+)</Size>"
                    rb"(?:<StorageClass>([^<]*)</StorageClass>)?"
                    rb"([^<]*(?:<(?!/Contents>)[^<]*)*)</Contents>")  # the rest of the entry, without backtracking
_ENTITY = re.compile(rb"&(#x[0-9a-fA-F]+|#[0-9]+|quot|amp|lt|gt|apos);")
_NAMED = {b"quot": b'"', b"amp": b"&", b"lt": b"<", b"gt": b">", b"apos": b"'"}
PAGE_KEY = "S3archListed"


def _unescape(raw: bytes) -> str:
    if b"&" in raw:
        raw = _ENTITY.sub(lambda m: _NAMED.get(m.group(1)) or chr(int(m.group(1)[2:], 16) if m.group(1)[1:2] in b"xX"
                                                                   else int(m.group(1)[1:])).encode(), raw)
    return raw.decode("utf-8", "surrogateescape")


def parse_listing_page(body: bytes) -> tuple[list[ListedObject], bytes] | None:
    """(objects, the page without them) of a ListObjectsV2 answer, or None to leave it to botocore.

    One pass over the entries, which S3 writes one after the other: anything between or after
    them that the pattern does not take (an entry in another shape) leaves the page to botocore.
    """
    first = end = body.find(b"<Contents>")
    if first < 0:
        return [], body
    url = b"<EncodingType>url</EncodingType>" in body
    listed = []
    # This loop runs once per listed key: what it calls is picked for speed (per key, about
    # 1.5 us of it is the regex). The ListedObject tuple is made without its __new__ (a
    # Python frame); ETags come quoted, as &quot; from S3 and &#34; from MinIO, which plain
    # replaces turn into quotes (the entity regex, with its Python callback, cost 4 us).
    new, classes, when = tuple.__new__, _CLASSES, datetime.fromisoformat
    for m in _ENTRY.finditer(body, first):
        if m.start() != end:
            return None
        end = m.end()
        key, modified, etag, size, storage_class, rest = m.groups()
        k = _unescape(key) if b"&" in key else key.decode("utf-8", "surrogateescape")
        if url and (b"%" in key or b"+" in key):
            k = urllib.parse.unquote_plus(k, errors="surrogateescape")
        if b"&" in etag:
            etag = etag.replace(b"&quot;", b'"').replace(b"&#34;", b'"')
        try:
            modified_at = when(modified.decode())  # S3's form, with its Z, on Python >= 3.11
        except ValueError:
            modified_at = parse_s3_time(modified.decode())
        c = "STANDARD" if storage_class is None else None if rest else classes.get(storage_class)
        listed.append(new(ListedObject, (
            k, int(size), _unescape(etag) if b"&" in etag else etag.decode(), modified_at,
            c or _class(storage_class, b"<IsRestoreInProgress>false<" in rest))))
    if body.find(b"<Contents>", end) >= 0:
        return None
    return listed, body[:first] + body[end:]


def install_page_parser(client) -> None:
    """Read ``client``'s ListObjectsV2 pages with ``parse_listing_page``.

    botocore checks every S3 answer for an error inside a 200 by parsing the whole body as
    XML, ahead of any handler of ours (its handler is on ``before-parse.s3.*``, which runs
    before ``before-parse.s3.ListObjectsV2``): a third of a listing's CPU. Its handler is
    wrapped instead, so that on a listing page it sees only what is left once the entries are
    taken; an error page or a body cut short still reaches it whole or unparseable, and is
    retried as before. If botocore renames that private handler, its own check parses every
    page whole again: slower, not wrong; that is logged as a warning, and
    tests/test_botocore_hooks.py fails.
    """
    import botocore
    import botocore.handlers

    check = getattr(botocore.handlers, "_handle_200_error", None)
    if check is None:
        _log.warning("botocore %s has no handlers._handle_200_error: its check for an error inside a 200 "
                     "parses every listing page whole again, a third of a listing's CPU; this botocore "
                     "moved what s3arch's listing hook replaces", botocore.__version__)
    events = client.meta.events

    def before_parse(operation_model, response_dict, customized_response_dict, **kwargs):
        if operation_model.name == "ListObjectsV2" and response_dict.get("status_code") == 200:
            parsed = parse_listing_page(response_dict["body"])
            if parsed is not None:
                customized_response_dict[PAGE_KEY], response_dict["body"] = parsed
        if check is not None:
            check(operation_model=operation_model, response_dict=response_dict, **kwargs)

    if check is not None:
        events.unregister("before-parse.s3.*", check)
    events.register_first("before-parse.s3.*", before_parse)


def key_listed(control, bucket: str, key: str, what: str) -> bool:
    """Whether ``key`` exists, by one LIST with the key as its prefix: what a caller whose
    s3:ListBucket is narrowed by an s3:prefix condition may ask, where its HEAD or GET of a
    missing key answers 403 rather than 404. A denied LIST is ``missing_key_denied``."""
    try:
        page = control.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    except IO_ERRORS as exc:
        if status_of(exc) == 403:
            raise missing_key_denied(what, bucket, key) from exc
        raise translate(exc, f"{what} (list the key)") from exc
    return any(o.key == key for o in listed_objects(page))

