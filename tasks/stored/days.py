"""A day's parts as objects in S3 (tasks/format/day.py says what they are): which parts are
committed, their records merged in key order, the day index read and written, and a day's
later parts dropped when it is overwritten; every request through the store."""

from __future__ import annotations

import heapq
from typing import Iterable, Iterator

from s3arch.core.config import S3Url
from s3arch.core.errors import ArchiveDamaged, DestinationConflict
from s3arch.format.day import (PART_INFIX, DayIndex, Part, day_index_key, parse_day_index, part_layout,
                               part_number)
from s3arch.format.manifest import STORED_DAMAGE, ArchiveLayout, Committed
from s3arch.io.keys import key_order
from s3arch.io.listing import iter_pages
from s3arch.io.store import Store
from s3arch.stored.manifests import iter_manifest, read_committed


def committed_parts(store: Store, day: ArchiveLayout, source: S3Url | None = None,
                    first: Committed | None = None) -> list[Part]:
    """Every committed part of the day, in order: [] if part 1 is not committed. Part 1's
    state is read as every run reads it (or is ``first``, read already); later parts are
    found by one LIST."""
    first = first or read_committed(store, day, source)
    if first is None:
        return []
    parts = [Part(1, day, first)]
    for number in _later_part_numbers(store, day):
        layout = part_layout(day, number)
        committed = read_committed(store, layout, source)
        if committed is None:  # deleted between the LIST and the read
            raise ArchiveDamaged(f"{layout.manifest_url} was listed but is gone", hint=STORED_DAMAGE)
        if number != len(parts) + 1:
            raise ArchiveDamaged(f"the parts of {day.manifest_url} skip from {len(parts)} to {number}: "
                                 f"part {len(parts) + 1}'s manifest is missing", hint=STORED_DAMAGE)
        if committed.header["source"] != first.header["source"]:
            raise DestinationConflict(f"{layout.manifest_url} archives {committed.header['source']}, "
                                      f"not {first.header['source']}",
                                      hint="a prefix ending in .part-NNNN maps onto another day's parts; "
                                           "archive one of them into another destination")
        parts.append(Part(number, layout, committed))
    return parts


def _later_part_numbers(store: Store, day: ArchiveLayout) -> list[int]:
    numbers = (part_number(day, entry.key) for page in iter_pages(store, day.bucket, day.stem + PART_INFIX)
               for entry in page)
    return sorted(n for n in numbers if n is not None)


def day_records(store: Store, parts: Iterable[Part], every: bool = False) -> Iterator[dict]:
    """The object records of every part merged in key order, one per key: a key held by more
    than one part (rewritten after it was archived) has the record of its latest part, with
    ``part`` set to that part's number. ``every``: each part's record of such a key, the
    latest part's first."""
    def records(part: Part) -> Iterator[tuple[bytes, int, dict]]:
        for record in iter_manifest(store, part.layout):
            if record["type"] == "object":
                yield key_order(record["key"]), -part.number, record

    last = None
    for order, negative_part, record in heapq.merge(*(records(p) for p in parts)):
        if order != last or every:
            last = order
            yield {**record, "part": -negative_part}


def day_objects(store: Store, parts: list[Part]) -> int:
    """How many keys the day holds (a key rewritten into a later part counts once)."""
    if len(parts) == 1:
        return parts[0].committed.summary["objects"]
    return sum(1 for _ in day_records(store, parts))


def drop_later_parts(store: Store, day: ArchiveLayout, parts: list[Part]) -> None:
    """Delete the later ``parts`` of a day being overwritten, the highest first (the parts
    left stay contiguous), then the day index."""
    for part in sorted(parts, key=lambda p: -p.number):
        for key in (part.layout.manifest_key, part.layout.index_key, part.committed.archive_key):
            _delete(store, day.bucket, key)
    _delete(store, day.bucket, day_index_key(day))


def _delete(store: Store, bucket: str, key: str) -> None:
    store.call("delete_object", f"delete s3://{bucket}/{key} (the day is being overwritten)", Bucket=bucket, Key=key)


def read_day_index(store: Store, day: ArchiveLayout) -> DayIndex | None:
    key = day_index_key(day)
    response = store.read(day.bucket, key, f"read the day index s3://{day.bucket}/{key}", missing_ok=True)
    return None if response is None else parse_day_index(response["Body"], f"s3://{day.bucket}/{key}")


def write_day_index(store: Store, day: ArchiveLayout, index: DayIndex, extra_args: dict | None = None) -> None:
    """Written by the run holding the day's lease, after the manifests it names."""
    key = day_index_key(day)
    store.call("put_object", f"write the day index s3://{day.bucket}/{key} (the parts are committed; the next run "
               "writes it again)", Bucket=day.bucket, Key=key, Body=index.to_json(), ContentType="application/json",
               **(extra_args or {}))
