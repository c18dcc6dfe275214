"""The rows of a CSV report's data file: gzip-compressed, keys URL-encoded, the columns named
by the manifest's fileSchema."""

from __future__ import annotations

import csv
import gzip
import io
from urllib.parse import unquote_plus

from s3arch.ops.inventory.data_file import CHUNK, HashedBody
from s3arch.ops.inventory.tally import Tally


def tally_csv(raw: HashedBody, key: str, columns: tuple[str, ...], tally: Tally) -> None:
    """S3 writes CSV reports gzip-compressed (``.csv.gz``); a plain ``.csv`` is read as is.
    Keys are URL-encoded (a space as ``+``, ``/`` as ``%2F``)."""
    binary: io.BufferedReader | gzip.GzipFile = io.BufferedReader(raw, CHUNK)
    if key.endswith(".gz"):
        binary = gzip.GzipFile(fileobj=binary, mode="rb")
    text = io.TextIOWrapper(binary, encoding="utf-8", newline="")
    k, s = columns.index("key"), columns.index("size")
    latest = columns.index("is_latest") if "is_latest" in columns else None
    marker = columns.index("is_delete_marker") if "is_delete_marker" in columns else None
    for row in csv.reader(text):
        tally.rows += 1
        if (latest is not None and row[latest] != "true") or (marker is not None and row[marker] == "true"):
            continue
        tally.add(_unquote(row[k]), int(row[s] or 0))


def _unquote(key: str) -> str:
    """``unquote_plus(key)``, 13x faster for the common key, whose only escape is ``/`` as
    ``%2F``: unquote_plus took two thirds of a CSV report's CPU."""
    if "+" not in key:
        plain = key.replace("%2F", "/")
        if "%" not in plain:
            return plain
    return unquote_plus(key)
