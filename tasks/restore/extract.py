"""Extract objects from a (readable) archive back to S3 or to a local directory.

Works from the manifest's offsets, not by parsing tar headers: the selected records (in
archive order) are grouped into runs whose compressed ranges touch or nearly touch, each run
is one ranged GET decoded from its first block, and each record's bytes are cut out at
``data_offset`` for ``size`` bytes and checked against the manifest's SHA-256 *before* the
object becomes visible at the target. The whole archive is simply one selection of every
record, read in runs of bounded size.

Targets:
- S3: each object under the target prefix, by its key relative to the archived prefix (or
  its full original key with ``original_keys``); small objects by one PUT, many in flight
  while the archive is read on, large ones by multipart upload completed only after the hash
  matched. Objects already there with the same content are skipped; different ones are left
  alone unless ``overwrite``. A small object's PUT is conditional (``If-None-Match: *``), so
  only a key that exists costs a HEAD to tell which; on a target that ignores the condition
  (probed once per run, before the first write) every small object is looked at with a HEAD
  before its PUT.
- a directory: the tar member name (``..``, ``.`` and empty segments escaped, FORMAT.md),
  created through directory file descriptors opened with O_NOFOLLOW, so no symlink inside
  the target (planted before or during the run) can lead a write outside it; path components
  longer than NAME_MAX are shortened as FORMAT.md says.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import json
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from s3arch.io import attributes
from s3arch.core.config import MiB, S3Url
from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import (IO_ERRORS, ArchiverError, BadArgument, DestinationConflict, IntegrityError, LocalFileError,
                     Throttled, TransientError, status_of, translate)
from s3arch.io.fetching import ByteBudget, throttle_pause
from s3arch.format.manifest import ArchiveLayout, find_records, iter_manifest
from s3arch.restore.reading import DECODE_CHUNK, _decompressor
from s3arch.restore.glacier import require_readable
from s3arch.io.s3 import none_if_missing, stream_object
from s3arch.format.tarwriter import member_name
from s3arch.core.timestamps import parse_s3_time
from s3arch.io.upload import PartSizer, PartUploader, abort_stale_uploads

NAME_MAX = 255
_RUN_GAP = 256 << 10      # fetch through a gap this small rather than issue another GET
_RUN_MAX = 64 * MiB       # compressed bytes per GET
_RUN_RECORDS = 2_500      # records per GET: the run's record list (about 2.5 KB each) is held while it is read
_SMALL_OBJECT = 8 * MiB   # up to this size an object is PUT in one request
_EMPTY_SHA256 = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="  # base64 of SHA-256(b"")
_RESENDS = 4              # a small object's PUT sent again after a 400 saying its body was cut
_PUTS_IN_FLIGHT = 64
_PUT_STALL_SECONDS = 120.0  # a PUT with no answer this long is cancelled and sent again (botocore's read timeout)
SHA256_METADATA = "s3arch-sha256"


@dataclass
class ExtractResult:
    archive: str
    target: str
    objects: int = 0
    bytes: int = 0
    skipped_same: int = 0
    conflicts: list[str] = field(default_factory=list)
    gets: int = 0
    bytes_fetched: int = 0  # compressed bytes the ranged GETs asked for

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Selection:
    keys: tuple[str, ...] | None = None
    glob: str | None = None

    @classmethod
    def of(cls, keys: Iterable[str] | None = None, glob: str | None = None) -> "Selection":
        if keys is not None and glob is not None:
            raise BadArgument("give either keys or a glob, not both")
        return cls(tuple(dict.fromkeys(keys)) if keys is not None else None, glob)


def extract_archive(clients, layout: ArchiveLayout, *, to_s3: S3Url | None = None, to_dir: Path | None = None,
                    selection: Selection = Selection(), original_keys: bool = False, overwrite: bool = False,
                    memory_budget: int = 256 * MiB, metadata_file: Path | None = None,
                    skip_keys: frozenset[str] = frozenset(), raise_conflicts: bool = True) -> ExtractResult:
    """``metadata_file``: with ``to_dir``, where to write each extracted object's attributes
    (JSON Lines, FORMAT.md "Metadata file"), since a file system keeps only bytes and mtime.
    ``skip_keys``: keys a later part of the day holds (tasks/restore/days.py). Without
    ``raise_conflicts`` the result lists them instead (``conflict_error`` makes the error)."""
    if (to_s3 is None) == (to_dir is None):
        raise BadArgument("give exactly one target: --to s3://BUCKET/PREFIX/ or --to-dir PATH")
    if metadata_file is not None and to_dir is None:
        raise BadArgument("--metadata-file goes with --to-dir",
                          hint="extracting to S3 sets each object's metadata and tags on the object itself")
    control = clients.control
    header, records = _select(control, layout, selection)
    if skip_keys:
        records = (r for r in records if r["key"] not in skip_keys)
    archive_key = header["archive"]["key"]
    require_readable(control, layout.bucket, archive_key)
    prefix = header["source"]["prefix"]
    result = ExtractResult(f"s3://{layout.bucket}/{archive_key}", "")
    writer: _S3Writer | _DirWriter
    if to_s3 is not None:
        writer = _S3Writer(clients, to_s3, prefix, original_keys, overwrite, memory_budget, result)
    else:
        assert to_dir is not None  # the CLI and the restore operator give one of the two
        writer = _DirWriter(Path(to_dir), prefix, original_keys, overwrite, metadata_file)
    result.target = writer.target
    cursor = None
    try:
        for run in _runs(records, header["block_size"]):
            cursor = _extract_run(control, layout.bucket, archive_key, header, run, writer, result, cursor)
    except BaseException:
        writer.close(failing=True)
        raise
    writer.close()
    result.conflicts = writer.conflicts
    if writer.conflicts and raise_conflicts:
        raise conflict_error(result)
    return result


def conflict_error(result: ExtractResult) -> DestinationConflict:
    return DestinationConflict(
        f"{len(result.conflicts)} objects already exist at {result.target} with other content and "
        f"were left alone (first: {result.conflicts[0]}); {result.objects} others were extracted",
        hint="add --overwrite to replace them")


def _select(control, layout: ArchiveLayout, selection: Selection) -> tuple[dict, Iterator[dict]]:
    if selection.keys is not None:
        header, found = find_records(control, layout, list(selection.keys))
        missing = [k for k in selection.keys if k not in found]
        if missing:
            raise BadArgument(f"{len(missing)} of the {len(selection.keys)} keys asked for are not in "
                              f"{layout.manifest_url}: {', '.join(repr(k) for k in missing[:5])}"
                              + (" ..." if len(missing) > 5 else ""),
                              hint="s3arch ls lists the archived keys; nothing was extracted")
        return header, iter(sorted(found.values(), key=lambda r: r["header_offset"]))
    records = iter_manifest(control, layout)
    header = next(records)
    objects = (r for r in records if r["type"] == "object")
    if selection.glob is not None:
        objects = (r for r in objects if fnmatch.fnmatchcase(r["key"], selection.glob))
    return header, objects


def _runs(records: Iterator[dict], block_size: int) -> Iterator[list[dict]]:
    """Records grouped so that each group is one ranged GET, of at most ``_RUN_MAX`` compressed
    bytes and ``_RUN_RECORDS`` records (tiny objects compress so well that 64 MiB can hold
    every record of a million-object archive)."""
    run: list[dict] = []
    start = end = 0
    for record in records:
        r_start, r_end = record["range"]
        if run and (r_start > end + _RUN_GAP or r_end - start > _RUN_MAX or len(run) >= _RUN_RECORDS):
            yield run
            run = []
        if not run:
            start = r_start
        run.append(record)
        end = max(end, r_end) if len(run) > 1 else r_end
    if run:
        yield run


class _Cursor:
    """Where decoding the archive stands: the decoder, decoded bytes not used yet, the tar offset
    of the first of them, and the compressed offset read up to. A run that starts within reach
    of where the previous one stopped continues from here instead of decoding its first block
    again."""

    def __init__(self, codec: str, tar_position: int, compressed: int):
        self.decoder = _decompressor(codec, from_block_start=True)
        self.pending = bytearray()
        self.position = tar_position
        self.fetched = compressed


def _extract_run(control, bucket: str, key: str, header: dict, run: list[dict], writer, result,
                 cursor: _Cursor | None = None) -> _Cursor:
    start = run[0]["range"][0]
    end = max(r["range"][1] for r in run)
    if cursor is None or start > cursor.fetched + _RUN_GAP or run[0]["data_offset"] < cursor.position:
        cursor = _Cursor(header["codec"], run[0]["block"] * header["block_size"], start)
    what = f"read s3://{bucket}/{key}"
    chunks: Iterator[bytes] = iter(())
    if end > cursor.fetched:
        chunks = stream_object(control, bucket, key, what, start=cursor.fetched, end=end, chunk=DECODE_CHUNK)
        result.gets += 1
        result.bytes_fetched += end - cursor.fetched
    pending = cursor.pending
    try:
        for record in run:
            skip = record["data_offset"] - cursor.position
            if skip < 0:  # an earlier record of this run already passed it: impossible in order
                raise IntegrityError(f"manifest records of s3://{bucket}/{key} are out of order")
            sink = writer.begin(record)
            remaining = record["size"]
            digest = hashlib.sha256()
            try:
                while skip or remaining:
                    if not pending:
                        compressed = next(chunks, None)
                        if compressed is None:
                            raise IntegrityError(f"s3://{bucket}/{key} ended before {record['key']!r} was read")
                        cursor.fetched += len(compressed)
                        pending += cursor.decoder.decompress(compressed)
                        continue
                    if skip:
                        cut = min(skip, len(pending))
                        del pending[:cut]
                        skip -= cut
                        cursor.position += cut
                        continue
                    take = min(remaining, len(pending))
                    piece = bytes(pending[:take])
                    del pending[:take]
                    remaining -= take
                    cursor.position += take
                    digest.update(piece)
                    if sink is not None:
                        sink.write(piece)
            except BaseException:
                if sink is not None:
                    sink.finish(False)  # no partial file, no open multipart upload
                raise
            ok = digest.hexdigest() == record["sha256"]
            if sink is not None:
                sink.finish(ok)
            if not ok:
                raise IntegrityError(f"{record['key']!r} read from the archive does not match the manifest's "
                                     "SHA-256; it was not written")
            if sink is None:
                result.skipped_same += 1
            elif sink.written:
                result.objects += 1
                result.bytes += record["size"]
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    return cursor


def _relative(key: str, prefix: str, original_keys: bool) -> str:
    return key if original_keys or not key.startswith(prefix) else key[len(prefix):]


class _S3Writer:
    """Objects written back while the archive is read on. A small object's bytes are gathered
    as the archive is decoded, in order, then PUT on the plain connections (tasks/io/connections.py:
    awscrt's HTTP client and SigV4 signer; boto3's ``put_object`` cost about three times the
    client CPU per object, issue 33), up to ``inflight`` at once straight from the reading thread;
    the bodies waiting or in flight hold at most a quarter of the memory budget. The usual answer,
    written, is counted where it arrives; any other (a 412 for a key that exists, throttling, a
    cut body) is settled by one of a few threads, which may wait and look with a HEAD. Large
    objects stream through a multipart upload from the reading thread, as their parts already go
    in parallel. The first write that fails stops the run: nothing more is queued, the writes in
    flight are cancelled (each PUT is whole or absent), and its error is raised with what was
    written."""

    def __init__(self, clients, target: S3Url, prefix: str, original_keys: bool, overwrite: bool,
                 memory_budget: int, result: ExtractResult):
        from s3arch.io.throttling import install

        self.control = clients.control
        self.bucket = target.bucket
        self.base = target.key if not target.key or target.key.endswith("/") else target.key + "/"
        self.prefix = prefix
        self.original_keys = original_keys
        self.overwrite = overwrite
        self.part_memory = max(5 * MiB, memory_budget // 4)
        self.conflicts: list[str] = []
        self.target = f"s3://{self.bucket}/{self.base}"
        self.result = result
        # Through 40 ms of latency the 32 of boto3's pool capped a restore at ~700 objects/s;
        # 64 reached ~840 and 128 no more, while costing the server more at no latency (issue
        # 33 item 8, bench/README). The bodies stay within their byte budget whatever the count.
        inflight = _PUTS_IN_FLIGHT
        self._plane = clients.writes_for(self.bucket, self.base, inflight)
        self._throttle_budget = install(self.control).budget  # the run's --throttle-budget
        self._settling = ThreadPoolExecutor(4, thread_name_prefix="s3arch-extract-put")
        # Queued beyond the connections: one more round, so a connection that finishes finds
        # its next body ready instead of waiting for the reader.
        self._slots = threading.Semaphore(2 * inflight)
        self._bodies = ByteBudget(max(_SMALL_OBJECT, memory_budget // 4))
        # Its first exception stops the writes; its watchdog cancels a PUT with no answer.
        self._stream = StreamCoordinator(f"the extract to {self.target}", stall_timeout=_PUT_STALL_SECONDS)
        self._stream.start_watchdog()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._pending = 0  # PUTs queued or in flight, until their outcome is counted
        self._conditional: bool | None = None  # does the target refuse a PUT If-None-Match: * over a key?

    def key_of(self, record: dict) -> str:
        return self.base + _relative(record["key"], self.prefix, self.original_keys)

    def begin(self, record: dict):
        self._raise_failure()
        key = self.key_of(record)
        if record["size"] <= _SMALL_OBJECT:
            return _SmallObject(self, key, record)
        existing = self._existing(key)
        if existing is not None:
            if _same(existing, record):
                return None
            if not self.overwrite:
                self.conflicts.append(f"s3://{self.bucket}/{key}")
                return _Discard()
        return _S3Object(self, key, record)

    def _existing(self, key: str) -> dict | None:
        return none_if_missing(lambda: self.control.head_object(Bucket=self.bucket, Key=key),
                               f"check s3://{self.bucket}/{key}", control=self.control, bucket=self.bucket, key=key)

    def put_later(self, key: str, record: dict, body: bytes) -> None:
        """Write ``body`` (checked against the manifest) at ``key`` in the background; blocks
        while the queue or the byte budget is full."""
        if self._conditional is None:  # before the first write: none may replace what it must not
            self._conditional = _honours_if_none_match(self.control, self.bucket, self.base)
        self._slots.acquire()
        if self._stream.is_set() or not self._bodies.acquire(len(body), self._stream):
            self._slots.release()
            self._raise_failure()
        with self._lock:
            self._pending += 1
        try:
            if self._conditional:  # one conditional PUT settles the usual case, a fresh key
                self._put_once(key, record, body, True, lambda error: self._answered(key, record, body, error))
            else:
                self._settling.submit(self._settle, key, record, body, None)
        except BaseException as exc:  # not sent (a bug here): nothing will settle it, so it is settled now
            self._done(record, len(body), error=exc)
            raise

    def _answered(self, key: str, record: dict, body: bytes, error: ArchiverError | None) -> None:
        """The first PUT's answer, on the connections' thread: counted if written, else settled
        by a thread that may wait and look."""
        if error is None:
            self._done(record, len(body), "written")
        else:
            self._settling.submit(self._settle, key, record, body, error)

    def _settle(self, key: str, record: dict, body: bytes, first: ArchiverError | None) -> None:
        try:
            outcome = self._put(key, record, body, first)
        except BaseException as exc:  # noqa: BLE001 - recorded: the reading thread raises it
            self._done(record, len(body), error=exc)
        else:
            self._done(record, len(body), outcome)

    def _put(self, key: str, record: dict, body: bytes, first: ArchiverError | None) -> str:
        """Write ``body`` unless an object with this content is already there (``first``: the
        answer to a conditional PUT already sent); an object with other content is replaced only
        with ``overwrite``. A HEAD is made only when S3 says something is there, or on a target
        that ignores the condition."""
        conditional = bool(self._conditional)
        error = first
        for attempt in range(3):  # a key deleted between the 412 and the HEAD is tried again
            if attempt or conditional:
                error = self._send(key, record, body, conditional, error)
                if error is None:
                    return "written"
                if not conditional or error.status != 412:
                    raise error
                error = None
            existing = self._existing(key)
            if existing is None:
                continue
            if _same(existing, record):
                return "same"
            if not self.overwrite:
                return "conflict"
            conditional = False
        raise TransientError(f"write s3://{self.bucket}/{key}: the key was there at each conditional PUT and gone "
                             "at each HEAD after it", hint="another writer is creating and deleting it: run again later")

    def _send(self, key: str, record: dict, body: bytes, conditional: bool,
              first: ArchiverError | None = None) -> ArchiverError | None:
        """The PUT's final answer: None (written) or its typed error; ``first`` is the answer of
        one already sent. Sent again while S3 throttles, within the throttle budget at the
        fetcher's backoff, and up to ``_RESENDS`` times (full jitter) after a fault the
        connections do not resend themselves: a 400 saying the body did not arrive whole
        (IncompleteBody, RequestTimeout, BadDigest: a loaded MinIO answered IncompleteBody to a
        few of many PUTs in flight), and a PUT the watchdog cancelled. The body is in memory and
        a PUT replaces nothing it half wrote."""
        error = first if first is not None else self._wait(key, record, body, conditional)
        throttled_since, throttles, resends = 0.0, 0, 0
        while error is not None and not self._stream.is_set():
            if isinstance(error, Throttled):
                throttles += 1
                throttled_since = throttled_since or time.monotonic()
                pause = min(self._throttle_budget - (time.monotonic() - throttled_since), throttle_pause(throttles))
                if pause <= 0:
                    break
            elif error.retryable and error.status in (None, 400) and resends < _RESENDS:
                resends += 1
                pause = random.uniform(0, 0.25 * 2 ** resends)
            else:
                break
            if self._stream.wait(pause):
                break
            error = self._wait(key, record, body, conditional)
        return error

    def _wait(self, key: str, record: dict, body: bytes, conditional: bool) -> ArchiverError | None:
        answered = threading.Event()
        answer: list[ArchiverError | None] = []

        def done(error: ArchiverError | None) -> None:
            answer.append(error)
            answered.set()

        self._put_once(key, record, body, conditional, done)
        answered.wait()
        return answer[0]

    def _put_once(self, key: str, record: dict, body: bytes, conditional: bool, on_done) -> None:
        """One PutObject with the object's attributes and checksum (its own full-object one,
        else our SHA-256, which S3 checks against the body), tracked for the watchdog."""
        args = object_args(record)
        name, value = attributes.put_checksum(record) or \
            ("ChecksumSHA256", attributes.sha256_checksum(record["sha256"]))
        args[name] = value
        if conditional:
            args["IfNoneMatch"] = "*"
        request = self._stream.track(f"write s3://{self.bucket}/{key}")

        def done(error: ArchiverError | None) -> None:
            self._stream.untrack(request)
            on_done(error)

        call = self._plane.put(key, body, attributes.put_headers(args), done)
        self._stream.cancellable(request, call.cancel)

    def _done(self, record: dict, size: int, outcome: str | None = None, error: BaseException | None = None) -> None:
        self._bodies.release(size)
        self._slots.release()
        if error is not None:
            if self._stream.set_exception(error):  # the first failure: the writes in flight are not waited out
                self._stream.cancel_requests()
        elif outcome is not None:
            self.count(outcome, record)
        with self._lock:
            self._pending -= 1
            if not self._pending:
                self._settled.notify_all()

    def count(self, outcome: str, record: dict) -> None:
        """An object's outcome in the result: written, the same already there, or a conflict."""
        with self._lock:  # the connections' thread and the settling ones count, and the reading thread (large objects)
            if outcome == "written":
                self.result.objects += 1
                self.result.bytes += record["size"]
            elif outcome == "same":
                self.result.skipped_same += 1
            else:
                self.conflicts.append(f"s3://{self.bucket}/{self.key_of(record)}")

    def _raise_failure(self) -> None:
        error = self._stream.exception
        if error is None:
            return
        if isinstance(error, ArchiverError):
            # What was written is whole and a re-run skips it: say so beside S3's answer.
            written = self.result.objects
            raise type(error)(f"{error}; {written:,} objects were written before it, and a re-run skips "
                              "them") from error
        raise error

    def close(self, failing: bool = False) -> None:
        """Wait for the writes in flight. ``failing`` (an error or Ctrl-C in the reading
        thread): they are cancelled; each object is written whole or not at all, and a re-run
        writes what is missing."""
        if failing:
            self._stream.cancel("the extract stopped")
        with self._lock:
            while self._pending:
                self._settled.wait()
        self._settling.shutdown(wait=True)
        self._stream.stop_watchdog()
        if not failing:
            self._raise_failure()


