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
"""

from __future__ import annotations

import json
import multiprocessing
import secrets
import threading
import time
import zlib
from dataclasses import asdict, dataclass, replace
from typing import Iterator

from isal import isal_zlib

from .compression import codec_for
from .config import ArchiveSpec
from . import errors
from .errors import ArchiverError, EmptyPrefix, IntegrityError, SegmentMissing, status_of, translate
from .listing import ListedObject, iter_pages
from .manifest import MANIFEST_SUFFIX, ArchiveLayout, iter_manifest
from .pipeline import StreamedArchive, open_manifest, stream_archive
from .progress import Progress
from .s3 import S3Clients
from .tarwriter import END_OF_ARCHIVE, member_size
from .upload import MAX_PARTS, PartSizer, PartUploader, UploadedPart, abort_upload, complete_upload

# What one object costs beyond its bytes, as bytes of the same cost: about 1,300 small
# objects/s against 200 MB/s per process here (bench/README.md), so one object ~ 150 KB.
OBJECT_WEIGHT = 150_000


def segments_prefix(layout: ArchiveLayout) -> str:
    """Where every run's segment temporaries live: one prefix to list and clean."""
    return layout.stem + ".segments/"


@dataclass(frozen=True)
class SegmentRange:
    """One segment of a plan: keys (``start_after``, ``last_key``], its tar range, and the
    part numbers it may use."""

    index: int
    start_after: str | None
    last_key: str
    objects: int
    bytes: int
    tar_start: int
    tar_end: int  # without the end of archive
    first_part: int
    parts: int


@dataclass(frozen=True)
class SegmentPlan:
    run: str  # names the temporaries
    upload_id: str  # the archive's multipart upload, created once the plan is made
    archive_key: str
    objects: int
    bytes: int
    tar_size: int  # the whole tar stream, end of archive included
    short_of_min_billable: int
    ranges: tuple[SegmentRange, ...]
    planned_in_s: float = 0.0

    @property
    def count(self) -> int:
        return len(self.ranges)

    @property
    def final_part(self) -> int:
        return self.ranges[-1].first_part + self.ranges[-1].parts

    def temp_key(self, layout: ArchiveLayout, k: int, what: str) -> str:
        return f"{segments_prefix(layout)}{self.run}/{k:05d}{what}"

    def to_dict(self) -> dict:
        return {**asdict(self), "ranges": [asdict(r) for r in self.ranges]}

    @classmethod
    def from_dict(cls, d: dict) -> "SegmentPlan":
        return cls(**{**d, "ranges": tuple(SegmentRange(**r) for r in d["ranges"])})


@dataclass(frozen=True)
class PrefixSize:
    """What listing a prefix up to a threshold showed: enough to decide one task or segments."""

    prefix: str
    objects: int
    bytes: int
    complete: bool  # the listing ended (else it stopped at the threshold: at least this much)
    seconds: float
    requests: int
    pages: tuple = ()  # a complete listing's pages, for the one pipeline to use instead of listing again

    def large(self, min_objects: int, min_bytes: int) -> bool:
        return self.objects >= min_objects or self.bytes >= min_bytes


def size_prefix(control, bucket: str, prefix: str, min_objects: int, min_bytes: int) -> PrefixSize:
    """List ``prefix`` until it proves large or ends: at most ``min_objects / 1,000`` LISTs,
    so sizing a small prefix costs what listing it costs, and a large one no more."""
    started = time.monotonic()
    objects = size = 0
    pages = []
    for page in iter_pages(control, bucket, prefix):
        pages.append(page)
        objects += len(page)
        size += sum(o.size for o in page)
        if objects >= min_objects or size >= min_bytes:
            return PrefixSize(prefix, objects, size, False, time.monotonic() - started, len(pages))
    return PrefixSize(prefix, objects, size, True, time.monotonic() - started, max(1, len(pages)), tuple(pages))


def sized_for_segments(spec: ArchiveSpec, control) -> PrefixSize | None:
    """Whether ``spec``'s run could use segments at all (None: one process, or a budget that
    holds one pipeline), and if so the prefix's size up to the threshold: a small prefix's
    pages then feed the one pipeline, so deciding costs no second listing."""
    if min(spec.processes, processes_within(spec.memory_budget)) < 2 and not spec.segments:
        return None
    return size_prefix(control, spec.source.bucket, spec.source.key, spec.segment_min_objects,
                       spec.segment_min_bytes)


