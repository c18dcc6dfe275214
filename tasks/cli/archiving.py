"""`s3arch archive` (a prefix, or a job's days with --job) and `s3arch delete-sources`: the
commands that write archives, and how their results are printed."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from s3arch.cli.jobs import job_named, jobs_file
from s3arch.core.config import ArchiveSpec, S3Url, default_processes
from s3arch.core.errors import ArchiverError, EmptyPrefix, outcome
from s3arch.core.options import archive_options, archive_spec, whole_days
from s3arch.core.progress import Progress, TerminalLine, human_bytes

if TYPE_CHECKING:
    from s3arch.io.store import Store


def archive(args, clients) -> int:
    from s3arch.core.errors import BadArgument
    from s3arch.ops.window import earlier_sources

    if args.job:
        return archive_job(args, clients)
    if not (args.source and args.destination):
        raise BadArgument("archive needs SOURCE and DESTINATION, or --job NAME --date DATE")
    values = {name: getattr(args, name) for name in archive_options() if hasattr(args, name)}
    values["processes"] = args.processes or default_processes(clients.endpoint_url)
    spec = archive_spec(S3Url.parse(args.source), S3Url.parse(args.destination), values)
    late_window = args.late_window  # days re-checked before this one, not a setting of the archive
    window = earlier_sources(spec.source, whole_days(late_window, "--late-window")) if late_window else []
    # The window's days first, oldest first: each re-checked (never overwritten), then the day named.
    for day in [replace(spec, source=source, overwrite=False) for source in window] + [spec]:
        try:
            result = archive_sized(args, day, clients, recheck=day is not spec)
        except EmptyPrefix:
            if day is spec:
                raise
            continue  # nothing there that day: nothing to re-check
        print_result(args, result)
    return 0


# What `archive --job` takes from the command line; every other setting is the job's.
JOB_RUN_FLAGS = ("overwrite", "dry_run")


def archive_job(args, clients) -> int:
    """A job's days as its DAG's range run archives them: each day's name (its preset's and
    wildcards' prefix), one archive per split value, the job's settings (a done day's late
    objects become its next part). Every day runs; the worst failure is the exit."""
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import load_jobs
    from s3arch.ops.planning import plan

    given = [o.flag for name, o in archive_options().items()
             if name not in JOB_RUN_FLAGS and getattr(args, name, o.default) not in (o.default, None)]
    if args.source or args.destination or given or not args.date:
        raise BadArgument("--job takes --date [--date-to] and only --overwrite or --dry-run of the archive flags"
                          + (f" (given: {', '.join(given)})" if given else ""),
                          hint="the job's settings are in the jobs file; change them there")
    job = job_named(load_jobs(jobs_file(args)), args.job)
    names = job.split(clients.store, plan(job, date_from=args.date, date_to=args.date_to or args.date))
    failed: list[ArchiverError] = []
    for name in names:
        spec = job.spec_for(name, overwrite=args.overwrite, dry_run=args.dry_run)
        try:
            print_result(args, archive_sized(args, spec, clients))
        except EmptyPrefix as exc:
            if not job.allow_empty:
                failed.append(exc)
            print(f"{name}: {exc}", file=sys.stderr)
        except ArchiverError as exc:  # the next day runs, as the DAG's next task does
            failed.append(exc)
            print(f"{name}: {outcome(exc).message}", file=sys.stderr)
    if failed:  # retried if another try can help any of them (the done ones skip), as the DAG's run is
        print(f"{len(failed)} of {len(names)} prefix(es) of job {job.name} failed", file=sys.stderr)
        raise next((e for e in failed if e.retryable), failed[0])
    return 0


def archive_sized(args, spec: ArchiveSpec, clients, recheck: bool = False):
    """``archive_one`` of ``spec`` as ``sized`` leaves it, the sizing's requests and CPU on the
    result's bill."""
    from s3arch.protocol.bill import RunBill

    bill = RunBill(clients.store.sent)
    spec, listed = sized(spec, clients.store)
    sizing = bill.so_far()
    result = archive_one(args, spec, clients, recheck, listed)
    result.add_bill(sizing["requests"], sizing["cpu_s"])
    return result


def archive_one(args, spec: ArchiveSpec, clients, recheck: bool = False, listed: list[list] | None = None):
    from s3arch.archive import archive_prefix

    show = not (args.json or args.quiet)
    live = TerminalLine(sys.stderr) if show and sys.stderr.isatty() else None
    if live:
        progress = Progress(live, interval=0.25)
    else:
        progress = Progress((lambda s: print(s.line(), file=sys.stderr, flush=True)) if show else None,
                            interval=5.0)
    try:
        return archive_prefix(spec, clients, progress, recheck=recheck, listed=listed)
    finally:
        if live:
            live.close()


