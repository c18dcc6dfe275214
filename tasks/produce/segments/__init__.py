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

The package, one module per job: ``plan`` (is a prefix large, and where its segments start),
``produce`` (one segment, anywhere), ``assemble`` (the segments into the archive),
``keys`` and ``temporaries`` (what segments leave for the assembler: where, and written and
read), ``recorded`` (the plan's listing, kept for the segments), ``cleanup`` (what runs leave,
deleted) and ``workers`` (all of it on one machine, one process per segment).
"""

from s3arch.produce.segments.assemble import assemble
from s3arch.produce.segments.cleanup import delete_temporaries
from s3arch.produce.segments.keys import plan_key, segments_prefix
from s3arch.produce.segments.plan import (OBJECT_WEIGHT, PlanOutdated, PrefixIsLarge, PrefixSize, SegmentPlan, SegmentRange, SizingListing,
                   could_use_segments, open_upload, plan_segments, processes_within, read_plan, size_prefix,
                   size_prefixes, write_plan)
from s3arch.produce.segments.produce import SegmentTarget, produce_planned_segment, produce_segment, segment_done
from s3arch.produce.segments.workers import stream_segmented

__all__ = ["OBJECT_WEIGHT", "PlanOutdated", "PrefixIsLarge", "PrefixSize", "SegmentPlan", "SegmentRange", "SegmentTarget",
           "SizingListing", "assemble", "could_use_segments", "delete_temporaries", "open_upload", "plan_key",
           "plan_segments", "processes_within", "produce_planned_segment", "produce_segment", "read_plan",
           "segment_done", "segments_prefix", "size_prefix", "size_prefixes", "stream_segmented", "write_plan"]
