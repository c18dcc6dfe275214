"""s3arch (python -m s3arch): archive | restore | extract | delete-sources | ls | cat | verify | plan | scrub.

The parser and the dispatch; the commands by idea in archiving.py, restoring.py and jobs.py.

Exit codes: 0 success (archived, skipped, dry run, no drift), 2 a permanent error (fix the
input) or drift a scrub found, 3 a retryable error (a fault that outlasted the retries,
another run of the same prefix at work, or `restore --wait` timing out while S3 still
restores: try again), 4 an empty source prefix, 130 interrupted (Ctrl-C: uploads in progress
aborted, nothing committed).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

from s3arch.core.config import S3Url
from s3arch.core.errors import ArchiverError, outcome
from s3arch.core.options import options_for
from s3arch.core.progress import human_bytes
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


def command() -> int:
    """The ``s3arch`` process (its console script and ``python -m s3arch``): ``main``, then an
    exit without the interpreter's last collection, which walks every object left (botocore's
    service models among them): 0.1 s of a 1.6 s dry run, for a process that ends here."""
    code = main()
    gc.freeze()
    return code


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


def _run(args) -> int:
    from s3arch.cli.archiving import archive, delete_sources
    from s3arch.cli.clients import clients_for
    from s3arch.cli.jobs import plan_days, scrub
    from s3arch.cli.restoring import extract, restore
    from s3arch.format.manifest import layout_from_url

    clients = clients_for(args)
    if args.command == "archive":
        return archive(args, clients)
    if args.command == "plan":
        return plan_days(args, clients)
    if args.command == "scrub":
        return scrub(args, clients)
    layout = layout_from_url(S3Url.parse(args.archive))
    if args.command == "delete-sources":
        return delete_sources(args, clients, layout)
    if args.command == "restore":
        return restore(args, clients, layout)
    if args.command == "extract":
        return extract(args, clients, layout)
    if args.command == "ls":
        from s3arch.io.attributes import describe
        from s3arch.restore.days import day_members

        for r in day_members(clients.store, layout):
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

        cat_object(clients.store, part_holding(clients.store, layout, args.key), args.key, sys.stdout.buffer)
        sys.stdout.buffer.flush()
        return 0
    if args.command == "verify":
        from s3arch.restore.reading import verify_archive

        report = verify_archive(clients.store, layout)
        if args.json:
            print(json.dumps({"status": "verified", **report.__dict__}))
        else:
            print(f"verified: {report.objects:,} objects, {human_bytes(report.bytes)}, "
                  f"archive {human_bytes(report.archive_size)}, every member matches the manifest")
        return 0
    raise AssertionError(args.command)


