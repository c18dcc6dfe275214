"""One prefix produced as N segments and assembled into one archive (docs/FORMAT.md, "Segments").

A segment is a contiguous key range of the prefix. The plan lists the prefix once and cuts it
into segments balanced by bytes and object count; since a tar member's length follows from its
key and size alone, the plan also knows where in the tar stream each segment starts. Each
segment is then produced independently (another process, another machine):

- its tar members, cut on the archive's global block grid (block ``i`` always covers tar
  offsets ``[i * block_size, (i + 1) * block_size)``: a segment starting mid-block compresses
  the rest of that block as its own piece), compressed block by block as always;
- its compressed bytes go into the archive's one multipart upload, as parts from its own range
  of part numbers, except the first ``min_part`` bytes (the head) and a rest shorter than a
  part (the tail): those are kept back in a temporary object, because S3 wants every part but
  the last to be 5 MiB or more;
- its manifest records (offsets relative to its own compressed bytes) and its result (parts,
  CRCs, sizes) go to temporary objects as well.

The assembler writes the gzip header, joins tail ``k-1`` and head ``k`` into the part between
their interiors, adds the gzip trailer with the combined CRC32, and streams the final manifest
with the offsets shifted. It reads O(segments) small objects plus the records; it never reads
the archive. Readers cannot tell the result from a single-process archive.

Temporaries live under ``STEM.segments/RUN/`` in STANDARD, and are deleted once the prefix is
committed or its run abandoned (the commit protocol's stale-upload cleanup).

The layout, precisely (``STEM`` is the archive's, docs/FORMAT.md "Keys"; steps are the commit
protocol's, docs/FORMAT.md):

- **Plan.** One listing, cut into N contiguous key ranges (``start_after``, ``last_key``], balanced
  by bytes plus 150,000 per object; tar lengths follow from key and size (``member_size``), so
  segment k's first tar offset ``T_k`` is known. The listing is recorded as
  ``STEM.segments/RUN/listing/NNNNNN.jsonl.gz``: gzip, one line per listing page, a JSON array
  ``[[keys], [sizes], [etags], [last_modified]]`` (seconds since 1970-01-01 UTC, to the
  microsecond), up to 20 pages of one key range per file, in key order; ``plan.json``'s ``listing``
  names them as ``[first key, last key, objects, object key]``, in key order. Segments read these,
  never the source's listing (without ``listing``, each lists its range). An object gone or
  rewritten by then fails the segment with ``PlanOutdated``, not retried: it needs a new plan
  (CLI: exit 3; Airflow: clear ``prepare``).
- **Segment k** writes its members from ``T_k`` on the global block grid: if ``T_k`` falls inside
  block ``b``, its first piece holds tar bytes ``[T_k, (b+1)*block_size)``, compressed alone and
  sync-flushed; its last piece likewise ends at ``T_(k+1)``. Only the last segment writes the
  end-of-archive blocks and ends the deflate stream.
- **Upload**, one multipart upload: with ``P = floor(9,999 / N)``, segment k uploads parts
  ``k*P + 2`` to ``(k+1)*P``, and keeps back its first ``min_part`` bytes (head) and a rest shorter
  than ``min_part`` (tail) in ``STEM.segments/RUN/k.held``. The assembler writes part ``k*P + 1``
  (the tails before segment k and its head: every part but the last is at least 5 MiB) and part
  ``N*P + 1`` (the last tail and the trailer), and completes with exactly the parts the
  segments' results list (a segment run twice replaced its own).
- **Results.** Segment k writes ``STEM.segments/RUN/k.manifest.jsonl.gz`` (its records, ``range``
  relative to its own compressed bytes, then a ``summary``: its parts, head and tail lengths,
  CRC32 of its tar and of its compressed bytes, first and last block, where its last block's
  piece starts) and, last, ``k.json`` with that summary: it is done exactly when ``k.json`` exists.
- **Assembly** writes the gzip header, the boundary parts, the trailer (CRC32 combined from the
  segments', ISIZE from their lengths) and the manifest: each ``range`` shifted by the segment's
  offset; a record in a block shared with the previous segment starts at that block's first
  piece. Then it commits (steps 6-7) and deletes ``STEM.segments/``
  (an uncommitted run's are removed by the next, step 4).

The package, one module per job: ``sizing`` (is a prefix large), ``plan`` (where its segments start),
``produce`` (one segment, anywhere), ``assemble`` (the segments into the archive),
``keys`` and ``temporaries`` (what segments leave for the assembler: where, and written and
read), ``recorded`` (the plan's listing, kept for the segments), ``sized`` (a sizing's pages,
handed from the task that sized to the one that plans), ``cleanup`` (what runs leave,
deleted) and ``workers`` (all of it on one machine, one process per segment).
"""

from s3arch.produce.segments.assemble import assemble
from s3arch.produce.segments.cleanup import delete_temporaries
from s3arch.produce.segments.keys import plan_key, segments_prefix
from s3arch.produce.segments.plan import (OBJECT_WEIGHT, PlanOutdated, SegmentPlan, SegmentRange, could_use_segments,
                                          open_upload, plan_segments, processes_within, read_plan, write_plan)
from s3arch.produce.segments.sizing import PrefixIsLarge, PrefixSize, SizingListing, size_prefix, size_prefixes
from s3arch.produce.segments.produce import SegmentTarget, produce_planned_segment, produce_segment, segment_done
from s3arch.produce.segments.workers import stream_segmented

__all__ = ["OBJECT_WEIGHT", "PlanOutdated", "PrefixIsLarge", "PrefixSize", "SegmentPlan", "SegmentRange", "SegmentTarget",
           "SizingListing", "assemble", "could_use_segments", "delete_temporaries", "open_upload", "plan_key",
           "plan_segments", "processes_within", "produce_planned_segment", "produce_segment", "read_plan",
           "segment_done", "segments_prefix", "size_prefix", "size_prefixes", "stream_segmented", "write_plan"]
