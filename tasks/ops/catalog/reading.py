"""The catalog's requests: one listing of the job's archive prefix, the source's day prefixes by
delimiter listing (or one probe per day when days are no folders), one small GET per committed
day's manifest index, the last scrub's result, and a HEAD per archive restored lately. Each
counts what it sent in the read's ``RequestCounter``."""

from __future__ import annotations

from s3arch.core.errors import ArchiverError
from s3arch.format.manifest import ARCHIVE_SUFFIXES, parse_index
from s3arch.io.listed import ListedObject, listed_objects
from s3arch.io.sources import holds_objects
from s3arch.io.store import Store
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.catalog.counter import RequestCounter
from s3arch.ops.catalog.prefixes import archive_prefix
from s3arch.ops.catalog.scrub_result import read_scrub_result
from s3arch.stored.manifests import read_through


def list_archives(store: Store, job: ArchiveJob, counter: RequestCounter) -> dict[str, ListedObject]:
    bucket, prefix = job.destination.bucket, archive_prefix(job)
    out: dict[str, ListedObject] = {}
    for page in store.pages("list_objects_v2", f"list the archives s3://{bucket}/{prefix}",
                            Bucket=bucket, Prefix=prefix):
        counter.add("LIST")
        for obj in listed_objects(page):
            out[obj.key] = obj
    return out


def list_days(store: Store, job: ArchiveJob, parent: str, counter: RequestCounter) -> set[str]:
    """Day prefixes under ``parent`` that hold at least one object."""
    bucket = job.source.bucket
    found: set[str] = set()
    for page in store.pages("list_objects_v2", f"list the day prefixes of s3://{bucket}/{parent}",
                            Bucket=bucket, Prefix=parent, Delimiter="/"):
        counter.add("LIST")
        found |= {p["Prefix"] for p in page.get("CommonPrefixes") or ()}
    return found


def day_present(store: Store, job: ArchiveJob, name: str, counter: RequestCounter) -> set[str]:
    """``{name}`` if its source holds an object."""
    holds, lists = holds_objects(store, job.source.bucket, name, job.max_prefixes)
    counter.add("LIST", lists)
    return {name} if holds else set()


def read_summary(store: Store, layout, indexed: bool, counter: RequestCounter):
    """((header, summary), problem): from the index, else from the manifest read through; a
    damaged index is the day's problem, its figures still shown from the manifest."""
    problem = None
    try:
        if indexed:
            counter.add("GET")
            got = store.read(layout.bucket, layout.index_key, f"read s3://{layout.bucket}/{layout.index_key}",
                             missing_ok=True)
            if got is not None:
                index, damage = parse_index(got["Body"])
                if index is not None and "summary" in index:
                    return (index["header"], index["summary"]), None
                if damage:
                    problem = f"index s3://{layout.bucket}/{layout.index_key} {damage}; read from the manifest"
        # No index (a run died between manifest and index, or an old manifest): read it through.
        counter.add("GET")
        header, summary, _ = read_through(store, layout)
        return (header, summary), problem
    except ArchiverError as exc:
        return None, f"{problem}; {exc}" if problem else str(exc)


def scrub_days(store: Store, job: ArchiveJob, counter: RequestCounter) -> dict:
    """The last scrub's verdict on each day it saw, by ISO date."""
    counter.add("GET")
    result = read_scrub_result(store, job)
    return (result or {}).get("days", {})


def restored_until(store: Store, layout, listed: dict, counter: RequestCounter) -> str | None:
    """When the restored copy of a day's GLACIER-class archive expires, if there is one."""
    from s3arch.restore.glacier import NEEDS_RESTORE, archive_state

    key = next((layout.archive_key(s) for s in ARCHIVE_SUFFIXES if layout.archive_key(s) in listed), None)
    if key is None:
        return None
    counter.add("HEAD")
    try:
        state = archive_state(store, layout.bucket, key)
    except ArchiverError:
        return None
    if state.storage_class in NEEDS_RESTORE and state.state == "restored":
        return state.expiry
    return None
