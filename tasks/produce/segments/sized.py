"""A large prefix's first pages, as its sizing listed them, handed from the task that sized it to
the task that plans its segments (the archive DAG's plan or size task to its prepare task), so
that the plan lists only what comes after them: no key of the prefix is listed twice in a run.

The pages are a segment temporary (tasks/produce/segments/keys.py), ``sized-TOKEN.jsonl.gz``:
gzipped JSON lines, one per listing page, ``[keys, sizes, etags, seconds since the epoch,
storage classes]``. The hand-off the sizing task passes on (an XCom) names it, with when its
listing started and what it holds. The planning task uses it only if it is at most
``HANDOFF_MAX_AGE`` old and still there; otherwise it lists the prefix from its first key, as
without one. Either way the plan is what a listing of the prefix shows: an object removed
since the pages were listed fails its segment as one removed after the plan's own listing
does (``PlanOutdated``), and one added among them is a late object of the next run.

The temporary goes with the prefix's others: the planning task's cleanup of stale runs, or
the commit's. A run that never plans leaves it to the next run of the prefix.
"""

from __future__ import annotations

import gzip
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Callable

from s3arch.core.config import ArchiveSpec, WriteOptions
from s3arch.format.manifest import ArchiveLayout, layout_for
from s3arch.io.listed import ListedObject
from s3arch.io.store import Store
from s3arch.produce.segments.keys import segments_prefix
from s3arch.produce.segments.recorded import page_line, page_of
from s3arch.produce.segments.sizing import HandOff
from s3arch.produce.segments.temporaries import get_temporary, put_temporary

# A hand-off older than this is not used: the plan would be made of a listing that old. A
# scheduled run's prepare task starts seconds or minutes after its plan task. Its age is read
# on another worker's clock: one that seems from the future by up to HANDOFF_CLOCK_SKEW is
# taken as new.
HANDOFF_MAX_AGE, HANDOFF_CLOCK_SKEW = 3600.0, 300.0


@dataclass(frozen=True)
class SizedPages:
    """Where a sizing's pages are, and what they hold."""

    key: str
    listed_at: float  # epoch seconds: when the sizing's listing started
    objects: int
    last_key: str

    def to_dict(self) -> dict:
        return asdict(self)


def hand_off(options: WriteOptions, store: Store, layout: ArchiveLayout, pages: list[list[ListedObject]],
             listed_at: float) -> SizedPages:
    """Write the sizing's ``pages`` (in key order) for the task that plans the prefix."""
    pages = [page for page in pages if page]
    key = f"{segments_prefix(layout)}sized-{secrets.token_hex(8)}.jsonl.gz"
    body = gzip.compress(b"".join(page_line(page, classes=True) + b"\n" for page in pages), compresslevel=1)
    put_temporary(store, layout, options, key, body)
    return SizedPages(key, listed_at, sum(map(len, pages)), pages[-1][-1].key if pages else "")


def hand_off_for(spec_of: Callable[[str], ArchiveSpec], store: Store) -> HandOff:
    """What a sizing does with a large prefix's pages: ``hand_off`` them beside its archive,
    written as ``spec_of(prefix)`` writes."""
    def written(prefix: str, pages: list, listed_at: float) -> dict:
        spec = spec_of(prefix)
        layout = layout_for(spec.source, spec.destination)
        return hand_off(spec.write_options, store, layout, pages, listed_at).to_dict()

    return written


def taken_over(store: Store, layout: ArchiveLayout,
               handoff: dict | None) -> tuple[list[list[ListedObject]] | None, str]:
    """The pages a hand-off names, and a note for the run's result; None (the prefix is listed
    from its start) if there is none, it is too old, or its temporary is gone."""
    if not handoff:
        return None, ""
    sized = SizedPages(**handoff)
    age = time.time() - sized.listed_at
    if not -HANDOFF_CLOCK_SKEW <= age <= HANDOFF_MAX_AGE:
        return None, (f"the {sized.objects:,} objects the sizing listed were {age / 60:.0f} min old (the limit is "
                      f"{HANDOFF_MAX_AGE / 60:.0f}): the prefix was listed from its first key")
    body = get_temporary(store, layout, sized.key)
    if body is None:
        return None, (f"the {sized.objects:,} objects the sizing listed were cleaned up (by an earlier try or "
                      "another run of the prefix): the prefix was listed from its first key")
    pages = [page_of(line) for line in gzip.decompress(body).splitlines()]
    return pages, (f"the first {sized.objects:,} objects as the sizing listed them {max(0.0, age):.0f} s before; "
                   f"listed after {sized.last_key!r}")
