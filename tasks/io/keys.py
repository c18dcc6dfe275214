"""S3 keys: their order in a listing (``key_order``) and which names S3 and the archive accept
(``valid_name``, ``valid_names_near``)."""

from __future__ import annotations


def key_order(key: str) -> bytes:
    """S3 lists keys in the binary order of their UTF-8 bytes, not Python's str order."""
    return key.encode("utf-8", "surrogateescape")


_SEGMENT_SPACE = b" \t\n\v\f\r\x85\xa0"
_SEPARATORS = frozenset(b"/\\")
MAX_KEY_BYTES = 1024


def bad_segment(key: str, skip: int = 0) -> tuple[int, int] | None:
    """(start, end), in characters, of the first path segment of ``key`` after its first
    ``skip`` characters that an object name may not have: empty (``//``, a trailing ``/``),
    ``.`` or ``..`` (whitespace around them ignored), ``\\`` separating as ``/`` does. MinIO
    refuses such a name (``XMinioInvalidResourceName``), even as a ``StartAfter``; S3 takes any
    string. None if there is none."""
    start = 0
    for i in range(len(key) + 1):
        if i < len(key) and ord(key[i]) not in _SEPARATORS:
            continue
        if i >= skip and key[start:i].encode("utf-8", "surrogatepass").strip(_SEGMENT_SPACE) in (b"", b".", b".."):
            return start, i
        start = i + 1
    return None


def valid_name(key: str, prefix: str = "") -> bool:
    """Whether ``key`` (which starts with ``prefix``, the caller's, taken as it is) is an
    object name S3 and MinIO both accept, ``StartAfter`` included."""
    try:
        raw = key.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 0 < len(raw) <= MAX_KEY_BYTES and b"\0" not in raw and bad_segment(key, _prefix_end(prefix)) is None


def _prefix_end(prefix: str) -> int:
    """Where the checked part of a key under ``prefix`` starts: the prefix's last segment
    goes on into the key, so it is checked with it; the segments before are the caller's."""
    return max(prefix.rfind("/"), prefix.rfind("\\")) + 1


def valid_names_near(key: str, prefix: str) -> list[str]:
    """Valid names (``valid_name``) about where ``key`` lies in key order, nearest first:
    ``key`` itself if it is one, else the key cut at its first bad segment, made valid both
    upwards (the segment with a ``0`` after it: above ``key`` when ``/`` separated it) and
    downwards (the key up to that segment's separator: below ``key``). Every one starts with
    ``prefix``."""
    if valid_name(key, prefix):
        return [key]
    bad = bad_segment(key, _prefix_end(prefix))
    if bad is None:
        return []  # too long, or a character no name holds
    start, end = bad
    near = [key[:end] + "0", key[:start].rstrip("/\\")]
    return [k for k in near if k.startswith(prefix) and len(k) > len(prefix) and valid_name(k, prefix)]
