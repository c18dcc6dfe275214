"""Archive one prefix: the entry point the CLI and the Airflow operator call.

It validates the request, checks both buckets, answers a dry run, picks who makes the archive
(tasks/produce/producers.py: a pipeline or segments on this machine, or the assembly of a plan's
segments) and hands it to the commit protocol (tasks/protocol/commit.py), which decides skip,
overwrite, commit and source deletion. Each entry point records the run's bill on its result
(tasks/protocol/bill.py: the S3 requests it asked for and the CPU-seconds it used).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from s3arch.protocol.bill import RunBill
from s3arch.protocol.checks import cost_of
from s3arch.protocol.commit import CommitProtocol
from s3arch.protocol.result import ArchiveResult
from s3arch.core.config import ArchiveSpec
from s3arch.core.errors import BadArgument, EmptyPrefix
from s3arch.core.stops import Cancel, raise_if_cancelled
from s3arch.io.ranges import LISTING_WORKERS
from s3arch.io.sources import resolved, source_pages
from s3arch.format.manifest import layout_for
from s3arch.core.outcome import Outcome
from s3arch.produce.producers import OnThisMachine, PlannedAssembly
from s3arch.produce.sample import Sample
from s3arch.produce.segments.sized import taken_over
from s3arch.core.progress import Progress
from s3arch.io.retention import has_default_retention, require_object_lock
from s3arch.io.s3 import S3Clients, refuse_directory_bucket
from s3arch.format.tally import ListingTally


def archive_prefix(spec: ArchiveSpec, clients: S3Clients | None = None,
                   progress: Progress | None = None, cancel: Cancel | None = None,
                   recheck: bool = False, listed: list[list] | None = None) -> ArchiveResult:
    """Archive one prefix. Setting ``cancel`` (from another thread or a signal handler) stops
    the run: its uploads are aborted and it raises ``Cancelled`` with the reason given to
    ``cancel.set``; nothing is committed (tasks/core/stops.py). ``recheck``: the prefix is
    expected archived (a late window's day): its state is read before the lease is taken, so a
    day with nothing new costs no lease PUT and DELETE; a first run takes it alongside instead
    (one round trip less when the day is new). ``listed``: with ``spec.segments`` >= 2, the
    prefix's first pages as its caller's sizing listed them (the plan lists after them)."""
    clients = clients or _clients_for(spec)
    bill = RunBill(clients.store.sent)
    return bill.close(_archive_prefix(spec, clients, progress, cancel, recheck, listed))


def _archive_prefix(spec: ArchiveSpec, clients: S3Clients, progress: Progress | None, cancel: Cancel | None,
                    recheck: bool, listed: list[list] | None) -> ArchiveResult:
    protocol = _checked(spec, clients, cancel)
    spec = protocol.spec  # a pattern's prefixes expanded
    if spec.dry_run:
        committed = protocol.skipped_if_committed()
        return committed or _dry_run(spec, clients, protocol.result, protocol.started)
    if recheck and (skipped := protocol.skipped_before_lease()) is not None:
        return skipped
    return protocol.run(OnThisMachine(spec, clients, protocol.layout, protocol.archive_key, progress, listed))


def prepare_segments(spec: ArchiveSpec, count: int, clients: S3Clients | None = None,
                     cancel: Cancel | None = None, sized: dict | None = None) -> ArchiveResult:
    """A segmented run spread over tasks, step one: plan ``count`` segments and open the
    archive's upload (``result.status`` "planned"), or skip a committed prefix. A dry run
    plans nothing and writes nothing: the assemble step's dry run lists and estimates.
    Setting ``cancel`` stops the plan (``Cancelled``) before it opens an upload. The plan
    records what the step spent until it was written, for the assemble step's bill.
    ``sized``: the hand-off of the prefix's first pages from the task that sized it
    (tasks/produce/segments/sized.py): they are not listed again."""
    clients = clients or _clients_for(spec)
    bill = RunBill(clients.store.sent)
    protocol = _checked(spec, clients, cancel, "planning the segments of")
    if spec.dry_run:
        result = protocol.skipped_if_committed() or protocol.result
        if result.status != Outcome.SKIPPED:
            result.status, result.segments = Outcome.DRY_RUN, count
            result.notes.append(f"dry run: {count} segments would be planned and the archive's upload "
                                "opened; nothing was written (the assemble task estimates the archive)")
        return bill.close(result)
    # Read before the plan's lease, whose cleanup of stale runs deletes every temporary of the prefix.
    listed, note = taken_over(clients.store, protocol.layout, sized)
    if protocol.prepare_segments(count, billed=bill.so_far, listed=listed) is not None and note:
        protocol.result.notes.append(note)
    return bill.close(protocol.result)


def archive_segment(spec: ArchiveSpec, k: int, clients: S3Clients | None = None,
                    progress: Progress | None = None, cancel: Cancel | None = None) -> dict:
    """Step two, one task per segment, anywhere: produce segment ``k`` of the plan in progress.
    The result's ``status`` is produced, skipped (the prefix is committed and not to be
    overwritten: there is nothing to produce) or dry_run (nothing read or written); its
    ``requests`` and ``cpu_s`` are what this step spent. The segment's record (what the
    assembler reads) carries what it spent up to that record, for the assemble step's bill."""
    from s3arch.produce.segments import PlanOutdated, produce_planned_segment

    if spec.dry_run:
        return {"segment": k, "objects": 0, "status": Outcome.DRY_RUN.value, "requests": {}, "cpu_s": 0.0,
                "note": f"dry run: segment {k + 1} would be produced here; nothing was read or written"}
    clients = clients or _clients_for(spec)
    bill = RunBill(clients.store.sent)
    raise_if_cancelled(cancel, f"producing segment {k + 1} of {spec.source}", "nothing was sent")
    _check_owner(spec, clients)
    clients.check_bucket(spec.source.bucket, "source", spec.source.key)
    try:
        return bill.closed(produce_planned_segment(spec, clients, k, progress, cancel, billed=bill.so_far))
    except PlanOutdated as exc:
        # A retry of this task reads the same plan: only the prefix's prepare, run again, helps.
        raise PlanOutdated(exc.detail, hint="clear this prefix's prepare task "
                           "with downstream (or let the next run of the prefix plan again)", retryable=False) from exc