@dataclass
class _Page:
    after: str | None  # the key before the page
    last: str
    objects: int
    bytes: int
    tar: int


def plan_segments(spec: ArchiveSpec, control, archive_key: str, count: int) -> SegmentPlan:
    """List the prefix and cut it into at most ``count`` segments of about equal weight
    (bytes plus ``OBJECT_WEIGHT`` per object). Memory is one small record per listing page:
    the pages a cut falls in are listed again to find the exact key."""
    from .cost import short_of_minimum

    started = time.monotonic()
    pages: list[_Page] = []
    short = 0
    after = None
    for page in iter_pages(control, spec.source.bucket, spec.source.key):
        tar = sum(member_size(o.key, o.size) for o in page)
        pages.append(_Page(after, page[-1].key, len(page), sum(o.size for o in page), tar))
        short += sum(short_of_minimum(o.size) for o in page)
        after = page[-1].key
    objects = sum(p.objects for p in pages)
    if not objects:
        raise EmptyPrefix(f"{spec.source} holds no objects; nothing was written",
                          hint="check the prefix (it must match the keys exactly, trailing / included)")
    count = max(1, min(count, objects))
    total = sum(p.tar + OBJECT_WEIGHT * p.objects for p in pages)
    cuts = [total * k / count for k in range(1, count)]
    # Walk pages; where a cut falls inside a page, list that page again object by object.
    ends: list[tuple[str, int, int, int]] = []  # (last key, objects, bytes, tar end) per segment
    weight = n = nbytes = tar = 0
    for p in pages:
        # Every segment gets at least one object: a cut is forced where only as many objects
        # are left as segments still to fill (one huge object would otherwise take two cuts).
        if not cuts or (weight + p.tar + OBJECT_WEIGHT * p.objects < cuts[0]
                        and objects - n - p.objects > len(cuts)):
            weight += p.tar + OBJECT_WEIGHT * p.objects
            n, nbytes, tar = n + p.objects, nbytes + p.bytes, tar + p.tar
            continue
        for o in _page_objects(control, spec, p):
            weight += member_size(o.key, o.size) + OBJECT_WEIGHT
            n, nbytes, tar = n + 1, nbytes + o.size, tar + member_size(o.key, o.size)
            if cuts and (weight >= cuts[0] or objects - n == len(cuts)) and n > (ends[-1][1] if ends else 0):
                ends.append((o.key, n, nbytes, tar))
                cuts.pop(0)
    ends.append((pages[-1].last, n, nbytes, tar))
    parts_each = (MAX_PARTS - 1) // len(ends)  # one number per segment for the part before it, one final
    ranges, before = [], (None, 0, 0, 0)
    for k, end in enumerate(ends):
        ranges.append(SegmentRange(k, before[0], end[0], end[1] - before[1], end[2] - before[2], before[3], end[3],
                                   first_part=k * parts_each + 2, parts=parts_each - 1))
        before = end
    return SegmentPlan(run=secrets.token_hex(8), upload_id="",
                       archive_key=archive_key, objects=objects, bytes=ends[-1][2],
                       tar_size=ends[-1][3] + END_OF_ARCHIVE, short_of_min_billable=short, ranges=tuple(ranges),
                       planned_in_s=time.monotonic() - started)


def _page_objects(control, spec: ArchiveSpec, page: _Page) -> Iterator[ListedObject]:
    for listed in iter_pages(control, spec.source.bucket, spec.source.key, page.after, page.last):
        yield from listed


class SegmentUploader(PartUploader):
    """A segment's share of the archive's upload: parts from its own number range, with the
    first ``head_size`` bytes and a rest shorter than a part kept back for the assembler.
    It never aborts the upload: a failed segment is retried, the upload stays open."""

    def __init__(self, *args, head_size: int, **kwargs):
        super().__init__(*args, **kwargs)
        self.head = bytearray()
        self.head_size = head_size
        self.tail = b""

    def write(self, data) -> None:
        if len(self.head) < self.head_size:
            take = self.head_size - len(self.head)
            self.head += data[:take]
            data = data[take:]
            if not data:
                return
        super().write(data)

    def finish_parts(self) -> list[UploadedPart]:
        if 0 < self._buffered < self.sizer.min_part:
            self.tail = b"".join(self._cut(self._buffered)._pieces)
        elif self._buffered:
            self._submit(self._cut(self._buffered))
        return [f.result() for f in self._parts]

    def abort(self) -> ArchiverError | None:
        self._done = True
        self._abort.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        return None


