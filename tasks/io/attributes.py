"""What an object is besides its bytes, read on the way in and given back on the way out.

Capture costs no extra request for most objects: the GET that fetches an object already
returns its content headers, user metadata, tag count, checksum (asked for with
``x-amz-checksum-mode``), version id, encryption and Object Lock headers. Two follow-ups are
made only where needed: ``GetObjectTagging`` for an object whose tag count is above zero, and a
``HEAD`` for the checksum of an object fetched in ranges (S3 returns no checksum for a range).

A manifest record carries only what the object has (docs/FORMAT.md, "Object attributes"),
so the record of a plain object is as small as before. ``write_args`` turns a record back
into the arguments of the PutObject / CreateMultipartUpload that restores the object.
"""

from __future__ import annotations

import base64
import urllib.parse
from datetime import datetime, timezone
from email.header import Header
from typing import Iterable
from xml.etree import ElementTree

from s3arch.core.timestamps import parse_s3_time

# S3's (and MinIO's) content type for an object stored without one: records leave it out.
DEFAULT_CONTENT_TYPE = "binary/octet-stream"

_HEADER_FIELDS = {
    "content-type": "content_type",
    "content-encoding": "content_encoding",
    "content-disposition": "content_disposition",
    "content-language": "content_language",
    "cache-control": "cache_control",
    "expires": "expires",
    "x-amz-website-redirect-location": "website_redirect",
    "x-amz-storage-class": "storage_class",
    "x-amz-server-side-encryption-aws-kms-key-id": "sse_kms_key_id",
}
_CHECKSUM_HEADERS = {
    "x-amz-checksum-crc32": "CRC32",
    "x-amz-checksum-crc32c": "CRC32C",
    "x-amz-checksum-crc64nvme": "CRC64NVME",
    "x-amz-checksum-sha1": "SHA1",
    "x-amz-checksum-sha256": "SHA256",
}
_META = "x-amz-meta-"
# Restore arguments for the plain header fields (boto3's names).
_WRITE_ARGS = {
    "content_type": "ContentType",
    "content_encoding": "ContentEncoding",
    "content_disposition": "ContentDisposition",
    "content_language": "ContentLanguage",
    "cache_control": "CacheControl",
    "expires": "Expires",
    "website_redirect": "WebsiteRedirectLocation",
}


class Captured:
    """An object's attributes from its GET's response headers, and what is left to ask."""

    __slots__ = ("fields", "tag_count", "version_id")

    def __init__(self, fields: dict, tag_count: int, version_id: str | None):
        self.fields = fields
        self.tag_count = tag_count
        self.version_id = version_id  # as S3 sent it, "null" included: pins the tag read

    @property
    def has_checksum(self) -> bool:
        return "checksum" in self.fields


# Every header name that means something here, to the kind of thing it is: one dict lookup
# per header (this runs once per archived object).
_KINDS = {**{name: "field" for name in _HEADER_FIELDS}, **{name: "checksum" for name in _CHECKSUM_HEADERS},
          "x-amz-checksum-type": "checksum-type", "x-amz-tagging-count": "tags", "x-amz-version-id": "version",
          "x-amz-server-side-encryption": "sse", "x-amz-server-side-encryption-bucket-key-enabled": "bucket-key",
          "x-amz-object-lock-mode": "lock", "x-amz-object-lock-retain-until-date": "lock",
          "x-amz-object-lock-legal-hold": "lock"}
_LOCK_FIELDS = {"x-amz-object-lock-mode": "mode", "x-amz-object-lock-retain-until-date": "retain_until",
                "x-amz-object-lock-legal-hold": "legal_hold"}


def from_headers(headers: Iterable[tuple[str, str]]) -> Captured:
    """The record fields the response headers of a GET (or HEAD) carry."""
    fields: dict = {}
    metadata: dict[str, str] = {}
    lock: dict[str, str] = {}
    checksum: dict[str, str] = {}
    tag_count = 0
    version_id = None
    for name, value in headers:
        name = name.lower()
        kind = _KINDS.get(name)
        if kind is None:
            if name.startswith(_META):
                # S3 keeps metadata names in lower case and sends non-ASCII values RFC 2047
                # encoded; both are kept exactly as sent, empty values included.
                metadata[name[len(_META):]] = value
        elif kind == "field":
            fields[_HEADER_FIELDS[name]] = value
        elif kind == "checksum":
            checksum["algorithm"], checksum["value"] = _CHECKSUM_HEADERS[name], value
        elif kind == "checksum-type":
            checksum["type"] = value
        elif kind == "tags":
            tag_count = int(value or 0)
        elif kind == "version":
            version_id = value
        elif kind == "sse":
            fields["sse"] = value
        elif kind == "bucket-key":
            fields["sse_bucket_key"] = value.lower() == "true"
        else:
            lock[_LOCK_FIELDS[name]] = value
    # Defaults are not recorded: what every object has would only make records longer.
    if fields.get("content_type") == DEFAULT_CONTENT_TYPE:
        del fields["content_type"]
    if fields.get("storage_class") == "STANDARD":
        del fields["storage_class"]
    if fields.get("sse") == "AES256":  # SSE-S3: every S3 object since 2023
        del fields["sse"]
    if lock.get("legal_hold") == "OFF":
        del lock["legal_hold"]
    if metadata:
        fields["metadata"] = metadata
    if "value" in checksum:
        fields["checksum"] = checksum
    if version_id and version_id != "null":
        fields["version_id"] = version_id
    if lock:
        fields["object_lock"] = lock
    return Captured(fields, tag_count, version_id)


def checksum_from_headers(headers: Iterable[tuple[str, str]]) -> dict | None:
    return from_headers(headers).fields.get("checksum")