def assemble_segments(spec: ArchiveSpec, clients: S3Clients | None = None, progress: Progress | None = None,
                      cancel: Cancel | None = None, segments: int = 1) -> ArchiveResult:
    """Step three: assemble the produced segments and commit, as ``archive_prefix`` commits.
    A dry run estimates the prefix as ``archive_prefix`` does, for ``segments`` segments. The
    bill is the whole segmented run's: this step's, and what the plan and every segment's
    record say the prepare and segment steps spent."""
    clients = clients or _clients_for(spec)
    if spec.dry_run:
        result = archive_prefix(spec, clients, progress, cancel)  # billed there
        if result.status == Outcome.DRY_RUN:
            result.segments = segments
        return result
    bill = RunBill(clients.store.sent)
    protocol = _checked(spec, clients, cancel)
    return bill.close(protocol.run(PlannedAssembly(protocol.spec, clients, protocol.layout)))


def delete_sources(spec: ArchiveSpec, clients: S3Clients | None = None) -> ArchiveResult:
    """Finish deleting the sources of a committed prefix (``s3arch delete-sources``)."""
    clients = clients or _clients_for(spec)
    bill = RunBill(clients.store.sent)
    return bill.close(_checked(spec, clients).delete_sources_only())


def _clients_for(spec: ArchiveSpec) -> S3Clients:
    return S3Clients.from_session(expected_owner=spec.expected_owner)


