"""Assembling the produced segments into the archive (the layout: s3arch/produce/segments/__init__.py).

The assembler writes the gzip header, joins tail ``k-1`` and head ``k`` into the part between
their interiors, adds the gzip trailer with the combined CRC32, and streams the final manifest
with the offsets shifted. It reads O(segments) small objects plus the records; it never reads
the archive.
"""

from __future__ import annotations

import json
import re
import time
from typing import NamedTuple

from isal import isal_zlib

from s3arch.format.compression import codec_for
from s3arch.core.config import ArchiveSpec
from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import IntegrityError, SegmentMissing
from s3arch.format.manifest import ArchiveLayout, dump_record
from s3arch.stored.manifests import ManifestWriter, iter_manifest_lines
from s3arch.io.s3 import S3Clients
from s3arch.produce.streamed import StreamedArchive, manifest_header, open_manifest
from s3arch.io.upload import PartUploader, SharedUpload, UploadedPart
from s3arch.produce.segments.plan import SegmentPlan
from s3arch.produce.segments.produce import segment_done
from s3arch.produce.segments.temporaries import get_temporary
from s3arch.io.store import Store
from s3arch.io.spent import bill_sum


def assemble(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, plan: SegmentPlan,
             coordinator: StreamCoordinator, keep_open: bool = False) -> StreamedArchive:
    """Join the produced segments into the archive's upload and stream the final manifest.
    Both uploads stay open; the commit protocol completes them; ``coordinator`` (the commit
    protocol's) stops them from above. ``keep_open``: a failed commit leaves the archive's
    upload (every segment's work) for a retry of the assembly; the next run of the prefix
    aborts it if no retry comes. What the plan and the segments' results say their steps spent
    is the archive's ``elsewhere`` (``recorded_bill``)."""
    started = time.monotonic()
    results = _results(spec, clients.store, layout, plan)
    codec = codec_for(spec.codec, spec.effective_level)
    raw_crc = tar_total = 0
    for r in results:
        raw_crc = codec.combine(raw_crc, r["raw_crc32"], r["tar_bytes"])
        tar_total += r["tar_bytes"]
    if tar_total != plan.tar_size:
        raise IntegrityError(f"segments hold {tar_total} tar bytes, the plan {plan.tar_size}")
    uploader = PartUploader(clients.store, layout.bucket, plan.archive_key,
                            extra_args=spec.write_options.encryption_args,
                            coordinator=coordinator, shared=SharedUpload(plan.upload_id, owned=not keep_open))
    joined = _join(clients.store, layout, plan, results, uploader, codec.header(),
                   codec.trailer(raw_crc, tar_total))
    parts_done = time.monotonic()
    manifest = open_manifest(clients.store, layout, manifest_header(spec, layout, plan.archive_key),
                             spec.write_options, coordinator)
    try:
        _merge_records(clients.store, layout, plan, results, joined.bases, manifest)
    except BaseException:
        manifest.abort()
        raise
    return StreamedArchive(uploader=uploader, manifest=manifest, objects=plan.objects,
                           bytes_in=sum(r["bytes_in"] for r in results), bytes_out=joined.size,
                           tar_bytes=tar_total, blocks=results[-1]["last_block"] + 1, archive_crc32=joined.crc32,
                           gets=sum(r["gets"] for r in results),
                           tags_unread=sum(r.get("tags_unread", 0) for r in results),
                           throttled=sum(r.get("throttled", 0) for r in results),
                           peak_buffered=max(r["peak_buffered"] for r in results),
                           short_of_min_billable=plan.short_of_min_billable, raw_crc32=raw_crc,
                           segments=plan.count, elsewhere=recorded_bill(plan, results), timings={
                               "plan_s": plan.planned_in_s,
                               "slowest_segment_s": max(r.get("seconds", 0.0) for r in results),
                               "assemble_archive_s": parts_done - started,  # O(segments)
                               "assemble_manifest_s": time.monotonic() - parts_done})  # O(objects)


def recorded_bill(plan: SegmentPlan, results: list[dict]) -> dict:
    """What the step that wrote the plan and the steps that produced the segments spent, as
    they recorded it (nothing for records written before they did): requests by operation,
    CPU-seconds. The whole bill of a run whose steps are other processes (Airflow tasks); a
    run on one machine counts its workers itself (``workers.stream_segmented``)."""
    return bill_sum({"requests": plan.requests, "cpu_s": plan.cpu_s}, *results)


