"""Planning from S3 Inventory: a job's days and their sizes, read from the newest inventory
report of its source bucket instead of listing every day (docs/JOBS.md, "Planning from S3
Inventory").

A report is what S3 writes under an inventory configuration's destination,
``DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/``: one folder per report,
``YYYY-MM-DDTHH-MMZ/manifest.json`` (and ``manifest.checksum``, the manifest's MD5), naming
its data files (``data/....csv.gz`` or ``.parquet``) with their sizes and MD5 checksums. The
reader streams each data file once, checks its MD5, and keeps one counter per day, never the
keys, so a report of tens of millions of keys is planned in constant memory.

The plan only says which days hold data and how much: every day is still LISTed by the
archive run that archives it, and sources are deleted only from that run's verified
manifest, never on the inventory's word.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import string
import tempfile
import time
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from urllib.parse import unquote_plus

from s3arch.core.config import DEFAULT_INVENTORY_MAX_AGE_DAYS, S3Url
from s3arch.core.errors import IO_ERRORS, BadArgument, IntegrityError, translate
from s3arch.io.reads import read_object
from s3arch.ops.jobs import ArchiveJob

REPORT_FOLDER = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z/")
FORMATS = ("CSV", "Parquet")
_CHUNK = 1 << 20


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


@dataclass(frozen=True)
class DaySize:
    day: date
    prefix: str
    objects: int
    bytes: int

    def to_dict(self) -> dict:
        return {"day": self.day.isoformat(), "prefix": self.prefix, "objects": self.objects, "bytes": self.bytes}


@dataclass
class InventoryDays:
    """Every day of a job that a report holds objects of, and what reading it cost."""

    report: InventoryReport
    days: dict[date, DaySize]
    rows: int = 0  # rows read (current versions and delete markers, other prefixes included)
    elsewhere: int = 0  # current objects under no day prefix of the job
    seconds: float = 0.0
    bytes_read: int = 0

    def covers(self, day: date) -> bool:
        return self.report.covers(day)

    def summary(self) -> dict:
        return {"report": self.report.url, "created": self.report.created.isoformat(timespec="seconds"),
                "format": self.report.file_format, "files": len(self.report.files), "rows": self.rows,
                "elsewhere": self.elsewhere, "days": len(self.days), "seconds": round(self.seconds, 3),
                "bytes_read": self.bytes_read}


def latest_report(control, location: S3Url, source_bucket: str, max_age_days: float = DEFAULT_INVENTORY_MAX_AGE_DAYS,
                  now: datetime | None = None) -> InventoryReport:
    """The newest complete report under ``location`` (a folder whose manifest.json is not there
    yet is still being written: the one before it is taken), checked against its
    manifest.checksum, of ``source_bucket``, and at most ``max_age_days`` old."""
    folders = _report_folders(control, location)
    for folder in sorted(folders, reverse=True):
        what = f"read the inventory manifest s3://{location.bucket}/{folder}manifest.json"
        got = read_object(control, location.bucket, f"{folder}manifest.json", what, missing_ok=True)
        if got is None:
            continue
        report = parse_manifest(got["Body"], location.bucket, f"{folder}manifest.json")
        _check_manifest_checksum(control, location.bucket, folder, got["Body"])
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


def _report_folders(control, location: S3Url) -> list[str]:
    folders = []
    try:
        for page in control.get_paginator("list_objects_v2").paginate(Bucket=location.bucket, Prefix=location.key,
                                                                        Delimiter="/"):
            for p in page.get("CommonPrefixes") or ():
                if REPORT_FOLDER.fullmatch(p["Prefix"][len(location.key):]):
                    folders.append(p["Prefix"])
    except IO_ERRORS as exc:
        raise translate(exc, f"list the inventory reports under {location}") from exc
    return folders


def _check_manifest_checksum(control, bucket: str, folder: str, manifest: bytes) -> None:
    got = read_object(control, bucket, f"{folder}manifest.checksum",
                      f"read s3://{bucket}/{folder}manifest.checksum", missing_ok=True)
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


class DayMatcher:
    """Which day prefix of ``job`` a key is under, by one regular expression made from the
    job's template (each candidate checked once by ``job.date_of``, which rejects what the
    template would not write, such as month 13)."""

    _DIRECTIVES = {"Y": r"\d{4}", "G": r"\d{4}", "m": r"\d{2}", "d": r"\d{2}", "y": r"\d{2}", "H": r"\d{2}",
                   "j": r"\d{3}", "U": r"\d{2}", "W": r"\d{2}", "V": r"\d{2}", "u": r"\d", "w": r"\d",
                   "b": r"[A-Za-z]+", "B": r"[A-Za-z]+", "a": r"[A-Za-z]+", "A": r"[A-Za-z]+", "%": "%"}

    def __init__(self, job: ArchiveJob):
        self.job = job
        parts = [re.escape(job.source.key)]
        for literal, field_name, spec, _ in string.Formatter().parse(job.prefix_template):
            parts.append(re.escape(literal))
            if field_name is not None:
                parts.append(self._spec_pattern(spec or ""))
        self.pattern = re.compile("".join(parts))
        self._days: dict[str, date | None] = {}

    def _spec_pattern(self, spec: str) -> str:
        out, i = [], 0
        while i < len(spec):
            if spec[i] == "%" and i + 1 < len(spec):
                out.append(self._DIRECTIVES.get(spec[i + 1], r"[^/]+?"))
                i += 2
            else:
                out.append(re.escape(spec[i]))
                i += 1
        return "".join(out)

    def day_of(self, prefix: str) -> date | None:
        if prefix not in self._days:
            try:
                self._days[prefix] = self.job.date_of(prefix)
            except BadArgument:
                self._days[prefix] = None
        return self._days[prefix]


@dataclass
class _Tally:
    """Objects and bytes per matched prefix, and the last prefix seen: inventory rows come in
    key order within a file, so most keys skip the regular expression."""

    matcher: DayMatcher
    counts: dict[str, list[int]] = field(default_factory=dict)
    rows: int = 0
    elsewhere: int = 0
    _last: str | None = None

    def add(self, key: str, size: int) -> None:
        last = self._last
        if last is None or not key.startswith(last):
            m = self.matcher.pattern.match(key)
            if m is None:
                self.elsewhere += 1
                return
            last = self._last = m.group(0)
        counted = self.counts.get(last)
        if counted is None:
            counted = self.counts[last] = [0, 0]
        counted[0] += 1
        counted[1] += size


def inventory_days(job: ArchiveJob, control, report: InventoryReport) -> InventoryDays:
    """Read every data file of ``report`` once (its MD5 checked) and count the job's days in it:
    current versions only (a versioned report's older versions and delete markers are what a
    listing does not show)."""
    started = time.monotonic()
    tally = _Tally(DayMatcher(job))
    read = 0
    for data in report.files:
        read += _read_file(control, report, data, tally)
    days = {}
    for prefix, (objects, size) in tally.counts.items():
        day = tally.matcher.day_of(prefix)
        if day is None:
            tally.elsewhere += objects
        else:
            days[day] = DaySize(day, prefix, objects, size)
    return InventoryDays(report, dict(sorted(days.items())), tally.rows, tally.elsewhere,
                         time.monotonic() - started, read)


def _read_file(control, report: InventoryReport, data: DataFile, tally: _Tally) -> int:
    what = f"read the inventory data file s3://{report.bucket}/{data.key}"
    try:
        body = control.get_object(Bucket=report.bucket, Key=data.key)["Body"]
    except IO_ERRORS as exc:
        raise translate(exc, what) from exc
    hashed = _Hashed(body, what)
    unreadable = None
    try:
        try:
            if report.file_format == "CSV":
                _tally_csv(hashed, data.key, report.columns, tally)
            else:
                _tally_parquet(hashed, tally)
        except (OSError, EOFError, ValueError, IndexError, csv.Error) as exc:  # a damaged file: its MD5 says
            unreadable = exc
        hashed.drain()
    finally:
        body.close()
    if hashed.md5.hexdigest() == data.md5 and hashed.count == data.size and unreadable is not None:
        raise BadArgument(f"inventory data file s3://{report.bucket}/{data.key} matches its MD5 but is not a "
                          f"{report.file_format} report ({type(unreadable).__name__}: {unreadable})",
                          hint="name the destination of an S3 Inventory configuration, as S3 writes it")
    if hashed.md5.hexdigest() != data.md5 or hashed.count != data.size:
        raise IntegrityError(f"inventory data file s3://{report.bucket}/{data.key} does not match its manifest "
                             f"({hashed.count:,} bytes with MD5 {hashed.md5.hexdigest()}; the manifest says "
                             f"{data.size:,} bytes with MD5 {data.md5})",
                             hint="run again; if it persists, the report is damaged: wait for the next one")
    return hashed.count


class _Hashed(io.RawIOBase):
    """A GET's body as a file, every byte read counted and hashed."""

    def __init__(self, body, what: str):
        self.body, self.what = body, what
        self.md5 = hashlib.md5()
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            chunk = self.body.read(len(buffer))
        except IO_ERRORS as exc:
            raise translate(exc, self.what) from exc
        n = len(chunk)
        buffer[:n] = chunk
        self.md5.update(chunk)
        self.count += n
        return n

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def _tally_csv(raw: _Hashed, key: str, columns: tuple[str, ...], tally: _Tally) -> None:
    """S3 writes CSV reports gzip-compressed (``.csv.gz``); a plain ``.csv`` is read as is.
    Keys are URL-encoded (a space as ``+``, ``/`` as ``%2F``)."""
    binary: io.BufferedReader | gzip.GzipFile = io.BufferedReader(raw, _CHUNK)
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
        tally.add(unquote_plus(row[k]), int(row[s] or 0))