class SegmentRecords:
    """A segment's manifest records, gzip JSON Lines in a temporary object, overwritten by a
    re-run of the segment."""

    def __init__(self, control, bucket: str, key: str, extra_args: dict, abort: threading.Event):
        self._uploader = PartUploader(control, bucket, key, storage_class="STANDARD",
                                      sizer=PartSizer(5 << 20), memory=5 << 20, threads=1,
                                      extra_args=extra_args, abort_event=abort)
        self._z = zlib.compressobj(6, zlib.DEFLATED, 31)
        self._pending = bytearray()

    def add_object(self, record: dict) -> None:
        self._pending += json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8", "surrogateescape") + b"\n"
        if len(self._pending) >= 1 << 20:
            self._uploader.write(self._z.compress(self._pending))
            self._pending.clear()

    def close(self, summary: dict) -> None:
        self.add_object({"type": "summary", **summary})
        self._uploader.write(self._z.compress(self._pending) + self._z.flush())
        self._uploader.complete()

    def abort(self) -> ArchiverError | None:
        return self._uploader.abort()


class SegmentJob:
    """What ``stream_archive`` needs to stream one segment (its ``segment`` argument)."""

    def __init__(self, spec: ArchiveSpec, layout: ArchiveLayout, plan: SegmentPlan, k: int):
        self.spec, self.layout, self.plan = spec, layout, plan
        self.range = plan.ranges[k]
        self.is_last = k == plan.count - 1
        self.start_after, self.last_key = self.range.start_after, self.range.last_key
        self.tar_start = self.range.tar_start
        self.tar_bytes = self.range.tar_end - self.range.tar_start + (END_OF_ARCHIVE if self.is_last else 0)
        self.parts = self.range.parts

    def __str__(self) -> str:
        return f"segment {self.range.index + 1}/{self.plan.count} of {self.spec.source}"

    def uploader(self, control, sizer: PartSizer, memory: int, abort: threading.Event) -> SegmentUploader:
        return SegmentUploader(control, self.layout.bucket, self.plan.archive_key, sizer=sizer, memory=memory,
                               extra_args=self.spec.encryption_args, abort_event=abort,
                               upload_id=self.plan.upload_id, first_part=self.range.first_part,
                               max_parts=self.range.parts, head_size=sizer.min_part)

    def records(self, control, abort: threading.Event) -> SegmentRecords:
        return SegmentRecords(control, self.layout.bucket, self.plan.temp_key(self.layout, self.range.index,
                                                                              MANIFEST_SUFFIX),
                              self.spec.encryption_args, abort)

    def check_produced(self, objects: int, tar_start: int, tar_end: int) -> None:
        expected = self.range.tar_end + (END_OF_ARCHIVE if self.is_last else 0)
        if objects != self.range.objects or tar_end != expected:
            raise IntegrityError(f"{self} holds {objects} objects ending at tar offset {tar_end}; the plan said "
                                 f"{self.range.objects} ending at {expected}: the source changed since the plan",
                                 hint="run the prefix again; a new plan is made")


def produce_segment(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, plan: SegmentPlan, k: int,
                    progress: Progress | None = None, abort: threading.Event | None = None) -> dict:
    """Produce segment ``k``: its parts uploaded, its kept-back bytes, records and result in
    temporaries. Idempotent: a re-run overwrites the segment's parts and temporaries."""
    job = SegmentJob(spec, layout, plan, k)
    started = time.monotonic()
    streamed = stream_archive(spec, clients, layout, plan.archive_key, progress, abort, segment=job)
    uploader: SegmentUploader = streamed.uploader
    parts = uploader.finish_parts()
    result = {
        "segment": k, "objects": streamed.objects, "bytes_in": streamed.bytes_in, "tar_bytes": streamed.tar_bytes,
        "size": streamed.bytes_out, "crc32": streamed.archive_crc32, "raw_crc32": streamed.raw_crc32,
        "first_block": job.tar_start // spec.block_size, "last_block": streamed.last_block,
        "last_block_start": streamed.last_block_start, "head": len(uploader.head), "tail": len(uploader.tail),
        "parts": [[p.number, p.etag, p.crc32c, p.size] for p in parts], "gets": streamed.gets,
        "peak_buffered": streamed.peak_buffered, "seconds": round(time.monotonic() - started, 3),
    }
    put = _putter(clients.control, layout.bucket, spec)
    try:
        put(plan.temp_key(layout, k, ".held"), bytes(uploader.head) + uploader.tail)
        streamed.manifest.close(result)
    except BaseException as exc:
        problem = streamed.manifest.abort()  # the records' upload; the archive's stays open
        if problem is not None:
            exc.add_note(f"cleanup also failed: {problem}")
        raise
    # Written last: a segment is done exactly when its result exists.
    put(plan.temp_key(layout, k, ".json"), json.dumps(result).encode())
    return result


