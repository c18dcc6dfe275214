"""`s3arch restore` and `s3arch extract`: getting archived objects back."""

from __future__ import annotations

import json
import sys

from s3arch.core.config import S3Url, parse_size
from s3arch.core.progress import human_bytes


def restore(args, clients, layout) -> int:
    """Every part of the day (one line each): a day with late parts is restored whole."""
    from s3arch.stored.days import committed_parts

    parts = committed_parts(clients.store, layout)
    if not parts:
        from s3arch.core.errors import BadArgument

        raise BadArgument(f"{layout.manifest_url} does not exist: there is no committed archive to restore")
    for part in parts:
        restore_archive(args, clients, layout.bucket, part.committed.archive_key)
    return 0


def restore_archive(args, clients, bucket: str, key: str) -> None:
    from s3arch.restore.glacier import POLL_SECONDS, request_restore, wait_restored

    state = request_restore(clients.store, bucket, key, tier=args.tier, days=args.days,
                            fallback_tier=args.fallback_tier, restore_store=clients.single_attempt_store)
    if not args.json:
        print(f"{state.line()}" + (f" ({state.requested}, tier {state.tier})" if state.requested else ""))
    if args.wait and not state.readable:
        interval = args.poll_interval or POLL_SECONDS[state.tier or args.tier]

        def progress(s, waited):
            if not args.json:
                print(f"  still restoring after {waited / 60:.0f} min; next check in {interval:.0f}s",
                      file=sys.stderr, flush=True)

        state = wait_restored(clients.store, bucket, key, timeout=args.wait_timeout, interval=interval,
                              on_progress=progress)
        if not args.json:
            print(state.line())
    if args.json:
        print(json.dumps(state.to_dict()))


def extract(args, clients, layout) -> int:
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
