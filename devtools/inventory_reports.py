"""S3 Inventory reports written as S3 writes them, for the tests and the bench (MinIO and moto
cannot produce one): data files under ``LOCATION/data/``, then
``LOCATION/YYYY-MM-DDTHH-MMZ/manifest.json`` and its ``manifest.checksum``, where LOCATION is
``DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/`` (AWS docs: "Locating your inventory list")."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import itertools
import json
import uuid
from datetime import datetime, timezone
from typing import Iterable
from urllib.parse import quote_plus

CSV_FIELDS = ("Bucket", "Key", "Size", "LastModifiedDate", "ETag", "StorageClass")
VERSIONED_CSV_FIELDS = ("Bucket", "Key", "VersionId", "IsLatest", "IsDeleteMarker", "Size", "LastModifiedDate",
                        "ETag", "StorageClass")
PARQUET_SCHEMA = ("message s3.inventory { required binary bucket (STRING); required binary key (STRING); "
                  "optional int64 size; optional int64 last_modified_date (TIMESTAMP(MILLIS,true)); "
                  "optional binary e_tag (STRING); optional binary storage_class (STRING); }")
MODIFIED = "2026-11-21T10:00:00.000Z"


def _csv_rows(source: str, rows, versioned: bool):
    for row in rows:
        key, size = row[0], row[1]
        if versioned:  # (key, size, is_latest, is_delete_marker)
            latest, marker = row[2], row[3]
            yield (source, quote_plus(key, safe=""), uuid.uuid4().hex, str(latest).lower(), str(marker).lower(),
                   "" if marker else str(size), MODIFIED, "" if marker else "d41d8cd98f00b204e9800998ecf8427e",
                   "STANDARD")
        else:
            yield source, quote_plus(key, safe=""), str(size), MODIFIED, "0" * 32, "STANDARD"


def _csv_file(source: str, rows, compress: bool, versioned: bool) -> bytes:
    text = io.StringIO()
    csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(_csv_rows(source, rows, versioned))
    data = text.getvalue().encode()
    return gzip.compress(data, compresslevel=1) if compress else data


def _parquet_file(source: str, rows) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys, sizes = zip(*rows) if rows else ((), ())
    table = pa.table({"bucket": pa.array([source] * len(keys), pa.string()), "key": pa.array(keys, pa.string()),
                      "size": pa.array(sizes, pa.int64()),
                      "last_modified_date": pa.array([datetime(2026, 11, 21, 10, tzinfo=timezone.utc)] * len(keys),
                                                     pa.timestamp("ms", tz="UTC")),
                      "e_tag": pa.array(["0" * 32] * len(keys), pa.string()),
                      "storage_class": pa.array(["STANDARD"] * len(keys), pa.string())})
    out = io.BytesIO()
    pq.write_table(table, out, compression="snappy")
    return out.getvalue()


def write_report(s3, bucket: str, location: str, source: str, rows: Iterable[tuple], *, created: datetime,
                 fmt: str = "CSV", rows_per_file: int = 1_000_000, compress: bool = True,
                 versioned: bool = False) -> str:
    """Write a report of ``rows`` ((key, size), or (key, size, is_latest, is_delete_marker) with
    ``versioned``) under ``location`` (``DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/``), made at
    ``created``. Returns the manifest's key."""
    files = []
    pending = iter(rows)
    while chunk := list(itertools.islice(pending, rows_per_file)):
        if fmt == "Parquet":
            body, suffix = _parquet_file(source, chunk), ".parquet"
        else:
            body, suffix = _csv_file(source, chunk, compress, versioned), ".csv.gz" if compress else ".csv"
        key = f"{location}data/{uuid.uuid4()}{suffix}"
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        files.append({"key": key, "size": len(body), "MD5checksum": hashlib.md5(body).hexdigest()})
    fields = VERSIONED_CSV_FIELDS if versioned else CSV_FIELDS
    manifest = {"sourceBucket": source, "destinationBucket": f"arn:aws:s3:::{bucket}", "version": "2016-11-30",
                "creationTimestamp": str(int(created.timestamp() * 1000)), "fileFormat": fmt,
                "fileSchema": PARQUET_SCHEMA if fmt == "Parquet" else ", ".join(fields), "files": files}
    body = json.dumps(manifest, indent=4).encode()
    folder = f"{location}{created.astimezone(timezone.utc):%Y-%m-%dT%H-%MZ}/"
    s3.put_object(Bucket=bucket, Key=f"{folder}manifest.json", Body=body)
    s3.put_object(Bucket=bucket, Key=f"{folder}manifest.checksum", Body=hashlib.md5(body).hexdigest().encode())
    return f"{folder}manifest.json"