def _putter(control, bucket: str, spec: ArchiveSpec):
    def put(key: str, body: bytes) -> None:
        try:
            control.put_object(Bucket=bucket, Key=key, Body=body, StorageClass="STANDARD", **spec.encryption_args)
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"write segment temporary s3://{bucket}/{key}", "upload") from exc
    return put


def segment_done(control, layout: ArchiveLayout, plan: SegmentPlan, k: int) -> dict | None:
    """The result of segment ``k`` if it was produced, else None."""
    key = plan.temp_key(layout, k, ".json")
    try:
        return json.loads(control.get_object(Bucket=layout.bucket, Key=key)["Body"].read())
    except Exception as exc:  # noqa: BLE001
        if status_of(exc) == 404:
            return None
        raise translate(exc, f"read segment result s3://{layout.bucket}/{key}") from exc


class AssembledUpload:
    """The archive's upload once assembled: every part known, completed by the commit protocol."""

    def __init__(self, control, bucket: str, key: str, upload_id: str, parts: list[UploadedPart], extra_args: dict,
                 keep_open: bool = False):
        """``keep_open``: a failed commit leaves the upload (every segment's work) for a retry of
        the assembly; the next run of the prefix aborts it if no retry comes."""
        self.control, self.bucket, self.key, self.upload_id = control, bucket, key, upload_id
        self.parts, self.extra_args = parts, extra_args
        self._done = keep_open

    def complete(self, *, if_none_match: bool = False, if_match: str | None = None):
        result = complete_upload(self.control, self.bucket, self.key, self.upload_id, self.parts,
                                 if_none_match=if_none_match, if_match=if_match, extra_args=self.extra_args)
        self._done = True
        return result

    def abort(self) -> ArchiverError | None:
        if self._done:
            return None
        self._done = True
        try:
            abort_upload(self.control, self.bucket, self.key, self.upload_id)
        except Exception as exc:  # noqa: BLE001
            return translate(exc, f"abort the upload to s3://{self.bucket}/{self.key}", "upload")
        return None


