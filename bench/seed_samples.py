"""Seeding `make airflow`'s sample days (devtools.airflow_ui.seed_samples, which the
docs-examples and SIGTERM-stop tests also run): tar batches MinIO unpacks against one PUT per
file, alternating, each on a fresh MinIO. Prints each run and ours/reference per round.

    .venv/bin/python -m bench.seed_samples [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from datetime import date, timedelta

from devtools.airflow_ui import EXAMPLE_DAYS, seed_samples
from devtools.demo import SOURCE_BUCKET, TEMPLATE
from devtools.sample_data import days, seed_day
from devtools.servers import start_minio


def one_put_each(s3, today: date) -> None:
    """The reference: the same days and files as seed_samples, one PUT per file."""
    last = today - timedelta(days=1)
    recent = set(days(last - timedelta(days=9), last))
    for day in sorted(recent):
        seed_day(s3, SOURCE_BUCKET, TEMPLATE, day, files_per_hour=10, lines_per_file=60)
    for day in EXAMPLE_DAYS:
        if day not in recent:
            seed_day(s3, SOURCE_BUCKET, TEMPLATE, day, files_per_hour=2, lines_per_file=60)


def timed(seeder) -> tuple[float, int]:
    server = start_minio()
    try:
        s3 = server.client(max_pool_connections=64)
        s3.create_bucket(Bucket=SOURCE_BUCKET)
        started = time.monotonic()
        seeder(s3, date.today())
        seconds = time.monotonic() - started
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=SOURCE_BUCKET)
        return seconds, sum(page.get("KeyCount", 0) for page in pages)
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    ratios = []
    for i in range(rounds):
        reference, ref_objects = timed(one_put_each)
        ours, objects = timed(seed_samples)
        assert objects == ref_objects, (objects, ref_objects)
        ratios.append(ours / reference)
        print(f"round {i + 1}: {objects} objects: one PUT each {reference:.1f} s, tar batches {ours:.1f} s, "
              f"ratio {ours / reference:.2f}", flush=True)
    print(f"tar batches / one PUT each: median {statistics.median(ratios):.2f} "
          f"[{min(ratios):.2f}-{max(ratios):.2f}] over {rounds} rounds")


if __name__ == "__main__":
    main()
