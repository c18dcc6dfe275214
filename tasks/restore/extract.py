"""Extract objects from a (readable) archive back to S3 (tasks/restore/to_s3.py) or to a
local directory (tasks/restore/to_dir.py).

Works from the manifest's offsets, not by parsing tar headers: the selected records (in
archive order) are grouped into runs whose compressed ranges touch or nearly touch, each run
is one ranged GET decoded from its first block, and each record's bytes are cut out at
``data_offset`` for ``size`` bytes and checked against the manifest's SHA-256 *before* the
object becomes visible at the target. The whole archive is simply one selection of every
record, read in runs of bounded size.

An extract stops as an archive stream does (tasks/core/stops.py): the target's writer owns its
coordinator (``Writer.stream``), which the run's ``Cancel`` cancels. The reading loop starts no
object and reads no further once it stopped, and raises the cause (the cancel's reason, or the
write that failed first) with what was written before it.
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from s3arch.core.config import MiB, S3Url
from s3arch.core.coordinator import Stopped, StreamCoordinator
from s3arch.core.errors import ArchiverError, BadArgument, DestinationConflict, IntegrityError
from s3arch.core.stops import Cancel, cancelling
from s3arch.format.manifest import ArchiveLayout
from s3arch.stored.manifests import find_records, iter_manifest
from s3arch.io.store import Store
from s3arch.restore.glacier import require_readable
from s3arch.restore.reading import DECODE_CHUNK, decompressor_for
from s3arch.restore.sinks import ExtractResult, Sink, Writer
from s3arch.restore.to_dir import DirWriter
from s3arch.restore.to_s3 import S3Writer

_RUN_GAP = 256 << 10      # fetch through a gap this small rather than issue another GET
_RUN_MAX = 64 * MiB       # compressed bytes per GET
_RUN_RECORDS = 2_500      # records per GET: the run's record list (about 2.5 KB each) is held while it is read


@dataclass(frozen=True)
class Selection:
    keys: tuple[str, ...] | None = None
    glob: str | None = None

    @classmethod
    def of(cls, keys: Iterable[str] | None = None, glob: str | None = None) -> "Selection":
        if keys is not None and glob is not None:
            raise BadArgument("give either keys or a glob, not both")
        return cls(tuple(dict.fromkeys(keys)) if keys is not None else None, glob)


def extract_to_s3(clients, layout: ArchiveLayout, target: S3Url, *, selection: Selection = Selection(),
                  original_keys: bool = False, overwrite: bool = False, memory_budget: int = 256 * MiB,
                  skip_keys: frozenset[str] = frozenset(), raise_conflicts: bool = True,
                  cancel: Cancel | None = None) -> ExtractResult:
    """The selected objects written back as objects under ``target``, each with the metadata
    and tags it was archived with. ``skip_keys``: keys a later part of the day holds
    (tasks/restore/days.py). Without ``raise_conflicts`` the result lists them instead
    (``conflict_error`` makes the error). ``cancel`` (tasks/core/stops.py) stops it before its
    next object or part: ``Cancelled``, raised once the writes in flight ended and the multipart
    uploads it started were aborted."""
    def writer(prefix: str, result: ExtractResult) -> Writer:
        return S3Writer(clients, target, prefix, original_keys, overwrite, memory_budget, result)

    return _extract(clients, layout, selection, writer, skip_keys, raise_conflicts, cancel)


def extract_to_dir(clients, layout: ArchiveLayout, directory: Path, *, selection: Selection = Selection(),
                   original_keys: bool = False, overwrite: bool = False, metadata_file: Path | None = None,
                   skip_keys: frozenset[str] = frozenset(), raise_conflicts: bool = True,
                   cancel: Cancel | None = None) -> ExtractResult:
    """The selected objects written as files under ``directory``. ``metadata_file``: where to
    write each one's attributes (JSON Lines, FORMAT.md "Metadata file"), since a file system
    keeps only bytes and mtime. ``skip_keys``, ``raise_conflicts`` and ``cancel`` as
    ``extract_to_s3``'s (a cancelled file is not left half written)."""
    def writer(prefix: str, result: ExtractResult) -> Writer:
        return DirWriter(Path(directory), prefix, original_keys, overwrite, metadata_file)

    return _extract(clients, layout, selection, writer, skip_keys, raise_conflicts, cancel)


