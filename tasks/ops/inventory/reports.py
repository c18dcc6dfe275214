"""An inventory configuration's reports: the newest complete one under its destination, its
manifest.json read and checked (against manifest.checksum, the source bucket, its age)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone

from s3arch.core.config import DEFAULT_INVENTORY_MAX_AGE_DAYS, S3Url
from s3arch.core.errors import BadArgument, IntegrityError
from s3arch.io.store import Store

REPORT_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z/")

FORMATS = ("CSV", "Parquet")


@dataclass(frozen=True)
class DataFile:
    key: str
    size: int
    md5: str


@dataclass(frozen=True)
class InventoryReport:
    """One report's manifest.json, checked: where it is, whose bucket, when, which files."""

    bucket: str
    manifest_key: str
    source_bucket: str
    created: datetime
    file_format: str
    columns: tuple[str, ...]  # CSV: the fileSchema's fields, snake_case; Parquet: from the files
    files: tuple[DataFile, ...]

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.manifest_key}"

    def covers(self, day: date) -> bool:
        """Whether the report was made after ``day`` ended (a younger day may be incomplete in it)."""
        return datetime.combine(day + timedelta(days=1), datetime.min.time(), timezone.utc) <= self.created


def latest_report(store: Store, location: S3Url, source_bucket: str,
                  max_age_days: float = DEFAULT_INVENTORY_MAX_AGE_DAYS, now: datetime | None = None) -> InventoryReport:
    """The newest complete report under ``location`` (a folder whose manifest.json is not there
    yet is still being written: the one before it is taken), checked against its
    manifest.checksum, of ``source_bucket``, and at most ``max_age_days`` old."""
    folders = _report_folders(store, location)
    for folder in sorted(folders, reverse=True):
        what = f"read the inventory manifest s3://{location.bucket}/{folder}manifest.json"
        got = store.read(location.bucket, f"{folder}manifest.json", what, missing_ok=True)
        if got is None:
            continue
        report = parse_manifest(got["Body"], location.bucket, f"{folder}manifest.json")
        _check_manifest_checksum(store, location.bucket, folder, got["Body"])
        if report.source_bucket != source_bucket:
            raise BadArgument(f"inventory report {report.url} is of bucket {report.source_bucket!r}, "
                              f"not of {source_bucket!r}",
                              hint="name the destination of an inventory configuration on the job's source bucket")
        age = (now or datetime.now(timezone.utc)) - report.created
        if age > timedelta(days=max_age_days):
            raise BadArgument(f"the newest inventory report {report.url} was made "
                              f"{report.created.isoformat(timespec='minutes')}, {age.total_seconds() / 86400:.1f} "
                              f"days ago: older than {max_age_days:g} day(s)",
                              hint="wait for the next report, check that the inventory configuration is enabled, "
                                   "or raise inventory_max_age_days (--inventory-max-age-days) for a weekly inventory")
        return report
    raise BadArgument(f"no inventory report under {location}",
                      hint="name the folder S3 writes the reports under (DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/); "
                           "the first report arrives within 48 hours of configuring the inventory")


def _report_folders(store: Store, location: S3Url) -> list[str]:
    folders = []
    for page in store.pages("list_objects_v2", f"list the inventory reports under {location}",
                            Bucket=location.bucket, Prefix=location.key, Delimiter="/"):
        for p in page.get("CommonPrefixes") or ():
            if REPORT_FOLDER.fullmatch(p["Prefix"][len(location.key):]):
                folders.append(p["Prefix"])
    return folders


def _check_manifest_checksum(store: Store, bucket: str, folder: str, manifest: bytes) -> None:
    got = store.read(bucket, f"{folder}manifest.checksum", f"read s3://{bucket}/{folder}manifest.checksum",
                     missing_ok=True)
    if got is not None and got["Body"].decode(errors="replace").strip().lower() != hashlib.md5(manifest).hexdigest():
        raise IntegrityError(f"inventory manifest s3://{bucket}/{folder}manifest.json does not match its "
                             "manifest.checksum (read while being written, or damaged)",
                             hint="run again; if it persists, the report is damaged: wait for the next one")


def parse_manifest(body: bytes, bucket: str, key: str) -> InventoryReport:
    """A manifest.json's fields as S3 writes them (sourceBucket, destinationBucket, version,
    creationTimestamp in milliseconds, fileFormat, fileSchema, files[{key, size, MD5checksum}])."""
    where = f"inventory manifest s3://{bucket}/{key}"
    try:
        doc = json.loads(body)
        fmt = doc["fileFormat"]
        created = datetime.fromtimestamp(int(doc["creationTimestamp"]) / 1000, timezone.utc)
        files = tuple(DataFile(f["key"], int(f["size"]), str(f["MD5checksum"]).lower()) for f in doc["files"])
        source, schema = str(doc["sourceBucket"]), str(doc.get("fileSchema", ""))
    except (ValueError, KeyError, TypeError) as exc:
        raise BadArgument(f"{where} is not an S3 Inventory manifest ({type(exc).__name__}: {exc})",
                          hint="name the destination of an S3 Inventory configuration") from None
    if fmt == "ORC":
        raise BadArgument(f"{where} is an ORC report, which is not read: CSV and Parquet are",
                          hint="set the inventory configuration's output format to CSV or Apache Parquet")
    if fmt not in FORMATS:
        raise BadArgument(f"{where} has fileFormat {fmt!r}", hint="CSV and Parquet reports are read")
    columns = tuple(_snake(c) for c in schema.split(",")) if fmt == "CSV" else ()
    if fmt == "CSV" and not {"key", "size"} <= set(columns):
        raise BadArgument(f"{where} has no {'Size' if 'key' in columns else 'Key'} field (fileSchema {schema!r})",
                          hint="add Size to the inventory configuration's optional fields")
    return InventoryReport(bucket, key, source, created, fmt, columns, files)


def _snake(name: str) -> str:
    """'LastModifiedDate' -> 'last_modified_date', 'IsDeleteMarker' -> 'is_delete_marker': the
    CSV schema's names as Parquet spells the same columns."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name.strip()).lower()
