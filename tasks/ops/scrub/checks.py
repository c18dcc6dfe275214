"""The checks of one archive against its manifest (index, HEADs, locks, sampled members) and of
its day's source for objects no part holds: what a scrub asks of each archive."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from datetime import date, datetime, timedelta

from s3arch.core.config import S3Url
from s3arch.core.errors import ArchiveDamaged, ArchiverError, BadArgument, IntegrityError
from s3arch.core.timestamps import parse_s3_time
from s3arch.stored.days import committed_parts
from s3arch.format.manifest import layout_for, parse_index
from s3arch.stored.manifests import read_chunk, read_through
from s3arch.io.listed import listed_objects
from s3arch.io.sources import resolved
from s3arch.io.store import Store
from s3arch.ops.catalog.counter import RequestCounter
from s3arch.ops.archive_job import ArchiveJob
from s3arch.ops.scrub.result import RETRIEVAL_PER_GB, Drift
from s3arch.ops.split_days import unarchived_splits
from s3arch.protocol.parts import check_late
from s3arch.restore.glacier import NEEDS_RESTORE
from s3arch.restore.reading import read_member


def list_archives(store: Store, bucket: str, prefix: str, counter: RequestCounter) -> dict:
    listed = {}
    for page in store.pages("list_objects_v2", f"list the archives s3://{bucket}/{prefix}",
                            Bucket=bucket, Prefix=prefix):
        counter.add("LIST")
        listed.update({o.key: o for o in listed_objects(page)})
    return listed


def _head(store: Store, bucket: str, key: str, counter: RequestCounter, **kwargs) -> dict | None:
    counter.add("HEAD")
    return store.maybe("head_object", f"check s3://{bucket}/{key}", Bucket=bucket, Key=key, **kwargs)


def _until(head: dict) -> datetime | None:
    value = head.get("ObjectLockRetainUntilDate")
    if not value:
        return None
    return value if isinstance(value, datetime) else parse_s3_time(value)


def check_day(job: ArchiveJob, store: Store, layout, day: date, prefix: str, listed: dict, sample: int,
               rng: random.Random, now: datetime, counter: RequestCounter) -> tuple[list[Drift], int, int, float]:
    iso = day.isoformat()
    drift: list[Drift] = []
    index_url = f"s3://{layout.bucket}/{layout.index_key}"
    try:
        index = index_head = None
        if layout.index_key in listed:
            counter.add("GET")
            # The GET answers what a HEAD of the index would (size, ETag, retention): no HEAD.
            index_head = store.read(layout.bucket, layout.index_key, f"read {index_url}", missing_ok=True)
            if index_head is not None:
                index, damage = parse_index(index_head["Body"])
                if damage:
                    drift.append(Drift(iso, prefix, "index damaged", f"{index_url} {damage}; the manifest was read"))
        picked: list[dict] = []
        if index is not None and "summary" in index:
            header, summary = index["header"], index["summary"]
        else:
            # No usable index: the manifest read through gives header, summary and the sample.
            counter.add("GET")
            try:
                header, summary, picked = read_through(store, layout, sample if index is None else 0, rng)
            except (ArchiveDamaged, IntegrityError) as exc:
                return drift + [Drift(iso, prefix, "manifest damaged", str(exc))], 0, 0, 0.0
        if index_head is None and not _predates_indexes(header):
            drift.append(Drift(iso, prefix, "index missing", f"{layout.manifest_url} has no index {index_url}"))
        archive_key = header["archive"]["key"]
        url = f"s3://{layout.bucket}/{archive_key}"
        with ThreadPoolExecutor(2) as heads:
            a = heads.submit(_head, store, layout.bucket, archive_key, counter, ChecksumMode="ENABLED")
            m = heads.submit(_head, store, layout.bucket, layout.manifest_key, counter)
            archive, manifest = a.result(), m.result()
        if archive is None:
            return drift + [Drift(iso, prefix, "archive missing", f"{layout.manifest_url} commits {url}, which is gone")], \
                0, 0, 0.0
        changes = _changes(iso, prefix, summary, index, archive, manifest)
        drift += changes
        drift += _check_locks(job, iso, prefix, header, {"archive": archive, "manifest": manifest, "index": index_head})
        sampled = sampled_bytes = 0
        # Sampled only by a manifest and archive that are still what was recorded: the index's
        # chunk offsets are of the recorded manifest.
        if not changes and sample > 0 and _readable(archive):
            if index is not None and index.get("chunks"):
                try:
                    picked = _pick_from_index(store, layout, index, sample, rng, counter)
                except (ArchiveDamaged, IntegrityError, ValueError) as exc:  # a chunk that does not inflate or parse
                    return drift + [Drift(iso, prefix, "manifest damaged", f"{layout.manifest_url}: {exc}")], \
                        0, 0, 0.0
            sampled, sampled_bytes, bad = _check_members(store, layout, header, picked, counter)
            drift += [Drift(iso, prefix, "member differs", problem) for problem in bad]
        retrieval = sampled_bytes / (1 << 30) * RETRIEVAL_PER_GB.get(archive.get("StorageClass") or "STANDARD", 0.0)
        return drift, sampled, sampled_bytes, retrieval
    except ArchiverError as exc:
        return drift + [Drift(iso, prefix, "unreadable", str(exc), retryable=exc.retryable)], 0, 0, 0.0



def _changes(iso: str, prefix: str, summary: dict, index: dict | None, archive: dict,
             manifest: dict | None) -> list[Drift]:
    """The archive's differences from what its manifest recorded (size, ETag, CRC32C), and the
    manifest's from what its index recorded (size)."""
    drift = []
    expected = {"size": summary.get("archive_size"), "etag": summary.get("archive_etag"),
                "crc32c": summary.get("archive_crc32c") or None}
    got = {"size": archive.get("ContentLength"), "etag": archive.get("ETag"), "crc32c": archive.get("ChecksumCRC32C")}
    differs = [k for k in got if expected[k] is not None and got[k] is not None and got[k] != expected[k]]
    if differs:
        drift.append(Drift(iso, prefix, "archive changed",
                           ", ".join(f"{k} {got[k]} (manifest: {expected[k]})" for k in differs)))
    if manifest is not None and index is not None and \
            index.get("manifest_size") not in (None, manifest.get("ContentLength")):
        drift.append(Drift(iso, prefix, "manifest changed",
                           f"{manifest.get('ContentLength')} bytes, the index recorded {index['manifest_size']}"))
    return drift