def _check_owner(spec: ArchiveSpec, clients: S3Clients) -> None:
    """The owner a spec names is sent by its clients, which take it where they are built
    (``S3Clients.from_session``): clients built without it must not drop it unnoticed."""
    wanted = spec.expected_owner
    if wanted is not None and (clients.expected_owner is None or wanted not in ("self", clients.expected_owner)):
        raise BadArgument(f"the run expects its buckets owned by {wanted}, but its S3 clients name "
                          f"{clients.expected_owner or 'no owner'}",
                          hint="build them with S3Clients.from_session(expected_owner=...)")


def _checked(spec: ArchiveSpec, clients: S3Clients, cancel: Cancel | None = None,
             doing: str = "archiving") -> CommitProtocol:
    """``doing``: the work a stop from above (``cancel``) interrupts, as its message names it."""
    raise_if_cancelled(cancel, f"{doing} {spec.source}", "nothing was sent")  # before its first requests
    layout = layout_for(spec.source, spec.destination)
    archive_key = layout.archive_key(spec.extension)
    _check_owner(spec, clients)
    # Before the retention read below, which would otherwise be sent to (and retried against)
    # a bucket the check refuses by its name.
    refuse_directory_bucket(spec.source.bucket, "source")
    refuse_directory_bucket(layout.bucket, "destination")
    with ThreadPoolExecutor(1, thread_name_prefix="s3arch-retention") as pool:
        # The lease's first PUT needs to know whether the destination locks new objects by
        # default: asked beside the HeadBuckets, not after them, it is no round trip of its own
        # in every run's fixed cost (bench/README.md, "Fixed cost").
        retention = pool.submit(has_default_retention, clients.store, layout.bucket)
        clients.check_buckets((spec.source.bucket, "source", spec.source.key),
                              (layout.bucket, "destination", archive_key.rsplit("/", 1)[0] + "/"))
        retention.result()
    if spec.write_options.locks:
        require_object_lock(clients.store, layout.bucket)
    # A pattern's wildcards are expanded before anything is written: no match is exit 2.
    source = resolved(clients.store, spec.source, spec.max_prefixes)
    if spec.source.bucket == layout.bucket and any(archive_key.startswith(p) for p in source.prefixes):
        raise BadArgument(f"the destination s3://{layout.bucket}/{archive_key} lies inside the source "
                          f"{spec.source}", hint="choose a destination outside the source prefixes")
    return CommitProtocol(replace(spec, source=source), clients, cancel)


def _dry_run(spec, clients, result, started) -> ArchiveResult:
    """Count what would be archived (one listing) and estimate the archive from a compressed
    sample fetched in parallel beside the listing: the cost is the listing plus a bounded
    number of GETs, whatever the prefix's size."""
    result.status = Outcome.DRY_RUN
    tally = ListingTally()
    sample = Sample(spec, clients)  # its GETs start as the listing offers objects (from its first page)
    try:
        for page in source_pages(clients.store, spec.source, workers=LISTING_WORKERS, ordered=False):
            tally.add(page)
            for o in page:
                sample.offer(o)
        result.objects, result.bytes_in = tally.objects, tally.bytes
        if result.objects == 0:
            raise EmptyPrefix(f"{spec.source} holds no objects; nothing would be archived")
        sample_in, sample_tallied, sample_out = sample.compressed()
    finally:
        sample.close()
    ratio = sample_out / sample_tallied if sample_tallied else 1.0
    result.tar_bytes = tally.tar_bytes
    result.estimated_bytes_out = int(tally.tar_bytes * ratio)
    result.cost = cost_of(spec, result.objects, result.bytes_in, tally.short_of_min_billable,
                          result.estimated_bytes_out, tally.classes.bytes_by_class)
    classes = tally.classes
    if classes.unreadable:
        result.needs_restore = classes.unreadable
        result.notes.append(classes.note(str(spec.source)))
    result.notes.append(f"estimated from a sample of {len(sample):,} objects ({sample_in:,} bytes), "
                        f"compressed {spec.codec} level {spec.effective_level}")
    result.seconds = time.monotonic() - started
    return result