def print_result(args, result) -> None:
    if args.json:
        print(json.dumps(result.to_dict()))
        return
    if result.status == "skipped":
        parts = f" and {result.part - 1} late part(s)" if result.part > 1 else ""
        print(f"skipped: {result.source} is already archived at {result.archive}{parts} "
              f"(manifest {result.manifest}); nothing newer than the archive; --overwrite re-archives it")
        if result.deletion:
            print(deletion_line(result))
    elif result.status == "dry_run" and result.late:
        print(f"dry run: {result.late:,} objects ({human_bytes(result.bytes_in)}) under {result.source} are newer "
              f"than its archive; they would be archived as part {result.part} at {result.archive}")
    elif result.status == "dry_run":
        print(f"dry run: {result.objects:,} objects, {human_bytes(result.bytes_in)} under {result.source}; "
              f"archive would be about {human_bytes(result.estimated_bytes_out or 0)} at {result.archive}")
        print(cost_line(result))
    else:
        rate = result.bytes_in / result.seconds if result.seconds else 0
        print(f"archived {result.objects:,} objects, {human_bytes(result.bytes_in)} -> "
              f"{human_bytes(result.bytes_out)} (ratio {result.ratio:.1f}) in {result.seconds:.1f}s "
              f"({result.objects / max(result.seconds, 1e-9):,.0f} obj/s, {human_bytes(rate)}/s), "
              f"{bill_text(result)}\n"
              f"  archive:  {result.archive} [{result.storage_class}]"
              + (f" {retention_text(result.retention)}" if result.retention else "") + "\n"
              f"  manifest: {result.manifest}"
              + (f"\n  {deletion_line(result)}" if result.deletion else "")
              + f"\n  {cost_line(result)}"
              + (f"\n  throttled: S3 answered {result.throttled:,} request(s) 503 SlowDown; waited out with "
                 "backoff and fewer requests in flight" if result.throttled else ""))
    for note in result.notes:
        print(f"note: {note}")


# How the summary groups a run's requests (boto3's operation names), in this order; the rest: "other".
REQUEST_VERBS = {"LIST": ("list_objects_v2",), "GET": ("get_object", "get_object_tagging"),
                 "PUT": ("put_object", "upload_part", "create_multipart_upload", "complete_multipart_upload")}


def bill_text(result) -> str:
    """The run's bill as the summary shows it: "1,234 requests (12 LIST, 1,200 GET, 20 PUT, 2
    other), 3.1 CPU-s"."""
    requests = dict(result.requests or {})
    groups = [(verb, sum(requests.pop(op, 0) for op in ops)) for verb, ops in REQUEST_VERBS.items()]
    groups.append(("other", sum(requests.values())))
    total = sum(n for _, n in groups)
    shown = ", ".join(f"{n:,} {verb}" for verb, n in groups if n)
    return f"{total:,} requests" + (f" ({shown})" if shown else "") + f", {result.cpu_s:.1f} CPU-s"


def sized(spec: ArchiveSpec, store: Store) -> tuple[ArchiveSpec, list[list] | None]:
    """``--segments N`` (N >= 2) cuts only a prefix at or over the thresholds, as a job's
    ``segments`` does: the prefix is sized first (a listing of at most
    segment_min_objects / 1,000 pages, what the archive DAG's sizing task does), and a smaller
    one is archived as one pipeline. A large one's pages are the plan's first (not listed
    again). Without --segments the engine sizes it while it runs."""
    if spec.segments < 2 or spec.dry_run:
        return spec, None
    from s3arch.produce.segments import size_prefix

    kept: list[list] = []

    def keep(prefix: str, pages: list, listed_at: float) -> dict:
        kept.extend(pages)
        return {"objects": sum(map(len, pages))}

    size = size_prefix(store, spec.source.bucket, spec.source.key, spec.segment_min_objects, spec.segment_min_bytes,
                       hand_off=keep)
    if size.large(spec.segment_min_objects, spec.segment_min_bytes):
        return spec, kept
    return replace(spec, segments=0, processes=1), None


def retention_text(retention: dict) -> str:
    parts = []
    if "mode" in retention:
        parts.append(f"{retention['mode']} retention until {retention.get('retain_until')}")
    if retention.get("legal_hold") == "ON":
        parts.append("legal hold")
    return "[locked: " + ", ".join(parts) + "]"


def cost_line(result) -> str:
    from s3arch.core.cost import CostEstimate

    return CostEstimate.from_dict(result.cost).line()


def deletion_line(result) -> str:
    d = result.deletion
    kept = f"; kept {d['kept_changed']:,} rewritten since archiving" if d["kept_changed"] else ""
    if d.get("kept_locked"):
        kept += f"; kept {d['kept_locked']:,} under Object Lock"
    return f"source deletion finished: deleted {d['deleted']:,} archived objects{kept}"


def delete_sources(args, clients, layout) -> int:
    from s3arch.archive import delete_sources
    from s3arch.format.manifest import destination_of
    from s3arch.stored.manifests import read_committed

    committed = read_committed(clients.store, layout)
    if committed is None:
        from s3arch.core.errors import BadArgument

        raise BadArgument(f"{layout.manifest_url} does not exist: nothing is archived there, so "
                          "nothing may be deleted", hint="give the archive or manifest URL `s3arch ls` accepts")
    source = committed.header["source"]
    archived = S3Url(source["bucket"], source["prefix"])
    spec = archive_spec(archived, destination_of(layout, archived),
                        {"codec": committed.header["codec"], "storage_class": committed.summary["storage_class"],
                         "delete_source": True, "delete_versions": args.delete_versions})
    result = delete_sources(spec, clients)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(deletion_line(result))
        for note in result.notes:
            print(f"note: {note}")
    return 0
