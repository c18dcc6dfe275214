"""Where a segmented run's temporaries live: small STANDARD objects under one prefix beside
the archive, ``STEM.segments/``, so that one listing finds them all for the cleanup.

``plan.json`` (the plan in progress), and per run ``RUN``: ``RUN/listing/NNNNNN.jsonl.gz``
(the plan's listing, recorded in chunks), and per segment ``k``: ``RUN/k.held`` (the bytes
kept back for the assembler), ``RUN/k.manifest.jsonl.gz`` (its records) and ``RUN/k.json``
(its result, written last: a segment is done exactly when it exists); and
``sized-TOKEN.jsonl.gz``, a sizing's pages handed to the task that plans (``sized``). All are
deleted once the prefix is committed or its run abandoned."""

from __future__ import annotations

from s3arch.format.manifest import ArchiveLayout


def segments_prefix(layout: ArchiveLayout) -> str:
    """Where every run's segment temporaries live: one prefix to list and clean."""
    return layout.stem + ".segments/"


def plan_key(layout: ArchiveLayout) -> str:
    """The plan of the segmented run in progress, for segment and assemble tasks elsewhere."""
    return segments_prefix(layout) + "plan.json"


def segment_key(layout: ArchiveLayout, run: str, k: int, suffix: str) -> str:
    """A temporary of segment ``k`` of run ``run`` (``suffix``: ``.held``, ``.json``, ...)."""
    return f"{segments_prefix(layout)}{run}/{k:05d}{suffix}"


def chunk_key(layout: ArchiveLayout, run: str, n: int) -> str:
    """Chunk ``n`` of the listing run ``run``'s plan recorded."""
    return f"{segments_prefix(layout)}{run}/listing/{n:06d}.jsonl.gz"