def _results(spec: ArchiveSpec, store: Store, layout: ArchiveLayout, plan: SegmentPlan) -> list[dict]:
    """Every segment's result; SegmentMissing names the first one not produced."""
    results = []
    for k in range(plan.count):
        result = segment_done(store, layout, plan, k)
        if result is None:
            raise SegmentMissing(f"segment {k + 1}/{plan.count} of {spec.source} was not produced",
                                 hint=f"run it again (in Airflow: clear the task '{spec.source.key} "
                                      f"[{k + 1}/{plan.count}]' with downstream), then assemble")
        results.append(result)
    return results


class _Joined(NamedTuple):
    bases: list[int]  # where each segment's bytes start in the archive
    size: int
    crc32: int


def _join(store: Store, layout: ArchiveLayout, plan: SegmentPlan, results: list[dict], uploader: PartUploader,
          header: bytes, trailer: bytes) -> _Joined:
    """Upload the parts between the segments' interiors (header or previous tails, then this
    head), the final part (the last tails and the trailer), and hand the uploader every part
    in order. Returns where each segment's bytes start in the archive, its size and CRC32."""
    parts: list[UploadedPart] = []
    held = bytearray(header)
    bases, base = [], len(header)
    crc = isal_zlib.crc32(header)
    for k, r in enumerate(results):
        bases.append(base)
        base += r["size"]
        crc = isal_zlib.crc32_combine(crc, r["crc32"], r["size"])
        kept = get_temporary(store, layout, plan.temp_key(layout, k, ".held")) or b""
        if len(kept) != r["head"] + r["tail"]:
            raise IntegrityError(f"segment {k + 1}: kept-back bytes are {len(kept)}, expected {r['head'] + r['tail']}")
        held += kept[:r["head"]]
        if r["parts"]:
            parts.append(uploader.put_part(plan.ranges[k].first_part - 1, bytes(held)))
            held.clear()
            parts += [UploadedPart(*p) for p in r["parts"]]
        held += kept[r["head"]:]
    held += trailer
    crc = isal_zlib.crc32_combine(crc, isal_zlib.crc32(trailer), len(trailer))
    parts.append(uploader.put_part(plan.final_part, bytes(held)))
    uploader.include(parts)
    return _Joined(bases, base + len(trailer), crc)


_OBJECT = b'{"type":"object",'
# The last two fields of an object record as the pipeline writes it (tasks/produce/pipeline.py,
# where its compressed bytes lie, set once its blocks are out). Only a line's end is matched:
# no string in it can end there.
_WHERE = re.compile(rb',"block":(\d+),"range":\[(\d+),(\d+)\]\}$')


def shifted_line(line: bytes, first_block: int, first_start: int, base: int) -> bytes:
    """A segment's object record (one line, as written, without its newline) as the manifest's:
    its ``range`` shifted by ``base``, where the segment's bytes start in the archive, and a
    record in the segment's ``first_block`` (shared with the segment before) starting at that
    block's first piece, ``first_start``."""
    where = _WHERE.search(line)
    if where is None:  # not as the pipeline writes records: by the record
        record = json.loads(line.decode("utf-8", "surrogateescape"))
        block, (start, end) = record.pop("block"), record.pop("range")
        line = dump_record(record)[:-2]  # without "}\n"
    else:
        block, start, end = map(int, where.groups())
        line = line[:where.start()]
    start = first_start if block == first_block else base + start
    return b'%s,"block":%d,"range":[%d,%d]}\n' % (line, block, start, base + end)


def _type_of(line: bytes) -> str | None:
    return json.loads(line.decode("utf-8", "surrogateescape")).get("type")


def _merge_records(store: Store, layout: ArchiveLayout, plan: SegmentPlan, results: list[dict], bases: list[int],
                   manifest: ManifestWriter) -> None:
    """Every segment's records into the manifest, their compressed ranges shifted to where
    the segment's bytes lie in the archive."""
    block_start: dict[int, int] = {}
    for k, r in enumerate(results):
        first_start = block_start.setdefault(r["first_block"], bases[k])
        if r["last_block"] != r["first_block"]:
            block_start[r["last_block"]] = bases[k] + r["last_block_start"]
        count = 0
        # Each line is passed on as written but for its range, patched in place: parsing and
        # encoding every record again cost a segmented run more than its plan's listing.
        for line in iter_manifest_lines(store, ArchiveLayout(layout.bucket, plan.temp_key(layout, k, ""))):
            if not line.startswith(_OBJECT) and _type_of(line) != "object":
                continue  # its summary
            manifest.add_object_line(shifted_line(line, r["first_block"], first_start, bases[k]))
            count += 1
        if count != r["objects"]:
            raise IntegrityError(f"segment {k + 1} records {count} objects, its result {r['objects']}")