def assemble(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, plan: SegmentPlan,
             abort: threading.Event | None = None, keep_open: bool = False) -> StreamedArchive:
    """Join the produced segments into the archive's upload and stream the final manifest.
    Both uploads stay open; the commit protocol completes them. O(segments) requests plus
    the records; the archive's bytes are never read back."""
    control = clients.control
    abort = abort or threading.Event()
    started = time.monotonic()
    results = []
    for k in range(plan.count):
        result = segment_done(control, layout, plan, k)
        if result is None:
            raise SegmentMissing(f"segment {k + 1}/{plan.count} of {spec.source} was not produced",
                                 hint=f"run it again (in Airflow: clear the task '{spec.source.key} [{k + 1}/{plan.count}]' "
                                      "with downstream), then assemble")
        results.append(result)
    codec = codec_for(spec.codec, spec.effective_level)
    header = codec.header()
    trailer_crc = 0
    tar_total = 0
    for r in results:
        trailer_crc = codec.combine(trailer_crc, r["raw_crc32"], r["tar_bytes"])
        tar_total += r["tar_bytes"]
    if tar_total != plan.tar_size:
        raise IntegrityError(f"segments hold {tar_total} tar bytes, the plan {plan.tar_size}")
    trailer = codec.trailer(trailer_crc, tar_total)

    uploader = AssembledUpload(control, layout.bucket, plan.archive_key, plan.upload_id, [], spec.encryption_args,
                               keep_open=keep_open)
    part_upload = PartUploader(control, layout.bucket, plan.archive_key, extra_args=spec.encryption_args,
                               upload_id=plan.upload_id, abort_event=abort)
    parts: list[UploadedPart] = []
    held = bytearray(header)
    bases, base = [], len(header)
    crc = isal_zlib.crc32(header)
    for k, r in enumerate(results):
        bases.append(base)
        base += r["size"]
        crc = isal_zlib.crc32_combine(crc, r["crc32"], r["size"])
        kept = _get(control, layout.bucket, plan.temp_key(layout, k, ".held"))
        if len(kept) != r["head"] + r["tail"]:
            raise IntegrityError(f"segment {k + 1}: kept-back bytes are {len(kept)}, expected {r['head'] + r['tail']}")
        held += kept[:r["head"]]
        if r["parts"]:
            # The part before this segment's interior: the previous tail(s) and this head.
            parts.append(part_upload.put_part(plan.ranges[k].first_part - 1, bytes(held)))
            held.clear()
            parts += [UploadedPart(*p) for p in r["parts"]]
        held += kept[r["head"]:]
    held += trailer
    crc = isal_zlib.crc32_combine(crc, isal_zlib.crc32(trailer), len(trailer))
    parts.append(part_upload.put_part(plan.final_part, bytes(held)))
    uploader.parts = parts
    size = base + len(trailer)
    parts_done = time.monotonic()

    manifest = open_manifest(spec, control, layout, plan.archive_key, abort)
    try:
        block_start: dict[int, int] = {}
        for k, r in enumerate(results):
            first_start = block_start.setdefault(r["first_block"], bases[k])
            if r["last_block"] != r["first_block"]:
                block_start[r["last_block"]] = bases[k] + r["last_block_start"]
            count = 0
            for record in iter_manifest(control, ArchiveLayout(layout.bucket, plan.temp_key(layout, k, ""))):
                if record.get("type") != "object":
                    continue
                start = first_start if record["block"] == r["first_block"] else bases[k] + record["range"][0]
                record["range"] = [start, bases[k] + record["range"][1]]
                manifest.add_object(record)
                count += 1
            if count != r["objects"]:
                raise IntegrityError(f"segment {k + 1} records {count} objects, its result {r['objects']}")
    except BaseException:
        manifest.abort()
        raise
    return StreamedArchive(uploader=uploader, manifest=manifest, objects=plan.objects,
                           bytes_in=sum(r["bytes_in"] for r in results), bytes_out=size, tar_bytes=tar_total,
                           blocks=results[-1]["last_block"] + 1, archive_crc32=crc,
                           gets=sum(r["gets"] for r in results),
                           peak_buffered=max(r["peak_buffered"] for r in results),
                           short_of_min_billable=plan.short_of_min_billable, raw_crc32=trailer_crc,
                           segments=plan.count, timings={
                               "plan_s": plan.planned_in_s,
                               "slowest_segment_s": max(r.get("seconds", 0.0) for r in results),
                               "assemble_archive_s": parts_done - started,  # O(segments)
                               "assemble_manifest_s": time.monotonic() - parts_done})  # O(objects)


def _get(control, bucket: str, key: str) -> bytes:
    try:
        return control.get_object(Bucket=bucket, Key=key)["Body"].read()
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"read segment temporary s3://{bucket}/{key}") from exc


def delete_temporaries(control, layout: ArchiveLayout, keep: SegmentPlan | None = None) -> int:
    """Delete the segment temporaries (and plan) of every run of this prefix but ``keep``'s;
    how many objects went."""
    prefix = segments_prefix(layout)
    kept = (f"{prefix}{keep.run}/", plan_key(layout)) if keep else ()
    deleted = 0
    try:
        for page in iter_pages(control, layout.bucket, prefix):
            doomed = [{"Key": o.key} for o in page if not (kept and o.key.startswith(kept))]
            if doomed:
                control.delete_objects(Bucket=layout.bucket, Delete={"Objects": doomed, "Quiet": True})
            deleted += len(doomed)
    except ArchiverError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"delete segment temporaries under s3://{layout.bucket}/{prefix}") from exc
    return deleted


