"""s3arch (python -m s3arch): archive | restore | extract | delete-sources | ls | cat | verify | plan | scrub.

Exit codes: 0 success (archived, skipped, dry run, no drift), 2 a permanent error (fix the
input) or drift a scrub found, 3 a retryable error (a fault that outlasted the retries,
another run of the same prefix at work, or `restore --wait` timing out while S3 still
restores: try again), 4 an empty source prefix, 130 interrupted (Ctrl-C: uploads in progress
aborted, nothing committed).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from s3arch.core.config import ArchiveSpec, S3Url, default_processes, parse_size
from s3arch.core.errors import ArchiverError, EmptyPrefix, outcome
from s3arch.core.options import archive_options, archive_spec, options_for, whole_days
from s3arch.core.progress import Progress, TerminalLine, human_bytes
from s3arch.core.version import __version__


def _parser() -> argparse.ArgumentParser:
    # The connection flags (and how long to wait out throttling) work before or after the
    # subcommand. They are shared by the main parser and every subcommand and default to
    # "absent", so neither overrides the other.
    connection = argparse.ArgumentParser(add_help=False)
    connection.add_argument("--endpoint-url", default=argparse.SUPPRESS,
                            help="S3 endpoint (default: AWS_ENDPOINT_URL_S3, profile, AWS)")
    connection.add_argument("--profile", default=argparse.SUPPRESS, help="AWS profile to use")
    _option_flags(connection, "connection")
    p = argparse.ArgumentParser(prog="s3arch", description=__doc__.split("\n")[0], parents=[connection])
    p.add_argument("--version", action="version", version=f"s3arch {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def command(name, **kwargs):
        return sub.add_parser(name, parents=[connection], **kwargs)

    _archive_arguments(command("archive", help="pack a prefix into one compressed tar archive + manifest"))

    d = command("delete-sources", help="finish deleting the sources of an archived prefix "
                                              "(only objects the manifest holds with an unchanged ETag)")
    d.add_argument("archive", help="s3://DEST_BUCKET/... archive or manifest key")
    _option_flags(d, "delete-sources")
    d.add_argument("--json", action="store_true")

    for name, text in (("ls", "list the archived objects from the manifest"),
                       ("verify", "read the whole archive back and check it against the manifest")):
        s = command(name, help=text)
        s.add_argument("archive", help="s3://DEST_BUCKET/... archive or manifest key")
        s.add_argument("--json", action="store_true")
        if name == "ls":
            s.add_argument("--long", "-l", action="store_true",
                           help="also each object's captured attributes: content headers, user metadata, "
                                "tags, checksum, version, encryption, Object Lock")
    _restore_arguments(command("restore", help="ask S3 to restore an archive from GLACIER/DEEP_ARCHIVE (idempotent)"))

    _extract_arguments(command("extract", help="write archived objects back to S3 or a directory"))

    _plan_arguments(command("plan", help="the days a job archives in a date range and their sizes, from the newest S3 "
                                         "Inventory report (nothing is listed), else by listing each day"))

    _scrub_arguments(command("scrub", help="check a job's archives against their manifests without a restore, as "
                                           "the scrub DAG does (exit 2 on drift)"))

    c = command("cat", help="write one archived object to stdout (one ranged GET)")
    c.add_argument("archive")
    c.add_argument("key")
    return p


def _restore_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("archive", help="s3://DEST_BUCKET/... archive or manifest key")
    _option_flags(r, "restore")
    r.add_argument("--json", action="store_true")


def _extract_arguments(x: argparse.ArgumentParser) -> None:
    x.add_argument("archive", help="s3://DEST_BUCKET/... archive or manifest key")
    _option_flags(x, "extract")
    x.add_argument("--json", action="store_true")


def _plan_arguments(pl: argparse.ArgumentParser) -> None:
    pl.add_argument("job", help="a job of the jobs file (docs/JOBS.md)")
    pl.add_argument("--jobs-file", type=Path, help="default: $S3ARCH_JOBS_FILE, else jobs.yaml")
    pl.add_argument("--from", dest="date_from", help="first day, YYYY-MM-DD (default: the oldest in the report; "
                                                     "listed: the job's start_date)")
    pl.add_argument("--to", dest="date_to", help="last day, YYYY-MM-DD (default: the newest the job archives)")
    pl.add_argument("--inventory", help="s3://BUCKET/DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/ (default: the job's)")
    _option_flags(pl, "plan")
    pl.add_argument("--json", action="store_true")


def _scrub_arguments(s: argparse.ArgumentParser) -> None:
    s.add_argument("archive", nargs="?", metavar="ARCHIVE",
                   help="s3://DEST_BUCKET/... one archive or manifest key of a job, instead of a range of days")
    s.add_argument("--job", metavar="NAME",
                   help="a job of the jobs file (docs/JOBS.md); with an archive, default: its job")
    s.add_argument("--jobs-file", type=Path, metavar="PATH", help="default: $S3ARCH_JOBS_FILE, else jobs.yaml")
    s.add_argument("--date-from", metavar="DATE", help="first day, YYYY-MM-DD (default: the job's start_date)")
    s.add_argument("--date-to", metavar="DATE", help="last day, YYYY-MM-DD (default: the newest the job archives)")
    s.add_argument("--sample", type=int, default=3, metavar="N",
                   help="members read back per archive in a readable class and checked against their SHA-256 "
                        "(default 3; 0: headers only)")
    s.add_argument("--json", action="store_true")


def _archive_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("source", nargs="?", help="s3://SRC_BUCKET/SRC_PREFIX/ (or --job)")
    a.add_argument("destination", nargs="?", help="s3://DEST_BUCKET/DEST_PREFIX/ (or --job)")
    a.add_argument("--job", metavar="NAME", help="archive a job's days as its DAG does (its settings, preset, "
                                                 "split and late window), instead of SOURCE DESTINATION")
    a.add_argument("--jobs-file", type=Path, metavar="PATH", help="with --job: default $S3ARCH_JOBS_FILE, else jobs.yaml")
    a.add_argument("--date", metavar="DATE", help="with --job: the day, YYYY-MM-DD (the first of a range with --date-to)")
    a.add_argument("--date-to", metavar="DATE", help="with --job: the last day of a range")
    _option_flags(a, "archive")
    a.add_argument("--json", action="store_true", help="print one JSON object at the end")
    a.add_argument("--quiet", action="store_true", help="no progress lines")


def _option_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of ``command`` from the option table (tasks/core/options.py). A connection
    flag defaults to absent, so that the main parser's and the subcommand's (it works before
    or after the subcommand) do not override each other."""
    groups: dict = {}  # one_of -> its mutually exclusive group
    for option in options_for(command):
        settings: dict = {"action": "store_true"} if option.switch else {
            "default": option.default, "type": option.flag_type, "choices": option.choices, "metavar": option.metavar,
            "nargs": option.nargs}
        if command == "connection":
            settings["default"] = argparse.SUPPRESS
        if option.one_of and option.one_of not in groups:
            groups[option.one_of] = parser.add_mutually_exclusive_group(required=option.required)
        into = groups[option.one_of] if option.one_of else parser
        into.add_argument(option.flag, dest=option.name, help=option.help_on.get(command, option.help), **settings)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except (ArchiverError, KeyboardInterrupt) as exc:  # a bug goes on as itself: its traceback, exit 1
        failure = outcome(exc)
        if isinstance(exc, KeyboardInterrupt):
            print(failure.message, file=sys.stderr)
            return failure.exit_code
        if getattr(args, "json", False):
            print(json.dumps({"status": "failed", "error": failure.error, "message": failure.message,
                              "retryable": failure.retryable}))
        print(f"error: {failure.message}", file=sys.stderr)
        return failure.exit_code


