"""s3arch (python -m s3arch): archive | restore | extract | delete-sources | ls | cat | verify.

Exit codes: 0 success (archived, skipped, dry run), 2 a permanent error (fix the input),
3 a retryable error (a fault that outlasted the retries, another run of the same prefix
at work, or `restore --wait` timing out while S3 still restores: try again), 4 an empty
source prefix, 130 interrupted (Ctrl-C: uploads in progress aborted, nothing committed).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from s3arch.core.config import (DEFAULT_CONCURRENCY, DEFAULT_LEASE_TTL, DEFAULT_SEGMENT_MIN_OBJECTS, SSE_MODES, ArchiveSpec,
                     S3Url, check_lease_ttl, default_processes, parse_size, resolve_throttle_budget)
from s3arch.core.errors import ArchiverError, outcome
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
    connection.add_argument("--expected-owner", default=argparse.SUPPRESS, metavar="ACCOUNT",
                            help="the AWS account (12 digits, or `self` for the caller's) that must own every "
                                 "bucket used: sent as ExpectedBucketOwner on every request, so a bucket another "
                                 "account owns fails (exit 2) instead of being read or written")
    connection.add_argument("--throttle-budget", default=argparse.SUPPRESS, metavar="SECONDS",
                            help="how long a request may stay throttled (503 SlowDown, waited out with backoff) "
                                 "before the run gives up with exit 3 (default: S3ARCH_THROTTLE_BUDGET, else 900)")
    p = argparse.ArgumentParser(prog="s3arch", description=__doc__.split("\n")[0], parents=[connection])
    p.add_argument("--version", action="version", version=f"s3arch {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    def command(name, **kwargs):
        return sub.add_parser(name, parents=[connection], **kwargs)

    _archive_arguments(command("archive", help="pack a prefix into one compressed tar archive + manifest"))

    d = command("delete-sources", help="finish deleting the sources of an archived prefix "
                                              "(only objects the manifest holds with an unchanged ETag)")
    d.add_argument("archive", help="s3://DEST_BUCKET/... archive or manifest key")
    d.add_argument("--delete-versions", action="store_true",
                   help="versioned bucket: delete the archived versions instead of adding delete markers")
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
                                         "Inventory report (nothing is listed; each day is listed when it is archived)"))

    c = command("cat", help="write one archived object to stdout (one ranged GET)")
    c.add_argument("archive")
    c.add_argument("key")
    return p


def _restore_arguments(r: argparse.ArgumentParser) -> None:
    r.add_argument("archive", help="s3://DEST_BUCKET/... archive or manifest key")
    r.add_argument("--tier", default="Standard", choices=["Expedited", "Standard", "Bulk"],
                   help="GLACIER: Expedited 1-5 min, Standard 3-5 h, Bulk 5-12 h; DEEP_ARCHIVE: "
                        "Standard within 12 h, Bulk within 48 h (default Standard)")
    r.add_argument("--fallback-tier", choices=["Standard", "Bulk"],
                   help="tier to use if Expedited is unavailable (or the class has none)")
    r.add_argument("--days", type=int, default=7, help="how long the restored copy stays (default 7)")
    r.add_argument("--wait", action="store_true", help="poll until the archive is readable")
    r.add_argument("--wait-timeout", type=float, default=48 * 3600,
                   help="with --wait: stop waiting after this many seconds (default 48 h; exit 3, the restore "
                        "goes on in S3: run the same command again to keep waiting)")
    r.add_argument("--poll-interval", type=float,
                   help="with --wait: seconds between polls (default by tier: 30 Expedited, 300 Standard, 900 Bulk)")
    r.add_argument("--json", action="store_true")


def _extract_arguments(x: argparse.ArgumentParser) -> None:
    x.add_argument("archive", help="s3://DEST_BUCKET/... archive or manifest key")
    where = x.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", help="s3://BUCKET/PREFIX/ to write the objects under")
    where.add_argument("--to-dir", type=Path, help="local directory to write the objects into")
    which = x.add_mutually_exclusive_group()
    which.add_argument("--keys", nargs="+", metavar="KEY", help="only these keys (exact, full keys)")
    which.add_argument("--from-file", type=Path, help="only the keys listed in this file, one per line")
    which.add_argument("--glob", help="only keys matching this pattern (fnmatch, on the full key)")
    x.add_argument("--original-keys", action="store_true",
                   help="keep each object's full original key under the target (default: the key "
                        "relative to the archived prefix)")
    x.add_argument("--overwrite", action="store_true", help="replace existing objects with other content")
    x.add_argument("--memory-budget", default="256MiB")
    x.add_argument("--metadata-file", type=Path,
                   help="with --to-dir: write each object's key, attributes, metadata and tags here "
                        "(JSON Lines, one line per object; docs/FORMAT.md)")
    x.add_argument("--json", action="store_true")


def _plan_arguments(pl: argparse.ArgumentParser) -> None:
    pl.add_argument("job", help="a job of the jobs file (docs/JOBS.md)")
    pl.add_argument("--jobs-file", type=Path, help="default: $S3ARCH_JOBS_FILE, else jobs.yaml")
    pl.add_argument("--from", dest="date_from", help="first day, YYYY-MM-DD (default: the oldest in the report)")
    pl.add_argument("--to", dest="date_to", help="last day, YYYY-MM-DD (default: the newest the job archives)")
    pl.add_argument("--inventory", help="s3://BUCKET/DEST-PREFIX/SOURCE-BUCKET/CONFIG-ID/ (default: the job's)")
    pl.add_argument("--inventory-max-age-days", type=float, help="refuse an older report (default: the job's, 2)")
    pl.add_argument("--json", action="store_true")


def _archive_arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("source", help="s3://SRC_BUCKET/SRC_PREFIX/")
    a.add_argument("destination", help="s3://DEST_BUCKET/DEST_PREFIX/")
    a.add_argument("--storage-class", default="GLACIER",
                   choices=["GLACIER", "DEEP_ARCHIVE", "GLACIER_IR", "STANDARD_IA", "STANDARD"])
    a.add_argument("--codec", default="gzip", choices=["gzip", "zstd"])
    a.add_argument("--level", type=int, help="gzip 0-9 (ISA-L for 0-3, zlib-ng for 4-9), default 1; zstd 1-19, default 3")
    a.add_argument("--memory-budget", default="256MiB", help="bound on buffered bytes (default 256MiB)")
    a.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY,
                   help=f"GETs in flight (default {DEFAULT_CONCURRENCY})")
    a.add_argument("--threads", type=int,
                   help="compression threads (default: the CPUs this process may use, affinity and "
                        "cgroup quota included; capped so their blocks fit a quarter of the budget)")
    a.add_argument("--processes", type=int,
                   help="local worker processes that produce a large prefix's segments (default: the CPUs this "
                        "process may use, half of them when the endpoint is on loopback, as many as "
                        "--memory-budget holds at 108 MiB each; 1: one process, never segments)")
    a.add_argument("--segments", type=int, default=0,
                   help="a prefix of at least --segment-min-objects objects or --segment-min-bytes is cut into "
                        "this many segments, assembled into one archive; smaller ones stay one pipeline; "
                        "1 never cuts (default: one segment per process)")
    a.add_argument("--segment-min-objects", type=int, default=DEFAULT_SEGMENT_MIN_OBJECTS,
                   help=f"objects from which a prefix is cut into segments (default {DEFAULT_SEGMENT_MIN_OBJECTS})")
    a.add_argument("--segment-min-bytes", default="4GiB", help="bytes from which a prefix is cut into segments (default 4GiB)")
    a.add_argument("--lease-ttl", type=float, default=DEFAULT_LEASE_TTL,
                   help=f"seconds the prefix's lease outlives its last renewal: how long a run on another host "
                        f"waits for the prefix of a run that died (default {DEFAULT_LEASE_TTL:g}, at least 10)")
    a.add_argument("--max-prefixes", type=int, default=ArchiveSpec.max_prefixes,
                   help="a source with '*' wildcards may expand to at most this many prefixes (default 10000)")
    a.add_argument("--overwrite", action="store_true", help="re-archive a prefix that is done")
    a.add_argument("--dry-run", action="store_true", help="list, count and estimate; write nothing")
    a.add_argument("--delete-source", action="store_true",
                   help="after the archive verified, delete sources whose ETag still matches; on an "
                        "archived prefix, finish a deletion an earlier run did not")
    a.add_argument("--delete-versions", action="store_true",
                   help="with --delete-source on a versioned bucket: delete the archived versions "
                        "(frees the space) instead of adding delete markers")
    a.add_argument("--without-tags", action="store_true",
                   help="archive tagged objects whose tags may not be read (s3:GetObjectTagging denied) "
                        "without them, recording which, instead of failing")
    a.add_argument("--sse", choices=list(SSE_MODES),
                   help="server-side encryption of the archive, manifest and index (aws:kms:dsse: two layers)")
    a.add_argument("--sse-kms-key-id", help="with --sse aws:kms or aws:kms:dsse: the KMS key (default: aws/s3)")
    a.add_argument("--sse-bucket-key", action="store_true",
                   help="with a KMS --sse: use an S3 Bucket Key (fewer KMS requests, lower KMS cost)")
    a.add_argument("--object-lock", choices=["GOVERNANCE", "COMPLIANCE"],
                   help="put the archive, manifest and index under Object Lock retention in this mode "
                        "(the destination bucket must have Object Lock enabled); needs --retain-days")
    a.add_argument("--retain-days", type=int, help="with --object-lock: days of retention, counted from when each object is written")
    a.add_argument("--legal-hold", action="store_true",
                   help="put the archive, manifest and index under a legal hold (until lifted)")
    a.add_argument("--json", action="store_true", help="print one JSON object at the end")
    a.add_argument("--quiet", action="store_true", help="no progress lines")


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
    from s3arch.archive import archive_prefix

    clients = _clients(args)
    spec = ArchiveSpec(
        source=S3Url.parse(args.source), destination=S3Url.parse(args.destination),
        storage_class=args.storage_class, codec=args.codec, level=args.level,
        memory_budget=parse_size(args.memory_budget), concurrency=args.concurrency,
        overwrite=args.overwrite, dry_run=args.dry_run, delete_source=args.delete_source,
        delete_versions=args.delete_versions, without_tags=args.without_tags, sse=args.sse, sse_kms_key_id=args.sse_kms_key_id,
        sse_bucket_key=args.sse_bucket_key, object_lock=args.object_lock, retain_days=args.retain_days,
        legal_hold=args.legal_hold, expected_owner=getattr(args, "expected_owner", None),
        segments=args.segments, segment_min_objects=args.segment_min_objects, segment_min_bytes=parse_size(args.segment_min_bytes),
        max_prefixes=args.max_prefixes,
        lease_ttl=check_lease_ttl(args.lease_ttl), throttle_budget=resolve_throttle_budget(getattr(args, "throttle_budget", None)),
        **({"compress_threads": args.threads} if args.threads else {}),
        processes=args.processes or default_processes(clients.endpoint_url))
    spec = sized(spec, clients.control)
    show = not (args.json or args.quiet)
    live = TerminalLine(sys.stderr) if show and sys.stderr.isatty() else None
    if live:
        progress = Progress(live, interval=0.25)
    else:
        progress = Progress((lambda s: print(s.line(), file=sys.stderr, flush=True)) if show else None,
                            interval=5.0)
    try:
        result = archive_prefix(spec, clients, progress)
    finally:
        if live:
            live.close()
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
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
    return 0


def sized(spec: ArchiveSpec, control) -> ArchiveSpec:
    """``--segments N`` (N >= 2) cuts only a prefix at or over the thresholds, as a job's
    ``segments`` does: the prefix is sized first (a listing of at most
    segment_min_objects / 1,000 pages, what the archive DAG's sizing task does), and a smaller
    one is archived as one pipeline. Without --segments the engine sizes it while it runs."""
    if spec.segments < 2 or spec.dry_run:
        return spec
    from dataclasses import replace

    from s3arch.produce.segments import size_prefix

    size = size_prefix(control, spec.source.bucket, spec.source.key, spec.segment_min_objects, spec.segment_min_bytes)
    if size.large(spec.segment_min_objects, spec.segment_min_bytes):
        return spec
    return replace(spec, segments=0, processes=1)


def _plan(args, clients) -> int:
    import os

    from s3arch.ops.inventory import plan_from_inventory
    from s3arch.ops.jobs import check_inventory_location, load_jobs

    jobs = load_jobs(args.jobs_file or os.environ.get("S3ARCH_JOBS_FILE") or "jobs.yaml")
    if args.job not in jobs:
        from s3arch.core.errors import BadArgument

        raise BadArgument(f"no job {args.job!r} in the jobs file", hint=f"its jobs: {', '.join(sorted(jobs))}")
    location = check_inventory_location(S3Url.parse(args.inventory)) if args.inventory else None
    planned = plan_from_inventory(jobs[args.job], clients.control, date_from=args.date_from, date_to=args.date_to,
                                  location=location, max_age_days=args.inventory_max_age_days)
    if args.json:
        print(json.dumps(planned))
    else:
        for d in planned["days"]:
            size = (f"{d['objects']:>12,} objects  {human_bytes(d['bytes'])}" if d["objects"] is not None
                    else "  after the report: sized when it is listed")
            print(f"{d['day']}  {d['prefix']}  {size}")
        source = planned["inventory"]
        print(f"{len(planned['days'])} day(s), {planned['objects']:,} objects, {human_bytes(planned['bytes'])}, from "
              f"{source['report']} (made {source['created']}; {source['rows']:,} rows read in {source['seconds']:.1f}s)")
    return 0 if planned["days"] else 4


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
        result = extract_day_to_s3(clients, layout, S3Url.parse(args.to), selection=selection,
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
    spec = ArchiveSpec(source=archived, destination=destination_of(layout, archived),
                       codec=committed.header["codec"], storage_class=committed.summary["storage_class"],
                       delete_source=True, delete_versions=args.delete_versions)
    result = delete_sources(spec, clients)
    if args.json:
        print(json.dumps(result.to_dict()))
    else:
        print(_deletion_line(result))
        for note in result.notes:
            print(f"note: {note}")
    return 0