def _extract(clients, layout: ArchiveLayout, selection: Selection,
             writer_for: Callable[[str, ExtractResult], Writer], skip_keys: frozenset[str],
             raise_conflicts: bool, cancel: Cancel | None) -> ExtractResult:
    """The selection read in runs and handed to the target's writer, made by ``writer_for``
    from the archived prefix and the result it counts into; ``cancel`` stops the writer's stream."""
    store = clients.store
    header, records = _select(store, layout, selection)
    if skip_keys:
        records = (r for r in records if r["key"] not in skip_keys)
    archive_key = header["archive"]["key"]
    require_readable(store, layout.bucket, archive_key)
    result = ExtractResult(f"s3://{layout.bucket}/{archive_key}", "")
    writer = writer_for(header["source"]["prefix"], result)
    result.target = writer.target
    stream = writer.stream
    cursor = None
    with cancelling(stream, cancel, f"extracting {result.archive} to {result.target}", "nothing partial was left"):
        try:
            for run in _runs(records, header["block_size"]):
                cursor = _extract_run(store, layout.bucket, archive_key, header, run, writer, result, cursor)
        except BaseException as exc:
            error = _cause(stream, exc, result)  # recorded before the writer closes: its writes stop
            writer.close(failing=True)
            if error is exc:
                raise
            raise error  # noqa: B904 - the cause, not the signal that reported it
        writer.close()
        if not stream.announce_done():  # a write failed after the last was queued, or a cancel came
            raise _cause(stream, Stopped(f"{stream.what} stopped"), result)
    result.conflicts = writer.conflicts
    if writer.conflicts and raise_conflicts:
        raise conflict_error(result)
    return result


def _cause(stream: StreamCoordinator, caught: BaseException, result: ExtractResult) -> BaseException:
    """What the extract raises once it stopped with ``caught`` in hand: ``caught`` itself if it
    is the first failure (the reading thread's own); else the stream's cause (a write that
    failed, a cancel) with what was written before it, which is whole and which a re-run skips."""
    error = stream.failure(caught)
    if error is caught or not isinstance(error, ArchiverError):
        return error
    written = type(error)(f"{error}; {result.objects:,} objects were written before it, and a re-run skips them")
    written.__cause__ = error
    return written


def conflict_error(result: ExtractResult) -> DestinationConflict:
    return DestinationConflict(
        f"{len(result.conflicts)} objects already exist at {result.target} with other content and "
        f"were left alone (first: {result.conflicts[0]}); {result.objects} others were extracted",
        hint="add --overwrite to replace them")


def _select(store: Store, layout: ArchiveLayout, selection: Selection) -> tuple[dict, Iterator[dict]]:
    if selection.keys is not None:
        header, found = find_records(store, layout, list(selection.keys))
        missing = [k for k in selection.keys if k not in found]
        if missing:
            raise BadArgument(f"{len(missing)} of the {len(selection.keys)} keys asked for are not in "
                              f"{layout.manifest_url}: {', '.join(repr(k) for k in missing[:5])}"
                              + (" ..." if len(missing) > 5 else ""),
                              hint="s3arch ls lists the archived keys; nothing was extracted")
        return header, iter(sorted(found.values(), key=lambda r: r["header_offset"]))
    records = iter_manifest(store, layout)
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
        self.decoder = decompressor_for(codec, from_block_start=True)
        self.pending = bytearray()
        self.position = tar_position
        self.fetched = compressed


def _extract_run(store: Store, bucket: str, key: str, header: dict, run: list[dict], writer: Writer,
                 result: ExtractResult, cursor: _Cursor | None = None) -> _Cursor:
    start = run[0]["range"][0]
    end = max(r["range"][1] for r in run)
    if cursor is None or start > cursor.fetched + _RUN_GAP or run[0]["data_offset"] < cursor.position:
        cursor = _Cursor(header["codec"], run[0]["block"] * header["block_size"], start)
    what = f"read s3://{bucket}/{key}"
    chunks: Iterator[bytes] = iter(())
    if end > cursor.fetched:
        chunks = store.stream(bucket, key, what, start=cursor.fetched, end=end, chunk=DECODE_CHUNK)
        result.gets += 1
        result.bytes_fetched += end - cursor.fetched
    try:
        for record in run:
            if record["data_offset"] < cursor.position:  # passed by an earlier record: impossible in order
                raise IntegrityError(f"manifest records of s3://{bucket}/{key} are out of order")
            writer.stream.raise_if_stopped()  # no object starts after a stop
            sink = writer.begin(record)
            try:
                sha256 = _copy_record(record, cursor, chunks, sink, writer.stream, f"s3://{bucket}/{key}")
            except BaseException:
                if sink is not None:
                    sink.finish(False)  # no partial file, no open multipart upload
                raise
            ok = sha256 == record["sha256"]
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


def _copy_record(record: dict, cursor: _Cursor, chunks: Iterator[bytes], sink: Sink | None,
                 stream: StreamCoordinator, archive: str) -> str:
    """Decode on from ``cursor`` to the end of ``record``'s bytes, handing them to ``sink`` (None:
    only hashed); their SHA-256. Reads no further once ``stream`` stopped."""
    pending = cursor.pending
    skip = record["data_offset"] - cursor.position
    remaining = record["size"]
    digest = hashlib.sha256()
    while skip or remaining:
        if not pending:
            stream.raise_if_stopped()
            compressed = next(chunks, None)
            if compressed is None:
                raise IntegrityError(f"{archive} ended before {record['key']!r} was read")
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
    return digest.hexdigest()
