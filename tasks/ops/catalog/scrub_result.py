"""The last scrub's result of a job (tasks/ops/scrub/): where it is kept, reading it, and what
its verdict on a day says."""

from __future__ import annotations

import json

from s3arch.io.store import Store
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.catalog.prefixes import archive_prefix

SCRUB_DIR = "_s3arch-scrub/"  # under the job's archive prefix: <job>/latest.json and one object per scrub


def scrub_result_key(job: ArchiveJob) -> str:
    return f"{archive_prefix(job)}{SCRUB_DIR}{job.name}/latest.json"


def read_scrub_result(store: Store, job: ArchiveJob) -> dict | None:
    bucket, key = job.destination.bucket, scrub_result_key(job)
    got = store.read(bucket, key, f"read the scrub result s3://{bucket}/{key}", missing_ok=True)
    if got is None:
        return None
    try:
        result = json.loads(got["Body"])
    except ValueError:
        return None
    # Another shape (edited by hand, damaged) is no result: the next scrub writes a whole one.
    if not isinstance(result, dict) or not isinstance(result.get("days", {}), dict):
        return None
    return result


def was_committed(verdict: dict | None) -> bool:
    """Whether a scrub's verdict on a day (latest.json) saw a committed archive there: verified,
    or drift of a committed day (anything but an archive no manifest committed)."""
    if not verdict:
        return False
    return bool(verdict.get("verified") or verdict.get("last_verified")
                or any(d.get("kind") != "archive without manifest" for d in verdict.get("drift") or ()))