def _honours_if_none_match(control, bucket: str, base: str) -> bool:
    """PUT a scratch object twice with ``If-None-Match: *``: a target that honours the condition
    refuses the second (412). One that ignores it (or refuses the header: 501) would let a
    conditional PUT replace an object with other content without --overwrite, so the writer
    then looks with a HEAD before each PUT instead. The probe's versions are deleted by id
    (under a default retention it was written with ``scratch_lock_args``' hour)."""
    import uuid

    from s3arch.io.retention import delete_scratch_version, scratch_lock_args

    key = f"{base}.s3arch-conditional-put-probe-{uuid.uuid4().hex}"
    what = f"probe conditional writes with s3://{bucket}/{key}"
    versions: list[str | None] = []
    try:
        for _ in range(2):
            try:
                # With its checksum given, as every object's PUT is: botocore would otherwise send
                # a trailing checksum in an aws-chunked body, which not every proxy forwards.
                versions.append(control.put_object(Bucket=bucket, Key=key, Body=b"", IfNoneMatch="*",
                                                   ChecksumSHA256=_EMPTY_SHA256,
                                                   **scratch_lock_args(control, bucket)).get("VersionId"))
            except IO_ERRORS as exc:
                if status_of(exc) in (412, 501):
                    return status_of(exc) == 412
                raise translate(exc, what) from exc
        return False
    finally:
        try:
            for version in versions:
                if version in (None, "null"):
                    control.delete_object(Bucket=bucket, Key=key)
                else:
                    delete_scratch_version(control, bucket, key, version)
        except IO_ERRORS as exc:
            if status_of(exc) != 403:  # without s3:DeleteObject(Version) the empty probe stays
                raise translate(exc, f"delete the probe s3://{bucket}/{key}") from exc