def stream_segmented(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, archive_key: str,
                     progress: Progress | None = None, abort: threading.Event | None = None) -> StreamedArchive:
    """The commit protocol's step 5 on worker processes: plan ``spec.segments`` segments (one
    per process by default), produce each in its own process, at most ``spec.processes`` at
    once (a segment whose process fails or dies is run again, alone), assemble."""
    control = clients.control
    abort = abort or threading.Event()
    processes = min(spec.processes, processes_within(spec.memory_budget))
    plan = plan_segments(spec, control, archive_key, spec.segments or processes)
    notes = []
    if processes < min(spec.processes, plan.count):
        notes.append(f"{plan.count} segments ran on {processes} process(es), not {min(spec.processes, plan.count)}: "
                     f"--memory-budget {spec.memory_budget >> 20}MiB holds {processes} pipeline(s) of "
                     f"{_MIN_SHARE >> 20} MiB besides the assembler's")
    processes = min(processes, plan.count)
    worker_spec = _worker_spec(spec, processes)
    plan = open_upload(spec, control, layout, plan)
    try:
        durations = _run_workers(worker_spec, clients, layout, plan, processes, abort)
        streamed = assemble(spec, clients, layout, plan, abort)
        streamed.timings["segments_s"] = sum(durations.values())  # with process start-up
        streamed.notes = notes
    except BaseException as exc:
        problem = AssembledUpload(control, layout.bucket, archive_key, plan.upload_id, [], {}).abort()
        if problem is not None:
            exc.add_note(f"cleanup also failed: {problem}")
        raise
    if progress is not None:
        progress.objects_done, progress.bytes_done = streamed.objects, streamed.bytes_in
    return streamed


_MIN_SHARE = 48 << 20  # the smallest memory a pipeline holds (ArchiveSpec's floor)