def _clients(args):
    import boto3

    from s3arch.io.s3 import S3Clients

    return S3Clients.from_session(boto3.Session(profile_name=getattr(args, "profile", None)),
                                  getattr(args, "endpoint_url", None),
                                  throttle_budget=getattr(args, "throttle_budget", None),
                                  expected_owner=getattr(args, "expected_owner", None))


def _run(args) -> int:
    from s3arch.format.manifest import layout_from_url

    if args.command == "archive":
        return _archive(args)
    clients = _clients(args)
    if args.command == "plan":
        return _plan(args, clients)
    if args.command == "scrub":
        return _scrub(args, clients)
    layout = layout_from_url(S3Url.parse(args.archive))
    if args.command == "delete-sources":
        return _delete_sources(args, clients, layout)
    if args.command == "restore":
        return _restore(args, clients, layout)
    if args.command == "extract":
        return _extract(args, clients, layout)
    if args.command == "ls":
        from s3arch.io.attributes import describe
        from s3arch.restore.days import day_members

        for r in day_members(clients.control, layout):
            if args.json:
                print(json.dumps(r, ensure_ascii=False))
            else:
                print(f"{r['size']:>14,}  {r['last_modified'][:19]}  {r['key']}")
                if args.long:
                    for line in describe(r):
                        print(f"{'':>16}{line}")
        return 0
    if args.command == "cat":
        from s3arch.restore.days import part_holding
        from s3arch.restore.reading import cat_object

        cat_object(clients.control, part_holding(clients.control, layout, args.key), args.key, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return 0
    if args.command == "verify":
        from s3arch.restore.reading import verify_archive

        report = verify_archive(clients.control, layout)
        if args.json:
            print(json.dumps({"status": "verified", **report.__dict__}))
        else:
            print(f"verified: {report.objects:,} objects, {human_bytes(report.bytes)}, "
                  f"archive {human_bytes(report.archive_size)}, every member matches the manifest")
        return 0
    raise AssertionError(args.command)


def _archive(args) -> int:
    from s3arch.core.errors import BadArgument
    from s3arch.ops.window import earlier_sources

    if args.job:
        return _archive_job(args)
    if not (args.source and args.destination):
        raise BadArgument("archive needs SOURCE and DESTINATION, or --job NAME --date DATE")
    clients = _clients(args)
    values = {name: getattr(args, name) for name in archive_options() if hasattr(args, name)}
    values["processes"] = args.processes or default_processes(clients.endpoint_url)
    spec = archive_spec(S3Url.parse(args.source), S3Url.parse(args.destination), values)
    late_window = args.late_window  # days re-checked before this one, not a setting of the archive
    window = earlier_sources(spec.source, whole_days(late_window, "--late-window")) if late_window else []
    # The window's days first, oldest first: each re-checked (never overwritten), then the day named.
    for day in [replace(spec, source=source, overwrite=False) for source in window] + [spec]:
        try:
            result = _archive_one(args, sized(day, clients.control), clients, recheck=day is not spec)
        except EmptyPrefix:
            if day is spec:
                raise
            continue  # nothing there that day: nothing to re-check
        _print_result(args, result)
    return 0


# What `archive --job` takes from the command line; every other setting is the job's.
JOB_RUN_FLAGS = ("overwrite", "dry_run")


def _archive_job(args) -> int:
    """A job's days as its DAG's range run archives them: each day's name (its preset's and
    wildcards' prefix), one archive per split value, the job's settings (a done day's late
    objects become its next part). Every day runs; the worst failure is the exit."""
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import load_jobs, plan

    given = [o.flag for name, o in archive_options().items()
             if name not in JOB_RUN_FLAGS and getattr(args, name, o.default) not in (o.default, None)]
    if args.source or args.destination or given or not args.date:
        raise BadArgument("--job takes --date [--date-to] and only --overwrite or --dry-run of the archive flags"
                          + (f" (given: {', '.join(given)})" if given else ""),
                          hint="the job's settings are in the jobs file; change them there")
    job = _job_named(load_jobs(_jobs_file(args)), args.job)
    clients = _clients(args)
    names = job.split(clients.control, plan(job, date_from=args.date, date_to=args.date_to or args.date))
    failed: list[ArchiverError] = []
    for name in names:
        spec = job.spec_for(name, overwrite=args.overwrite, dry_run=args.dry_run)
        try:
            _print_result(args, _archive_one(args, sized(spec, clients.control), clients))
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


def _archive_one(args, spec: ArchiveSpec, clients, recheck: bool = False):
    from s3arch.archive import archive_prefix

    show = not (args.json or args.quiet)
    live = TerminalLine(sys.stderr) if show and sys.stderr.isatty() else None
    if live:
        progress = Progress(live, interval=0.25)
    else:
        progress = Progress((lambda s: print(s.line(), file=sys.stderr, flush=True)) if show else None,
                            interval=5.0)
    try:
        return archive_prefix(spec, clients, progress, recheck=recheck)
    finally:
        if live:
            live.close()


def _print_result(args, result) -> None:
    if args.json:
        print(json.dumps(result.to_dict()))
        return
    if result.status == "skipped":
        parts = f" and {result.part - 1} late part(s)" if result.part > 1 else ""
        print(f"skipped: {result.source} is already archived at {result.archive}{parts} "
              f"(manifest {result.manifest}); nothing newer than the archive; --overwrite re-archives it")
        if result.deletion:
            print(_deletion_line(result))
    elif result.status == "dry_run" and result.late:
        print(f"dry run: {result.late:,} objects ({human_bytes(result.bytes_in)}) under {result.source} are newer "
              f"than its archive; they would be archived as part {result.part} at {result.archive}")
    elif result.status == "dry_run":
        print(f"dry run: {result.objects:,} objects, {human_bytes(result.bytes_in)} under {result.source}; "
              f"archive would be about {human_bytes(result.estimated_bytes_out or 0)} at {result.archive}")
        print(_cost_line(result))
    else:
        rate = result.bytes_in / result.seconds if result.seconds else 0
        print(f"archived {result.objects:,} objects, {human_bytes(result.bytes_in)} -> "
              f"{human_bytes(result.bytes_out)} (ratio {result.ratio:.1f}) in {result.seconds:.1f}s "
              f"({result.objects / max(result.seconds, 1e-9):,.0f} obj/s, {human_bytes(rate)}/s)\n"
              f"  archive:  {result.archive} [{result.storage_class}]"
              + (f" {_retention_text(result.retention)}" if result.retention else "") + "\n"
              f"  manifest: {result.manifest}"
              + (f"\n  {_deletion_line(result)}" if result.deletion else "")
              + f"\n  {_cost_line(result)}"
              + (f"\n  throttled: S3 answered {result.throttled:,} request(s) 503 SlowDown; waited out with "
                 "backoff and fewer requests in flight" if result.throttled else ""))
    for note in result.notes:
        print(f"note: {note}")


def sized(spec: ArchiveSpec, control) -> ArchiveSpec:
    """``--segments N`` (N >= 2) cuts only a prefix at or over the thresholds, as a job's
    ``segments`` does: the prefix is sized first (a listing of at most
    segment_min_objects / 1,000 pages, what the archive DAG's sizing task does), and a smaller
    one is archived as one pipeline. Without --segments the engine sizes it while it runs."""
    if spec.segments < 2 or spec.dry_run:
        return spec
    from s3arch.produce.segments import size_prefix

    size = size_prefix(control, spec.source.bucket, spec.source.key, spec.segment_min_objects, spec.segment_min_bytes)
    if size.large(spec.segment_min_objects, spec.segment_min_bytes):
        return spec
    return replace(spec, segments=0, processes=1)


def _jobs_file(args) -> Path:
    import os

    return Path(args.jobs_file or os.environ.get("S3ARCH_JOBS_FILE") or "jobs.yaml")


def _job_named(jobs: dict, name: str):
    if name not in jobs:
        from s3arch.core.errors import BadArgument

        raise BadArgument(f"no job {name!r} in the jobs file", hint=f"its jobs: {', '.join(sorted(jobs))}")
    return jobs[name]


def _plan(args, clients) -> int:
    from s3arch.ops.inventory import plan_from_inventory
    from s3arch.ops.jobs import check_inventory_location, load_jobs
    from s3arch.ops.sizing import plan_from_listing

    job = _job_named(load_jobs(_jobs_file(args)), args.job)
    location = check_inventory_location(S3Url.parse(args.inventory)) if args.inventory else None
    if location is None and job.inventory is None:
        planned = plan_from_listing(job, clients.control, date_from=args.date_from, date_to=args.date_to)
    else:
        planned = plan_from_inventory(job, clients.control, date_from=args.date_from, date_to=args.date_to,
                                      location=location, max_age_days=args.inventory_max_age_days)
    if args.json:
        print(json.dumps(planned))
    else:
        for d in planned["days"]:
            size = (f"{d['objects']:>12,} objects  {human_bytes(d['bytes'])}" if d["objects"] is not None
                    else "  after the report: sized when it is listed")
            print(f"{d['day']}  {d['prefix']}  {size}")
        totals = f"{len(planned['days'])} day(s), {planned['objects']:,} objects, {human_bytes(planned['bytes'])}"
        if planned["source"] == "listing":
            listing = planned["listing"]
            print(f"{totals}, from a listing of each day of s3://{listing['bucket']}/ (no inventory: "
                  f"{listing['days']:,} day(s) listed, {listing['empty']:,} with no objects; "
                  f"{listing['requests']:,} LIST requests in {listing['seconds']:.1f}s)")
        else:
            source = planned["inventory"]
            print(f"{totals}, from {source['report']} (made {source['created']}; {source['rows']:,} rows read in "
                  f"{source['seconds']:.1f}s)")
    return 0 if planned["days"] else 4


def _scrub(args, clients) -> int:
    """What the scrub DAG runs (tasks/ops/scrub.py), for a job's range of days or one of its
    archives; its lines, then exit 0 (no drift), 2 (drift: what to do is in the table and the
    message) or 3 (the checks S3 faults stopped, and nothing else: run again)."""
    from s3arch.core.errors import BadArgument
    from s3arch.core.options import whole
    from s3arch.format.manifest import layout_from_url
    from s3arch.ops.jobs import load_jobs
    from s3arch.ops.scrub import DriftFound, archive_day, parse_range, scrub, scrub_archive

    sample = whole(0, 1000)(args.sample, "--sample")
    if args.archive is None and args.job is None:
        raise BadArgument("scrub needs --job NAME (its days) or an archive's URL (that archive)")
    if args.archive is not None and (args.date_from or args.date_to):
        raise BadArgument("--date-from and --date-to scrub a range of a job's days, not one archive",
                          hint="give either the archive's URL or the dates")
    jobs = load_jobs(_jobs_file(args))
    if args.archive is None:
        job = _job_named(jobs, args.job)
        first, last = parse_range(job, args.date_from, args.date_to)
        result = scrub(job, clients.control, first, last, sample=sample)
    else:
        layout = layout_from_url(S3Url.parse(args.archive))
        if args.job is not None:
            job = _job_named(jobs, args.job)
        else:
            found = sorted((j for j in jobs.values() if archive_day(j, layout) is not None), key=lambda j: j.name)
            if len(found) != 1:
                whose = f"jobs {', '.join(j.name for j in found)}" if found else "no job"
                raise BadArgument(f"{args.archive} is an archive of {whose} in {_jobs_file(args)}",
                                  hint="name its job (--job NAME), or its jobs file (--jobs-file); `s3arch verify` "
                                       "reads any archive back whole")
            job = found[0]
        result = scrub_archive(job, clients.control, layout, sample=sample)
    error = result.failure()
    failure = outcome(error) if error is not None else None
    if args.json:
        status = "clean" if error is None else "drift" if isinstance(error, DriftFound) else "failed"
        print(json.dumps({"status": status, **result.to_dict(),
                          **({"message": failure.message, "retryable": failure.retryable} if failure else {})}))
    else:
        print(result.summary_line())
        print(result.cost_line())
        print(result.table())
    if failure is None:
        return 0
    print(f"error: {failure.message}", file=sys.stderr)
    return failure.exit_code


def _restore(args, clients, layout) -> int:
    """Every part of the day (one line each): a day with late parts is restored whole."""
    from s3arch.format.day import committed_parts

    parts = committed_parts(clients.control, layout)
    if not parts:
        from s3arch.core.errors import BadArgument

        raise BadArgument(f"{layout.manifest_url} does not exist: there is no committed archive to restore")
    for part in parts:
        _restore_archive(args, clients, layout.bucket, part.committed.archive_key)
    return 0


def _restore_archive(args, clients, bucket: str, key: str) -> None:
    from s3arch.restore.glacier import POLL_SECONDS, request_restore, wait_restored

    state = request_restore(clients.control, bucket, key, tier=args.tier, days=args.days,
                            fallback_tier=args.fallback_tier, restore_control=clients.single_attempt)
    if not args.json:
        print(f"{state.line()}" + (f" ({state.requested}, tier {state.tier})" if state.requested else ""))
    if args.wait and not state.readable:
        interval = args.poll_interval or POLL_SECONDS[state.tier or args.tier]

        def progress(s, waited):
            if not args.json:
                print(f"  still restoring after {waited / 60:.0f} min; next check in {interval:.0f}s",
                      file=sys.stderr, flush=True)

        state = wait_restored(clients.control, bucket, key, timeout=args.wait_timeout, interval=interval,
                              on_progress=progress)
        if not args.json:
            print(state.line())
    if args.json:
        print(json.dumps(state.to_dict()))


def _extract(args, clients, layout) -> int:
    from s3arch.core.errors import BadArgument
    from s3arch.restore.days import extract_day_to_dir, extract_day_to_s3
    from s3arch.restore.extract import Selection

    keys = args.keys
    if args.from_file:
        keys = [line for line in args.from_file.read_text().splitlines() if line]
    selection = Selection.of(keys, args.glob)
    if args.to_dir is not None:
        result = extract_day_to_dir(clients, layout, args.to_dir, selection=selection,
                                    original_keys=args.original_keys, overwrite=args.overwrite,
                                    metadata_file=args.metadata_file)
    elif args.metadata_file is not None:
        raise BadArgument("--metadata-file goes with --to-dir",
                          hint="extracting to S3 sets each object's metadata and tags on the object itself")
    else:
        result = extract_day_to_s3(clients, layout, S3Url.parse(args.target), selection=selection,
                                   original_keys=args.original_keys, overwrite=args.overwrite,
                                   memory_budget=parse_size(args.memory_budget))
    if args.json:
        print(json.dumps({"status": "extracted", **result.to_dict()}))
    else:
        print(f"extracted {result.objects:,} objects ({human_bytes(result.bytes)}) to {result.target}"
              + (f"; {result.skipped_same:,} already there with the same content" if result.skipped_same else "")
              + f"; read {human_bytes(result.bytes_fetched)} of the archive in {result.gets:,} GET(s)")
    return 0


def _retention_text(retention: dict) -> str:
    parts = []
    if "mode" in retention:
        parts.append(f"{retention['mode']} retention until {retention.get('retain_until')}")
    if retention.get("legal_hold") == "ON":
        parts.append("legal hold")
    return "[locked: " + ", ".join(parts) + "]"


def _cost_line(result) -> str:
    from s3arch.core.cost import CostEstimate

    return CostEstimate.from_dict(result.cost).line()


def _deletion_line(result) -> str:
    d = result.deletion
    kept = f"; kept {d['kept_changed']:,} rewritten since archiving" if d["kept_changed"] else ""
    if d.get("kept_locked"):
        kept += f"; kept {d['kept_locked']:,} under Object Lock"
    return f"source deletion finished: deleted {d['deleted']:,} archived objects{kept}"


def _delete_sources(args, clients, layout) -> int:
    from s3arch.archive import delete_sources
    from s3arch.format.manifest import destination_of, read_committed

    committed = read_committed(clients.control, layout)
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
        print(_deletion_line(result))
        for note in result.notes:
            print(f"note: {note}")
    return 0


