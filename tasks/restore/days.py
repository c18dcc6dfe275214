"""Reading a day whole: its archive and the late parts that followed it (tasks/format/day.py).

Every reader goes through here when given a day's manifest or archive: ``ls`` and ``extract``
see each key once, in its latest part (a key rewritten after it was archived is in two parts;
the later one is the current content), ``cat`` reads that part, and a restore asks for every
part's archive. Given a later part's own URL, a reader sees that part alone.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Callable, Iterator

from s3arch.core.config import S3Url
from s3arch.core.errors import BadArgument
from s3arch.core.stops import Cancel
from s3arch.format.day import Part
from s3arch.stored.days import committed_parts, day_records
from s3arch.format.manifest import ArchiveLayout
from s3arch.stored.manifests import find_records, iter_manifest
from s3arch.io.store import Store
from s3arch.restore.extract import ExtractResult, Selection, conflict_error, extract_to_dir, extract_to_s3
from s3arch.restore.reading import list_members


def day_members(store: Store, layout: ArchiveLayout) -> Iterator[dict]:
    """The records ``s3arch ls`` prints: each key once, from its latest part."""
    parts = committed_parts(store, layout)
    return day_records(store, parts) if len(parts) > 1 else list_members(store, layout)


def part_holding(store: Store, layout: ArchiveLayout, key: str) -> ArchiveLayout:
    """The layout of the latest part that holds ``key`` (``layout`` itself for a one-part day,
    whose reader then says the key is not there)."""
    parts = committed_parts(store, layout)
    for part in reversed(parts[1:]):
        if key in find_records(store, part.layout, [key])[1]:
            return part.layout
    return layout


def extract_day_to_s3(clients, layout: ArchiveLayout, target: S3Url, *, selection: Selection = Selection(),
                      cancel: Cancel | None = None, **options) -> ExtractResult:
    """``extract_to_s3`` over every part of the day, each key from its latest part. ``cancel``
    (the run's: tasks/core/stops.py) stops it before its next object or part, whichever part of
    the day it is in: ``Cancelled``, once the multipart uploads it started were aborted."""
    return _extract_day(clients, layout, selection, partial(extract_to_s3, target=target, cancel=cancel, **options))


def extract_day_to_dir(clients, layout: ArchiveLayout, directory: Path, *, selection: Selection = Selection(),
                       cancel: Cancel | None = None, **options) -> ExtractResult:
    """``extract_to_dir`` over every part of the day, each key from its latest part; ``cancel``
    as ``extract_day_to_s3``'s."""
    return _extract_day(clients, layout, selection,
                        partial(extract_to_dir, directory=directory, cancel=cancel, **options))


def _extract_day(clients, layout: ArchiveLayout, selection: Selection,
                 extract: Callable[..., ExtractResult]) -> ExtractResult:
    """``extract`` (one part's extract, to its target) over every part of the day, each key from
    its latest part. Conflicts are gathered over all parts, then raised."""
    store = clients.store
    parts = committed_parts(store, layout)
    if len(parts) <= 1:
        return extract(clients, layout, selection=selection)
    later: set[str] = set()  # keys of the parts after the one being extracted: superseded there
    plans = []
    for part in reversed(parts):
        plans.append((part, _selection_in(store, part, selection, later), frozenset(later)))
        later |= {r["key"] for r in iter_manifest(store, part.layout) if r["type"] == "object"}
    if selection.keys is not None:
        missing = [k for k in selection.keys if k not in later]
        if missing:
            raise BadArgument(f"{len(missing)} of the {len(selection.keys)} keys asked for are in no part of "
                              f"{layout.manifest_url}: {', '.join(repr(k) for k in missing[:5])}",
                              hint="s3arch ls lists the archived keys; nothing was extracted")
    total: ExtractResult | None = None
    for part, chosen, superseded in reversed(plans):
        if chosen is not None:
            result = extract(clients, part.layout, selection=chosen, skip_keys=superseded, raise_conflicts=False)
            total = result if total is None else _sum(total, result)
    if total is None:  # no keys asked for
        return extract(clients, layout, selection=selection)
    if total.conflicts:
        raise conflict_error(total)
    return total


def _selection_in(store: Store, part: Part, selection: Selection, later: set[str]) -> Selection | None:
    """What to extract from ``part``: None when it holds none of the keys asked for."""
    if selection.keys is None:
        return selection
    wanted = [k for k in selection.keys if k not in later]
    held = find_records(store, part.layout, wanted)[1] if wanted else {}
    keys = [k for k in wanted if k in held]
    return Selection.of(keys) if keys else None


def _sum(a: ExtractResult, b: ExtractResult) -> ExtractResult:
    return replace(a, archive=f"{a.archive}, {b.archive}", objects=a.objects + b.objects, bytes=a.bytes + b.bytes,
                   skipped_same=a.skipped_same + b.skipped_same, conflicts=a.conflicts + b.conflicts,
                   gets=a.gets + b.gets, bytes_fetched=a.bytes_fetched + b.bytes_fetched)
