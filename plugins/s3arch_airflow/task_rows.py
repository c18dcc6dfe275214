"""A prefix's row: its line in an archive or restore task's result, in the XCom the report
reads, and in the report."""

from __future__ import annotations

ROWS_XCOM_KEY = "archive_rows"


def result_row(prefix: str, status: str, **values) -> dict:
    """One prefix's line in the task result and the report. ``requests`` (by operation) and
    ``cpu_s``: the run's bill (``ArchiveResult``'s; a segmented day's assemble row holds the
    whole day's, its prepare and segment steps' included)."""
    row = {"prefix": prefix, "status": status, "objects": 0, "bytes_in": 0, "bytes_out": 0,
           "ratio": 0.0, "seconds": 0.0, "archive": None, "manifest": None, "deleted": 0,
           "deletion": None, "cost": None, "error": None, "retryable": None, "segments": 1, "timings": None,
           "throttled": 0, "requests": None, "cpu_s": None}
    row.update(values)
    return row
