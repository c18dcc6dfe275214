"""python -m tasks: archive | ls | cat | verify.

Exit codes: 0 success (archived, skipped, dry run), 2 a permanent error (fix the input),
3 a transient error that outlasted the retries (try again), 4 an empty source prefix.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__
from .config import ArchiveSpec, S3Url, parse_size
from .errors import ArchiverError
from .progress import Progress, human_bytes


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tasks", description=__doc__.split("\n")[0])
    p.add_argument("--version", action="version", version=f"s3arch {__version__}")
    p.add_argument("--endpoint-url", help="S3 endpoint (default: AWS_ENDPOINT_URL_S3, profile, AWS)")
    p.add_argument("--profile", help="AWS profile to use")
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("archive", help="pack a prefix into one compressed tar archive + manifest")
    a.add_argument("source", help="s3://SRC_BUCKET/SRC_PREFIX/")
    a.add_argument("destination", help="s3://DEST_BUCKET/DEST_PREFIX/")
    a.add_argument("--storage-class", default="GLACIER",
                   choices=["GLACIER", "DEEP_ARCHIVE", "GLACIER_IR", "STANDARD_IA", "STANDARD"])
    a.add_argument("--codec", default="gzip", choices=["gzip", "zstd"])
    a.add_argument("--level", type=int, help="gzip (ISA-L) 0-3, default 1; zstd 1-19, default 3")
    a.add_argument("--memory-budget", default="256MiB", help="bound on buffered bytes (default 256MiB)")
    a.add_argument("--concurrency", type=int, default=128, help="GETs in flight (default 128)")
    a.add_argument("--overwrite", action="store_true", help="re-archive a prefix that is done")
    a.add_argument("--dry-run", action="store_true", help="list, count and estimate; write nothing")
    a.add_argument("--delete-source", action="store_true",
                   help="after the archive verified, delete sources whose ETag still matches")
    a.add_argument("--sse", choices=["AES256", "aws:kms"])
    a.add_argument("--sse-kms-key-id")
    a.add_argument("--json", action="store_true", help="print one JSON object at the end")
    a.add_argument("--quiet", action="store_true", help="no progress lines")

    for name, text in (("ls", "list the archived objects from the manifest"),
                       ("verify", "read the whole archive back and check it against the manifest")):
        s = sub.add_parser(name, help=text)
        s.add_argument("archive", help="s3://DEST_BUCKET/... archive or manifest key")
        s.add_argument("--json", action="store_true")
    c = sub.add_parser("cat", help="write one archived object to stdout (one ranged GET)")
    c.add_argument("archive")
    c.add_argument("key")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except ArchiverError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"status": "failed", "error": type(exc).__name__, "message": str(exc),
                              "retryable": exc.retryable}))
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted; uploads in progress were aborted", file=sys.stderr)
        return 130


def _clients(args):
    import boto3

    from .s3 import S3Clients

    return S3Clients.from_session(boto3.Session(profile_name=args.profile), args.endpoint_url)


def _run(args) -> int:
    from .manifest import layout_from_url

    if args.command == "archive":
        return _archive(args)
    clients = _clients(args)
    layout = layout_from_url(S3Url.parse(args.archive))
    if args.command == "ls":
        from .reading import list_members

        for r in list_members(clients.control, layout):
            if args.json:
                print(json.dumps(r, ensure_ascii=False))
            else:
                print(f"{r['size']:>14,}  {r['last_modified'][:19]}  {r['key']}")
        return 0
    if args.command == "cat":
        from .reading import cat_object

        cat_object(clients.control, layout, args.key, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return 0
    if args.command == "verify":
        from .reading import verify_archive

        report = verify_archive(clients.control, layout)
        if args.json:
            print(json.dumps({"status": "verified", **report.__dict__}))
        else:
            print(f"verified: {report.objects:,} objects, {human_bytes(report.bytes)}, "
                  f"archive {human_bytes(report.archive_size)}, every member matches the manifest")
        return 0
    raise AssertionError(args.command)


def _archive(args) -> int:
    from .archive import archive_prefix

    spec = ArchiveSpec(
        source=S3Url.parse(args.source), destination=S3Url.parse(args.destination),
        storage_class=args.storage_class, codec=args.codec, level=args.level,
        memory_budget=parse_size(args.memory_budget), concurrency=args.concurrency,
        overwrite=args.overwrite, dry_run=args.dry_run, delete_source=args.delete_source,
        sse=args.sse, sse_kms_key_id=args.sse_kms_key_id)
    show = not (args.json or args.quiet)
    progress = Progress((lambda s: print(s.line(), file=sys.stderr, flush=True)) if show else None,
                        interval=2.0)
    result = archive_prefix(spec, _clients(args), progress)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    if result.status == "skipped":
        print(f"skipped: {result.source} is already archived at {result.archive} "
              f"(manifest {result.manifest}); --overwrite re-archives it")
    elif result.status == "dry_run":
        print(f"dry run: {result.objects:,} objects, {human_bytes(result.bytes_in)} under {result.source}; "
              f"archive would be about {human_bytes(result.estimated_bytes_out or 0)} at {result.archive}")
    else:
        rate = result.bytes_in / result.seconds if result.seconds else 0
        print(f"archived {result.objects:,} objects, {human_bytes(result.bytes_in)} -> "
              f"{human_bytes(result.bytes_out)} (ratio {result.ratio:.1f}) in {result.seconds:.1f}s "
              f"({result.objects / max(result.seconds, 1e-9):,.0f} obj/s, {human_bytes(rate)}/s)\n"
              f"  archive:  {result.archive} [{result.storage_class}]\n"
              f"  manifest: {result.manifest}"
              + (f"\n  deleted {result.deleted:,} source objects" if args.delete_source else ""))
    return 0
