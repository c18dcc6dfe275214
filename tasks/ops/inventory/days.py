"""A report's days: every data file read once (its MD5 and size checked), its rows counted per
day prefix of the job, in constant memory."""

from __future__ import annotations

import csv
import time
from dataclasses import dataclass
from datetime import date

from s3arch.core.errors import BadArgument, IntegrityError
from s3arch.io.store import Store
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.inventory.csv_files import tally_csv
from s3arch.ops.inventory.data_file import CHUNK, HashedBody
from s3arch.ops.inventory.parquet_files import tally_parquet
from s3arch.ops.inventory.reports import DataFile, InventoryReport
from s3arch.ops.inventory.tally import DayMatcher, Tally


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


def inventory_days(job: ArchiveJob, store: Store, report: InventoryReport) -> InventoryDays:
    """Read every data file of ``report`` once (its MD5 checked) and count the job's days in it:
    current versions only (a versioned report's older versions and delete markers are what a
    listing does not show)."""
    started = time.monotonic()
    tally = Tally(DayMatcher(job))
    read = 0
    for data in report.files:
        read += _read_file(store, report, data, tally)
    days = {}
    for prefix, (objects, size) in tally.counts.items():
        day = tally.matcher.day_of(prefix)
        if day is None:
            tally.elsewhere += objects
        else:
            days[day] = DaySize(day, prefix, objects, size)
    return InventoryDays(report, dict(sorted(days.items())), tally.rows, tally.elsewhere,
                         time.monotonic() - started, read)


def _read_file(store: Store, report: InventoryReport, data: DataFile, tally: Tally) -> int:
    what = f"read the inventory data file s3://{report.bucket}/{data.key}"
    body = store.stream(report.bucket, data.key, what, chunk=CHUNK)
    hashed = HashedBody(body)
    unreadable = None
    try:
        try:
            if report.file_format == "CSV":
                tally_csv(hashed, data.key, report.columns, tally)
            else:
                tally_parquet(hashed, tally)
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