def _tally_parquet(raw: _Hashed, tally: _Tally) -> None:
    """Parquet needs its footer first: the file goes to a temporary file (streamed, hashed on
    the way), then its key and size columns are read a batch at a time."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise BadArgument("the inventory report is Parquet, which needs pyarrow",
                          hint="pip install 's3arch[inventory]', or set the inventory configuration's format to CSV") from None

    with tempfile.TemporaryFile(prefix="s3arch-inventory-") as spool:
        while chunk := raw.read(_CHUNK):
            spool.write(chunk)
        spool.seek(0)
        parquet = pq.ParquetFile(spool)
        names = set(parquet.schema_arrow.names)
        if not {"key", "size"} <= names:
            raise BadArgument(f"inventory data file has no {'size' if 'key' in names else 'key'} column",
                              hint="add Size to the inventory configuration's optional fields")
        wanted = ["key", "size", *(c for c in ("is_latest", "is_delete_marker") if c in names)]
        for batch in parquet.iter_batches(batch_size=65_536, columns=wanted):
            values = batch.to_pydict()
            latest = values.get("is_latest") or [True] * batch.num_rows
            markers = values.get("is_delete_marker") or [False] * batch.num_rows
            tally.rows += batch.num_rows
            for key, size, is_latest, is_marker in zip(values["key"], values["size"], latest, markers):
                if is_latest is not False and not is_marker:
                    tally.add(key, size or 0)


def plan_days(job: ArchiveJob, days: InventoryDays, first: date, last: date) -> list[dict]:
    """The days of [first, last] to archive, oldest first, each with its size from the report:
    a day the report holds objects of, and a day that ended after the report was made (it
    cannot know all of it: sized by the listing that archives it, like any day). A day the
    report covers and holds nothing of is left out."""
    planned = []
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        known = days.days.get(day)
        if known is not None:
            planned.append(known.to_dict())
        elif not days.covers(day):
            planned.append({"day": day.isoformat(), "prefix": job.prefix_for(day), "objects": None, "bytes": None})
    return planned


def plan_from_inventory(job: ArchiveJob, control, *, date_from=None, date_to=None, location: S3Url | None = None,
                        max_age_days: float | None = None, now: datetime | None = None) -> dict:
    """A backfill's plan from the job's inventory (or ``location``): the days of the range
    (default: the oldest day the report knows to the newest the job archives) with their
    objects and bytes, and what the report was and cost to read. Nothing is listed."""
    from s3arch.ops.jobs import parse_date, plan

    location = location or job.inventory
    if location is None:
        raise BadArgument(f"job {job.name!r} names no inventory",
                          hint="set the job's inventory key (docs/JOBS.md) or pass --inventory")
    report = latest_report(control, location, job.source.bucket,
                           max_age_days if max_age_days is not None else job.inventory_max_age_days, now)
    days = inventory_days(job, control, report)
    first = parse_date(date_from, "--from") if date_from else min(days.days, default=None)
    last = parse_date(date_to, "--to") if date_to else job.newest_allowed
    planned = []
    if first is not None and first <= last:
        plan(job, date_from=first, date_to=last)  # the range's own checks (age, order)
        planned = plan_days(job, days, first, last)
    return {"job": job.name, "source": "inventory", "inventory": days.summary(), "days": planned,
            "objects": sum(d["objects"] or 0 for d in planned), "bytes": sum(d["bytes"] or 0 for d in planned)}
