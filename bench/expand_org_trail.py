"""What expanding an organization trail's day costs: the figures docs/JOBS.md quotes.

    .venv/bin/python -m bench.expand_org_trail     # writes bench/results/expand-org-trail.json

The bench's MinIO is seeded as CloudTrail writes an organization trail of 50 accounts in 17
regions: for each account and region, two days of two log files each under
``AWSLogs/o-benchorg/ACCOUNT/CloudTrail/REGION/YYYY/MM/DD/`` and a digest file under
``CloudTrail-Digest/`` beside it (5,100 objects). With fresh S3 clients each time (no level
cached), the pattern ``AWSLogs/o-benchorg/*/CloudTrail/*/2026/11/21/`` is expanded (the LIST
requests, counted on the client, and the seconds), then the day's prefixes are listed as one
source, in key order, as an archive run lists them. Medians of ``--repeat`` runs, with the range.
The MinIO runs on the same machine: a LIST costs a fraction of a millisecond of network here,
20-50 ms on AWS, so the request counts are the figures that carry over.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from bench.bench import ensure_buckets, start_bench_minio

OUT = Path(__file__).resolve().parent / "results" / "expand-org-trail.json"
BUCKET = "expand-org-trail"
ORG = "o-benchorg"
ACCOUNTS = [f"{100000000000 + 7919 * i:012d}" for i in range(50)]
REGIONS = ["af-south-1", "ap-east-1", "ap-northeast-1", "ap-northeast-2", "ap-south-1", "ap-southeast-1",
           "ap-southeast-2", "ca-central-1", "eu-central-1", "eu-north-1", "eu-west-1", "eu-west-2", "eu-west-3",
           "sa-east-1", "us-east-1", "us-east-2", "us-west-2"]
DAYS = (("2026/11/21", "20261121"), ("2026/11/22", "20261122"))
PATTERN = f"AWSLogs/{ORG}/*/CloudTrail/*/2026/11/21/"


def trail_keys() -> list[str]:
    keys = []
    for account in ACCOUNTS:
        for region in REGIONS:
            for folder, stamp in DAYS:
                base = f"AWSLogs/{ORG}/{account}"
                keys += [f"{base}/CloudTrail/{region}/{folder}/{account}_CloudTrail_{region}_{stamp}T{h:02d}05Z_"
                         f"x{h}.json.gz" for h in (0, 12)]
                keys.append(f"{base}/CloudTrail-Digest/{region}/{folder}/{account}_CloudTrail-Digest_{region}_"
                            f"org-trail_{region}_{stamp}T000000Z.json.gz")
    return keys


def seed(s3) -> int:
    ensure_buckets(s3, BUCKET)
    keys = trail_keys()
    present = sum(page.get("KeyCount", 0) for page in
                  s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"AWSLogs/{ORG}/"))
    if present != len(keys):
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket=BUCKET, Key=k, Body=b'{"Records":[]}'), keys))
    return len(keys)


def run_once(server) -> dict:
    import boto3

    from s3arch.io.s3 import S3Clients
    from s3arch.io.sources import Source, expand, source_pages
    from s3arch.io.store import Store

    session = boto3.Session(aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
                            region_name=server.region)
    control = S3Clients.from_session(session, server.endpoint_url).control
    lists = [0]
    control.meta.events.register("before-call.s3.ListObjectsV2", lambda **_: lists.__setitem__(0, lists[0] + 1))
    started = time.perf_counter()
    prefixes = expand(Store(control), BUCKET, PATTERN)
    expanded = time.perf_counter()
    expand_lists = lists[0]
    objects = sum(len(page) for page in source_pages(Store(control), Source(BUCKET, PATTERN, tuple(prefixes))))
    listed = time.perf_counter()
    return {"prefixes": len(prefixes), "expand_lists": expand_lists, "expand_s": round(expanded - started, 3),
            "listing_lists": lists[0] - expand_lists, "listing_s": round(listed - expanded, 3), "objects": objects}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    server = start_bench_minio()
    try:
        seeded = seed(server.client(max_pool_connections=32))
        runs = [run_once(server) for _ in range(args.repeat)]
    finally:
        server.stop()
    for run in runs:
        print(run, flush=True)

    def median(name: str) -> dict:
        values = [r[name] for r in runs]
        return {"median": statistics.median(values), "range": [min(values), max(values)]}

    out = {"when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"), "machine": platform.machine(),
           "cpus": os.cpu_count(), "python": platform.python_version(),
           "command": f"python -m bench.expand_org_trail --repeat {args.repeat}", "pattern": PATTERN,
           "accounts": len(ACCOUNTS), "regions": len(REGIONS), "objects_seeded": seeded,
           "prefixes": runs[0]["prefixes"], "objects_of_the_day": runs[0]["objects"],
           "expand_lists": median("expand_lists"), "expand_seconds": median("expand_s"),
           "listing_lists": median("listing_lists"), "listing_seconds": median("listing_s"), "runs": runs}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"expand {PATTERN}: {out['prefixes']} prefixes in {out['expand_lists']['median']} LISTs, "
          f"{out['expand_seconds']['median']:.3f} s; the day's {out['objects_of_the_day']} objects listed in "
          f"{out['listing_lists']['median']} LISTs, {out['listing_seconds']['median']:.3f} s")
    print(f"written: {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