def _same(head: dict, record: dict) -> bool:
    if head["ContentLength"] != record["size"]:
        return False
    return head.get("ETag") == record["etag"] or \
        head.get("Metadata", {}).get(SHA256_METADATA) == record["sha256"]


def object_args(record: dict) -> dict:
    """The object as it was (attributes.py): content headers, user metadata and tags; our own
    SHA-256 beside its metadata, so a re-run knows the content is there."""
    args = attributes.write_args(record)
    args["Metadata"] = {**args.get("Metadata", {}), SHA256_METADATA: record["sha256"]}
    return args


class _Discard:
    """Where the bytes of an object that is not written go (a conflict left alone)."""

    written = False

    def write(self, data: bytes) -> None:
        pass

    def finish(self, ok: bool) -> None:
        pass


class _MadeDirectory(_Discard):
    written = True


class _SmallObject:
    """An object PUT in one request: its bytes gathered, then queued for a writing thread,
    which counts it (``written`` is False here: nothing is written yet)."""

    written = False

    def __init__(self, writer: _S3Writer, key: str, record: dict):
        self.w, self.key, self.record = writer, key, record
        self.pieces: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.pieces.append(data)

    def finish(self, ok: bool) -> None:
        if ok:
            self.w.put_later(self.key, self.record, b"".join(self.pieces))


