"""Bench line: the archive catalog of three years (1,096 days) on MinIO (docs/CATALOG.md).

Seeds a job with 1,096 days: a few days archived for real by the engine, the rest copies of
those archives' three objects (archive, manifest, index, the index's header pointing at its
own day) so every day is a committed archive the catalog reads as any other; one source object
per day (some days left without, some without archive). Then measures:

- the first read (cold: one listing of the archives, one GET of each day's index, the source's
  delimiter listings, the scrub result) in S3 requests and seconds,
- a refresh (listing again; no index is read again),
- an answer from the cache, and the JSON the API serves (serialised), in milliseconds.

    .venv/bin/python -m bench.catalog          # prints the line, writes bench/results/catalog.json
"""

from __future__ import annotations

import gzip
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from devtools.servers import start_minio  # noqa: E402

DAYS = 1096
FIRST = date(2023, 1, 1)
REAL = 3  # days archived by the engine; the rest copy them


def seed(server, clients, src: str, dst: str):
    from s3arch.archive import archive_prefix
    from s3arch.core.config import S3Url
    from s3arch.ops.jobs import job_from_dict
    from s3arch.format.manifest import layout_for

    job = job_from_dict("bench", {"source": f"s3://{src}/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                  "destination": f"s3://{dst}/archive/", "storage_class": "STANDARD",
                                  "start_date": FIRST.isoformat(), "min_age_days": 1})
    s3 = server.client(max_pool_connections=64)
    days = [FIRST + timedelta(days=i) for i in range(DAYS)]
    gaps = {days[i] for i in range(100, DAYS, 97)}    # source data, no archive: "missing"
    empty = {days[i] for i in range(50, DAYS, 211)}   # nothing at all
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda d: s3.put_object(Bucket=src, Key=f"{job.prefix_for(d)}00/app.log",
                                              Body=f"{d} hello\n".encode() * 50),
                      [d for d in days if d not in empty]))
    templates = []
    for day in days[:REAL]:
        archive_prefix(job.spec_for(job.prefix_for(day)), clients)
        lay = layout_for(S3Url(src, job.prefix_for(day)), job.destination)
        templates.append((lay, s3.get_object(Bucket=dst, Key=lay.archive_key(".tar.gz"))["Body"].read(),
                          s3.get_object(Bucket=dst, Key=lay.manifest_key)["Body"].read(),
                          json.loads(gzip.decompress(s3.get_object(Bucket=dst, Key=lay.index_key)["Body"].read()))))

    def copy(i_day):
        i, day = i_day
        lay_from, archive, manifest, index = templates[i % REAL]
        lay = layout_for(S3Url(src, job.prefix_for(day)), job.destination)
        index = json.loads(json.dumps(index))
        index["header"]["archive"]["key"] = lay.archive_key(".tar.gz")
        index["header"]["source"]["prefix"] = job.prefix_for(day)
        s3.put_object(Bucket=dst, Key=lay.archive_key(".tar.gz"), Body=archive)
        s3.put_object(Bucket=dst, Key=lay.manifest_key, Body=manifest)
        s3.put_object(Bucket=dst, Key=lay.index_key, Body=gzip.compress(json.dumps(index).encode()))

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(copy, [(i, d) for i, d in enumerate(days) if i >= REAL and d not in gaps | empty]))
    return job, days


def main() -> int:
    from s3arch.ops.catalog.job_catalog import Catalog
    from s3arch.io.s3 import S3Clients

    with tempfile.TemporaryDirectory(prefix="s3arch-bench-catalog-") as data:
        server = start_minio(data_dir=Path(data))
        try:
            import boto3

            s3 = server.client()
            src, dst = "bench-cat-src", "bench-cat-dst"
            for b in (src, dst):
                s3.create_bucket(Bucket=b)
            session = boto3.Session(aws_access_key_id=server.access_key, aws_secret_access_key=server.secret_key,
                                    region_name=server.region)
            clients = S3Clients.from_session(session, server.endpoint_url)
            started = time.monotonic()
            job, days = seed(server, clients, src, dst)
            seeded = time.monotonic() - started
            catalog = Catalog(job, clients.store)
            today = days[-1] + timedelta(days=2)
            t = time.monotonic()
            cold = catalog.view(days[0], days[-1], today=today)
            cold_s = time.monotonic() - t
            t = time.monotonic()
            warm = catalog.view(days[0], days[-1], today=today, refresh=True)
            warm_s = time.monotonic() - t
            t = time.monotonic()
            cached = catalog.view(days[0], days[-1], today=today)
            body = json.dumps(cached.to_dict())
            cached_ms = (time.monotonic() - t) * 1000
        finally:
            server.stop()
    by_state = cold.to_dict()["totals"]["by_state"]
    result = {"days": len(cold.days), "states": by_state, "seed_s": round(seeded, 1),
              "first_read": {"requests": cold.requests, "seconds": round(cold_s, 3)},
              "refresh": {"requests": warm.requests, "seconds": round(warm_s, 3)},
              "cached_json_ms": round(cached_ms, 1), "json_bytes": len(body)}
    line = (f"catalog 1,096 days: first read {sum(cold.requests.values())} requests "
            f"({', '.join(f'{v} {k}' for k, v in cold.requests.items())}) in {cold_s:.2f}s; refresh "
            f"{sum(warm.requests.values())} requests in {warm_s:.2f}s; from cache with JSON {cached_ms:.0f} ms "
            f"({len(body) / 1024:.0f} KiB); states {by_state}")
    print(line)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    (out / "catalog.json").write_text(json.dumps({**result, "line": line}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