def late_drift(job: ArchiveJob, store: Store, layout, day: date, prefix: str, counter: RequestCounter) -> list[Drift]:
    """Objects in the day's source ``prefix`` that no part holds. Its requests: the day's state
    and parts (HEAD and GET per part, one LIST), the day index, the source's listing, and the
    manifests only when the index's digest does not settle it."""
    source = S3Url(job.source.bucket, prefix)
    try:
        parts = committed_parts(store, layout, source)
        if not parts:
            return []  # gone since the listing: the day's own check reports it
        # A pattern is listed as the prefixes it expands to now (tasks/io/sources.py).
        check = check_late(store, resolved(store, source, job.max_prefixes), parts)
    except (ArchiveDamaged, IntegrityError):
        return []  # the day's own check reports the damage
    except BadArgument:
        return []  # the pattern matches no prefix any more: nothing in the source, nothing late
    except ArchiverError as exc:
        return [Drift(day.isoformat(), prefix, "unreadable", f"checking for objects newer than the archive: {exc}",
                      retryable=exc.retryable)]
    counter.add("HEAD", len(parts))
    counter.add("GET", len(parts) + 1 + (len(parts) if check.manifests_read else 0))
    counter.add("LIST", 2 + check.listed // 1000)
    if not check.late:
        return []
    changed = f", {check.changed:,} of them rewritten since" if check.changed else ""
    where = f"{prefix}: " if job.split_by else ""  # which of the day's archives
    return [Drift(day.isoformat(), prefix, "newer than archive",
                  f"{where}{check.late:,} objects newer than its archive{changed} (first: {check.found.first[0]})")]


def unarchived_drift(job: ArchiveJob, store: Store, day: date, listed: dict, counter: RequestCounter) -> list[Drift]:
    """A split day some of whose archives are committed: each value holding objects with none."""
    archived = [name for name in job.parts_archived(day, listed)
                if layout_for(S3Url(job.source.bucket, name), job.destination).manifest_key in listed]
    if not archived:
        return []  # a day never archived is the catalog's "missing", not drift
    try:
        missing = unarchived_splits(job, store, day, archived, counter)
    except ArchiverError as exc:
        return [Drift(day.isoformat(), job.prefix_for(day), "unreadable", f"listing the day's split values: {exc}",
                      retryable=exc.retryable)]
    return [Drift(day.isoformat(), name, "split not archived",
                  f"{name} holds objects and has no archive; the day's other {len(archived)} archive(s) are committed")
            for name in missing]


def _predates_indexes(header: dict) -> bool:
    """s3arch 0.1 wrote manifests without an index (docs/FORMAT.md): none missing there."""
    version = str(header.get("tool", "")).removeprefix("s3arch ")
    return version == "0.1" or version.startswith("0.1.")


def _check_locks(job: ArchiveJob, iso: str, prefix: str, header: dict, heads: dict[str, dict | None]) -> list[Drift]:
    """Each object's retention must end no earlier than recorded: the job's ``retain_days``
    from when the run started (archive, manifest and index were all created under it), and
    for the archive and the index the manifest's own (made with the same lock arguments)."""
    job_until = None
    if job.object_lock and job.retain_days and header.get("started"):
        job_until = (f"the job's {job.retain_days} days", parse_s3_time(header["started"]) + timedelta(days=job.retain_days))
    manifest = heads.get("manifest")
    manifest_until = _until(manifest) if manifest is not None else None
    drift = []
    for name, head in heads.items():
        if head is None:
            continue
        recorded = [job_until] if job_until else []
        if name != "manifest" and manifest_until is not None:
            recorded.append(("the manifest's", manifest_until))
        if not recorded:
            continue
        wanted_name, wanted = max(recorded, key=lambda r: r[1])
        until = _until(head)
        if until is None:
            drift.append(Drift(iso, prefix, "lock shorter",
                               f"no retention on the {name}; {wanted_name} ends {wanted:%Y-%m-%d}"))
        # The archive's upload is created before the manifest's: a few minutes' slack.
        elif until < wanted - timedelta(minutes=10):
            drift.append(Drift(iso, prefix, "lock shorter", f"the {name} is retained until {until:%Y-%m-%d %H:%M}, "
                                                            f"{wanted_name} until {wanted:%Y-%m-%d %H:%M}"))
    return drift


def _readable(head: dict) -> bool:
    storage_class = head.get("StorageClass") or "STANDARD"
    if storage_class not in NEEDS_RESTORE:
        return True
    restore = head.get("Restore") or ""
    return 'ongoing-request="false"' in restore


def _pick_from_index(store: Store, layout, index: dict, sample: int, rng: random.Random,
                     counter: RequestCounter) -> list[dict]:
    """``sample`` random member records: one GET of a manifest chunk each (at most)."""
    chunks = index["chunks"]
    records: list[dict] = []
    for i in sorted({rng.randrange(len(chunks)) for _ in range(sample)}):
        counter.add("GET")
        records += read_chunk(store, layout, index, i)
    return rng.sample(records, min(sample, len(records)))


def _check_members(store: Store, layout, header: dict, picked: list[dict],
                   counter: RequestCounter) -> tuple[int, int, list[str]]:
    """Read each picked member by ranged GET (one GET of its blocks) and check its SHA-256."""
    bad, read = [], 0
    for record in picked:
        start, end = record["range"]
        counter.add("GET")
        read += end - start  # what the ranged GET asks for, and is billed
        try:
            size, sha256 = read_member(store, layout.bucket, header, record)
        except ArchiverError:
            raise  # S3 or the network, typed at the I/O: not drift
        except Exception as exc:  # a damaged deflate stream is drift, not a crash
            bad.append(f"{record['key']}: does not decompress ({exc})")
            continue
        if size != record["size"] or sha256 != record["sha256"]:
            bad.append(f"{record['key']}: SHA-256 differs from the manifest's")
    return len(picked), read, bad