def processes_within(budget: int) -> int:
    """Worker processes a budget holds: a share each, and one for the assembler."""
    return max(1, budget // _MIN_SHARE - 1)


def open_upload(spec: ArchiveSpec, control, layout: ArchiveLayout, plan: SegmentPlan) -> SegmentPlan:
    """Create the archive's multipart upload the segments write into; the plan with its id."""
    try:
        upload = control.create_multipart_upload(Bucket=layout.bucket, Key=plan.archive_key,
                                                 StorageClass=spec.storage_class, ChecksumAlgorithm="CRC32C",
                                                 **spec.encryption_args)
    except Exception as exc:  # noqa: BLE001
        raise translate(exc, f"start upload to s3://{layout.bucket}/{plan.archive_key}", "upload") from exc
    return replace(plan, upload_id=upload["UploadId"])


def plan_key(layout: ArchiveLayout) -> str:
    """The plan of the segmented run in progress, for segment and assemble tasks elsewhere."""
    return segments_prefix(layout) + "plan.json"


def write_plan(spec: ArchiveSpec, control, layout: ArchiveLayout, plan: SegmentPlan) -> None:
    _putter(control, layout.bucket, spec)(plan_key(layout), json.dumps(plan.to_dict()).encode())


def read_plan(control, layout: ArchiveLayout) -> SegmentPlan | None:
    try:
        body = control.get_object(Bucket=layout.bucket, Key=plan_key(layout))["Body"].read()
    except Exception as exc:  # noqa: BLE001
        if status_of(exc) == 404:
            return None
        raise translate(exc, f"read the segment plan s3://{layout.bucket}/{plan_key(layout)}") from exc
    return SegmentPlan.from_dict(json.loads(body))


def produce_planned_segment(spec: ArchiveSpec, clients: S3Clients, k: int, progress: Progress | None = None,
                            abort: threading.Event | None = None) -> dict:
    """Segment ``k`` of the plan in progress for ``spec``'s prefix (an Airflow segment task):
    nothing to do if it was produced already or the plan has fewer segments."""
    from .manifest import layout_for

    from .commit import read_committed

    layout = layout_for(spec.source, spec.destination)
    # A committed prefix that is not to be overwritten has nothing to produce, whatever plan
    # a dead run left: the re-run of an archived day is a success that says so.
    if not spec.overwrite and read_committed(clients.control, layout, spec.source) is not None:
        return {"segment": k, "objects": 0, "status": "skipped",
                "note": f"{spec.source} is already archived; nothing to produce"}
    plan = read_plan(clients.control, layout)
    if plan is None:
        raise errors.ObjectMissing(
            f"no segmented run of {spec.source} is waiting for segments (s3://{layout.bucket}/{plan_key(layout)} "
            "is missing): it was abandoned and cleaned up, or committed since",
            hint="clear this prefix's prepare task (it plans again) with downstream, or run the prefix again")
    if k >= plan.count:
        return {"segment": k, "objects": 0, "status": "skipped",
                "note": f"the plan has {plan.count} segment(s); nothing to do"}
    produced = segment_done(clients.control, layout, plan, k) or produce_segment(spec, clients, layout, plan, k,
                                                                                 progress, abort)
    return {**produced, "status": "produced"}


def _worker_spec(spec: ArchiveSpec, processes: int) -> ArchiveSpec:
    """Each worker's share of ``--memory-budget`` (the parent keeps one share to assemble)."""
    return replace(spec, memory_budget=spec.memory_budget // (processes + 1),
                   compress_threads=max(1, spec.compress_threads // processes))


_ATTEMPTS = 3


def _run_workers(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, plan: SegmentPlan,
                 processes: int, abort: threading.Event) -> dict[int, float]:
    """Run every segment in a fresh interpreter (spawn: the CRT client and threads do not
    survive fork), at most ``processes`` at once. A segment that fails retryably or whose
    process dies is run again, alone, up to three times; the others are not repeated.
    Returns each segment's seconds (its successful attempt)."""
    context = multiprocessing.get_context("spawn")
    todo = list(range(plan.count))
    attempts = dict.fromkeys(todo, 0)
    running: dict[int, tuple] = {}
    durations: dict[int, float] = {}
    try:
        while todo or running:
            while todo and len(running) < processes:
                k = todo.pop(0)
                attempts[k] += 1
                receive, send = context.Pipe(duplex=False)
                # Credentials as they are now, per start: a segment run again after
                # CredentialsExpired gets the session's refreshed ones, not the expired copy.
                proc = context.Process(target=_segment_worker, name=f"s3arch-segment-{k + 1}",
                                       args=(spec, _connection_of(clients), layout, plan.to_dict(), k, send), daemon=True)
                proc.start()
                send.close()
                running[k] = (proc, receive, time.monotonic())
            if abort.is_set():
                raise InterruptedError("segments aborted")
            for k, (proc, receive, began) in list(running.items()):
                if not receive.poll(0.05) and proc.is_alive():
                    continue
                outcome = _outcome(receive)
                proc.join()
                del running[k]
                if outcome is not None and "error" not in outcome:
                    durations[k] = time.monotonic() - began
                    continue
                error = _error_of(outcome, k, plan, proc.exitcode)
                if not error.retryable or attempts[k] >= _ATTEMPTS:
                    raise error
                todo.insert(0, k)  # this segment alone, again
    finally:
        for proc, receive, _ in running.values():
            proc.kill()
            proc.join()
            receive.close()
    return durations


def _outcome(receive) -> dict | None:
    try:
        return receive.recv() if receive.poll() else None
    except (EOFError, OSError):
        return None
    finally:
        receive.close()


def _error_of(outcome: dict | None, k: int, plan: SegmentPlan, exitcode: int | None) -> ArchiverError:
    where = f"segment {k + 1}/{plan.count}"
    if outcome is None:
        error = errors.TransientError(f"{where}: its process ended with exit code {exitcode} before it finished")
    else:
        cls = getattr(errors, outcome["error"], None)
        cls = cls if isinstance(cls, type) and issubclass(cls, ArchiverError) else ArchiverError
        error = cls(f"{where}: {outcome['message']}")
    return error


def _connection_of(clients: S3Clients) -> dict:
    """What a worker process needs to reach S3 as the parent does: credentials as they are
    now (a worker lives minutes, well within a session token's life), region, endpoint, TLS."""
    creds = clients.session.get_credentials()
    frozen = creds.get_frozen_credentials() if creds else None
    return {"access_key": frozen.access_key if frozen else None, "secret_key": frozen.secret_key if frozen else None,
            "token": frozen.token if frozen else None, "region": clients.region,
            "endpoint_url": clients.endpoint_url, "verify": clients.verify}


def _segment_worker(spec: ArchiveSpec, connection: dict, layout: ArchiveLayout, plan: dict, k: int, send) -> None:
    import boto3

    try:
        session = boto3.Session(aws_access_key_id=connection["access_key"],
                                aws_secret_access_key=connection["secret_key"],
                                aws_session_token=connection["token"], region_name=connection["region"])
        clients = S3Clients.from_session(session, endpoint_url=connection["endpoint_url"],
                                         verify=connection["verify"])
        clients.check_bucket(spec.source.bucket, "source")
        send.send(produce_segment(spec, clients, layout, SegmentPlan.from_dict(plan), k))
    except ArchiverError as exc:
        send.send({"error": type(exc).__name__, "message": str(exc)})
    except Exception as exc:  # noqa: BLE001
        error = translate(exc, f"segment {k + 1}")
        send.send({"error": type(error).__name__, "message": str(error)})
    finally:
        send.close()