def parse_tagging(body: bytes) -> dict[str, str]:
    """A GetObjectTagging answer as {key: value} (S3 allows each key once)."""
    root = ElementTree.fromstring(body)
    tags = {}
    for tag in root.iter():
        if tag.tag.rsplit("}", 1)[-1] == "Tag":
            parts = {child.tag.rsplit("}", 1)[-1]: (child.text or "") for child in tag}
            tags[parts.get("Key", "")] = parts.get("Value", "")
    return tags


def lock_reason(record: dict, now: datetime | None = None) -> str | None:
    """Why S3 would refuse to delete this object as it was archived, or None."""
    lock = record.get("object_lock")
    if not lock:
        return None
    if lock.get("legal_hold") == "ON":
        return "under legal hold"
    until = lock.get("retain_until")
    if until and parse_s3_time(until) > (now or datetime.now(timezone.utc)):
        return f"under {lock.get('mode', 'retention')} retention until {until}"
    return None


def write_args(record: dict) -> dict:
    """boto3 arguments that give a restored object the attributes the record captured:
    content headers, user metadata and tags. The content type is always set (the record's,
    or S3's default), so an object restored to an endpoint with another default is the same."""
    args: dict = {"ContentType": record.get("content_type", DEFAULT_CONTENT_TYPE)}
    for field, arg in _WRITE_ARGS.items():
        if field in record and field != "content_type":
            args[arg] = record[field]
    metadata = record.get("metadata")
    if metadata:
        args["Metadata"] = {k: _ascii_header(v) for k, v in metadata.items()}
    tags = record.get("tags")
    if tags:
        args["Tagging"] = urllib.parse.urlencode(tags, quote_via=urllib.parse.quote)
    return args


# boto3's PutObject arguments (``write_args``, ``put_checksum``, a condition) as the HTTP headers
# botocore would send for them: what the plain PUT path (tasks/io/connections.py) sends.
_ARG_HEADERS = {
    "ContentType": "Content-Type",
    "ContentEncoding": "Content-Encoding",
    "ContentDisposition": "Content-Disposition",
    "ContentLanguage": "Content-Language",
    "CacheControl": "Cache-Control",
    "Expires": "Expires",
    "WebsiteRedirectLocation": "x-amz-website-redirect-location",
    "Tagging": "x-amz-tagging",
    "IfNoneMatch": "If-None-Match",
}


def put_headers(args: dict) -> list[tuple[str, str]]:
    """PutObject ``args`` as request headers. An argument without a header here is a bug (a
    KeyError), never dropped: the restored object would silently lack it."""
    headers: list[tuple[str, str]] = []
    for arg, value in args.items():
        if arg == "Metadata":
            headers.extend((_META + name, text) for name, text in value.items())
        elif arg.startswith("Checksum"):
            headers.append((f"x-amz-checksum-{arg[len('Checksum'):].lower()}", value))
        else:
            headers.append((_ARG_HEADERS[arg], value))
    return headers


def put_checksum(record: dict) -> tuple[str, str] | None:
    """(argument, value) for the object's own checksum on a single PUT, if S3 can check it
    there: a full-object checksum. A composite one (``...-N``) depends on the parts it was
    uploaded in and cannot be given to a PUT."""
    checksum = record.get("checksum")
    if not checksum or checksum.get("type", "FULL_OBJECT") != "FULL_OBJECT" or "-" in checksum["value"]:
        return None
    return f"Checksum{checksum['algorithm']}", checksum["value"]


def _ascii_header(value: str) -> str:
    """S3 sends non-ASCII metadata RFC 2047 encoded; a server that sent raw UTF-8 gets it back
    the way S3 would store it, since an HTTP header cannot carry it otherwise."""
    if value.isascii():
        return value
    return Header(value, "utf-8").encode()


def describe(record: dict) -> list[str]:
    """The captured attributes of a record as ``name: value`` lines (``s3arch ls --long``)."""
    lines = []
    for field, arg in _WRITE_ARGS.items():
        if field in record:
            lines.append(f"{arg}: {record[field]}")
    for name, value in (record.get("metadata") or {}).items():
        lines.append(f"x-amz-meta-{name}: {value}")
    if "tags" in record:
        lines.append("Tags: " + urllib.parse.urlencode(record["tags"], quote_via=urllib.parse.quote))
    if "tags_unread" in record:
        lines.append(f"Tags: not captured ({record['tags_unread']})")
    checksum = record.get("checksum")
    if checksum:
        lines.append(f"Checksum{checksum['algorithm']}: {checksum['value']} ({checksum.get('type', 'FULL_OBJECT')})")
    for field, name in (("version_id", "VersionId"), ("storage_class", "StorageClass"), ("sse", "ServerSideEncryption"),
                        ("sse_kms_key_id", "SSEKMSKeyId"), ("sse_bucket_key", "BucketKeyEnabled")):
        if field in record:
            lines.append(f"{name}: {record[field]}")
    lock = record.get("object_lock")
    if lock:
        lines.append("ObjectLock: " + ", ".join(f"{k}={v}" for k, v in lock.items()))
    return lines


# Where a record's object lies in the archive: meaningless outside it.
_PLACEMENT = ("type", "name", "header_offset", "data_offset", "block", "range")


def portable(record: dict) -> dict:
    """The record without its place in the archive: what the object is (the metadata file)."""
    return {k: v for k, v in record.items() if k not in _PLACEMENT}


def sha256_checksum(hexdigest: str) -> str:
    """Our own SHA-256 as S3's ChecksumSHA256 value."""
    return base64.b64encode(bytes.fromhex(hexdigest)).decode()