class _S3Object:
    """A large object written back by a multipart upload that is completed only when the
    content matched the manifest; counted by its writer, as the small ones are."""

    written = False

    def __init__(self, writer: _S3Writer, key: str, record: dict):
        self.w, self.record = writer, record
        # An extract killed while writing this object left its upload open: same key, same
        # content, so it is aborted rather than billed forever.
        abort_stale_uploads(writer.control, writer.bucket, key)
        self.uploader = PartUploader(writer.control, writer.bucket, key, storage_class="STANDARD",
                                     sizer=PartSizer(8 * MiB, lambda: record["size"] + MiB,
                                                     max_part=max(8 * MiB, writer.part_memory // 2)),
                                     memory=writer.part_memory // 2, extra_args=object_args(record))

    def write(self, data: bytes) -> None:
        self.uploader.write(data)

    def finish(self, ok: bool) -> None:
        if ok:
            self.uploader.complete()
            self.w.count("written", self.record)
        else:
            self.uploader.abort()


def safe_component(name: str) -> str:
    """A path component that fits NAME_MAX bytes: longer ones keep their first 200 bytes (cut
    at a character boundary), then ``~`` and 16 hex digits of the whole component's SHA-256."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= NAME_MAX:
        return name
    head = raw[:200].decode("utf-8", "ignore")
    return f"{head}~{hashlib.sha256(raw).hexdigest()[:16]}"


@contextmanager
def _local(path: str | Path, doing: str):
    """A local file system error while ``doing`` to ``path`` as the permanent error naming it
    (a full disk, a read-only directory); S3's and the network's errors pass through."""
    try:
        yield
    except OSError as exc:
        if isinstance(exc, IO_ERRORS[:-1]) or exc.errno is None:
            raise
        reason = os.strerror(exc.errno)
        hint = {errno.ENOSPC: "free space there or extract elsewhere; objects written so far are complete "
                              "and a re-run skips them",
                errno.EDQUOT: "free space within the quota or extract elsewhere",
                errno.EFBIG: "the file system (or ulimit -f) does not allow a file this large; extract elsewhere",
                errno.EROFS: "the file system is read-only; extract elsewhere",
                errno.EACCES: "make it writable for this user, or extract elsewhere",
                errno.EPERM: "make it writable for this user, or extract elsewhere"}.get(
                    exc.errno, "check the path, or extract elsewhere")
        raise LocalFileError(f"cannot {doing} {path}: {reason}", hint=hint) from exc


class _DirWriter:
    def __init__(self, root: Path, prefix: str, original_keys: bool, overwrite: bool,
                 metadata_file: Path | None = None):
        with _local(root, "create the directory"):
            root.mkdir(parents=True, exist_ok=True)
        with _local(root, "open the directory"):
            self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        with _local(metadata_file or "", "write the metadata file"):
            self.metadata = open(metadata_file, "w", encoding="utf-8") if metadata_file is not None else None
        self.metadata_path = metadata_file
        self.prefix = prefix
        self.original_keys = original_keys
        self.overwrite = overwrite
        self.conflicts: list[str] = []
        self.target = str(root)

    def _open_dir(self, parts: list[str]) -> int:
        """Open (creating) the directory ``parts`` under the root, never through a symlink."""
        fd = os.dup(self.root_fd)
        for i, part in enumerate(parts):
            try:
                with _local(os.path.join(self.target, *parts[:i + 1]), "create the directory"):
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
            except BaseException:
                os.close(fd)
                raise
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                os.close(fd)
                raise DestinationConflict(f"refusing to write through {'/'.join(parts)!r} in {self.target}: "
                                          f"it is not a plain directory ({exc.strerror}); a symlink there "
                                          "could lead outside the target", hint="extract into an empty directory") from exc
            os.close(fd)
            fd = child
        return fd

    def begin(self, record: dict):
        name, is_dir = member_name(_relative(record["key"], self.prefix, self.original_keys), record["size"])
        parts = [safe_component(p) for p in name.rstrip("/").split("/") if p]
        if not parts:
            self.describe(record, ".")
            return None  # the prefix's own folder marker: the root itself
        path = "/".join(parts)
        if is_dir:
            os.close(self._open_dir(parts))
            self.describe(record, path + "/")
            return _MadeDirectory()
        dir_fd = self._open_dir(parts[:-1])
        existing = self._existing(dir_fd, parts[-1], record)
        if existing == "same":
            os.close(dir_fd)
            self.describe(record, path)
            return None
        if existing == "different" and not self.overwrite:
            os.close(dir_fd)
            self.conflicts.append(os.path.join(self.target, *parts))
            return _Discard()
        try:
            return _LocalFile(dir_fd, os.path.join(self.target, *parts), record, lambda: self.describe(record, path))
        except BaseException:
            os.close(dir_fd)
            raise

    def describe(self, record: dict, path: str) -> None:
        """One line of the metadata file for an object now in the directory at ``path``."""
        if self.metadata is not None:
            with _local(self.metadata_path or "", "write the metadata file"):
                self.metadata.write(json.dumps({"path": path, **attributes.portable(record)}, ensure_ascii=False) + "\n")

    @staticmethod
    def _existing(dir_fd: int, name: str, record: dict) -> str | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError:
            return "different"  # a symlink or something else: never read through it
        with os.fdopen(fd, "rb") as f:
            if os.fstat(f.fileno()).st_size != record["size"]:
                return "different"
            digest = hashlib.sha256()
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        return "same" if digest.hexdigest() == record["sha256"] else "different"

    def close(self, failing: bool = False) -> None:
        os.close(self.root_fd)
        if self.metadata is not None:
            with _local(self.metadata_path or "", "write the metadata file"):
                self.metadata.close()


class _LocalFile:
    """Written to a temporary name beside the target, renamed over it once the hash matched."""

    written = True

    def __init__(self, dir_fd: int, path: str, record: dict, written):
        self.dir_fd, self.path, self.record, self.on_written = dir_fd, path, record, written
        self.name = os.path.basename(path)
        self.tmp = f".{self.name[:200]}.s3arch-partial-{os.getpid()}"
        with _local(path, "write"):
            fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        self.file = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        with _local(self.path, "write"):
            self.file.write(data)

    def finish(self, ok: bool) -> None:
        try:
            with _local(self.path, "write"):
                try:
                    self.file.close()
                except OSError:
                    if ok:
                        raise
                if ok:
                    mtime = parse_s3_time(self.record["last_modified"]).timestamp()
                    os.utime(self.tmp, (mtime, mtime), dir_fd=self.dir_fd, follow_symlinks=False)
                    os.rename(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                    self.on_written()
        except BaseException:
            ok = False
            raise
        finally:
            if not ok:
                try:
                    os.unlink(self.tmp, dir_fd=self.dir_fd)
                except OSError:
                    pass  # a partial file the next run replaces; the error that matters is raised
            os.close(self.dir_fd)
