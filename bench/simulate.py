"""A very large day on paper and in a simulation: the stages of a segmented run whose cost
grows with the number of keys, measured at N keys without N objects.

- ``plan``: the segment plan of an N-key prefix, listed from the test fault proxy's
  synthetic listing (pages made on the fly, never stored), cut into 8 segments.
- ``merge``: the assembler's manifest merge: 8 segments' record files of N/8 records each
  (seeded into MinIO beforehand, untimed) merged into the final manifest with its index.

Each stage runs in its own process, timed from outside (wall, CPU, peak RSS):
``python -m bench.simulate --keys 10000000`` (default 1,000,000). bench/README.md has the
figures and what they project for a ten-million-object day on 8 workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.bench import DEST_BUCKET, ROOT, bench_env, measure, start_bench_minio

SEGMENTS = 8
STAGE_BUCKET = "bench-simulate"


def _clients(endpoint: str):
    import boto3

    from s3arch.io.s3 import S3Clients

    session = boto3.Session(aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
    return S3Clients.from_session(session, endpoint_url=endpoint)


def stage_plan(keys: int) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    from faultproxy import FaultProxy

    from s3arch.core.config import ArchiveSpec, S3Url
    from s3arch.produce.segments import plan_segments

    proxy = FaultProxy(os.environ["AWS_ENDPOINT_URL_S3"], max_lifetime=7200)
    try:
        proxy.synthesize_listing(STAGE_BUCKET, "synthetic/", keys)
        clients = _clients(proxy.endpoint_url)
        spec = ArchiveSpec(S3Url(STAGE_BUCKET, "synthetic/"), S3Url(DEST_BUCKET, "plan/"), processes=SEGMENTS)
        started = time.monotonic()
        plan = plan_segments(spec, clients.store, "plan.tar.gz", SEGMENTS)
        return {"objects": plan.objects, "segments": plan.count, "seconds": time.monotonic() - started}
    finally:
        proxy.stop()


def _record(i: int, offset: int) -> dict:
    return {"type": "object", "key": f"logs/2026/11/21/{i // 100_000:03d}/app-{i:08d}.log", "size": 1500,
            "etag": '"9b2c6a1f0e5d4c3b2a19080706050403"', "last_modified": "2026-11-21T13:05:07+00:00",
            "sha256": "5f1d" * 16, "header_offset": offset, "data_offset": offset + 512,
            "block": offset >> 20, "range": [offset // 4, offset // 4 + 600],
            "checksum": {"algorithm": "CRC32", "value": "Xg5djw==", "type": "FULL_OBJECT"}}


def seed_segments(keys: int) -> None:
    """The record files 8 segments of an N-key day would leave (as SegmentRecords writes them)."""
    import threading

    from s3arch.core.coordinator import StreamCoordinator
    from s3arch.produce.segments.produce import SegmentRecords

    control = _clients(os.environ["AWS_ENDPOINT_URL_S3"]).control
    per = keys // SEGMENTS

    def write(k: int) -> None:
        records = SegmentRecords(control, STAGE_BUCKET, f"merge/seg/{k:05d}.manifest.jsonl.gz", {},
                                 StreamCoordinator(f"segment {k} records"))
        for i in range(k * per, (k + 1) * per):
            records.add_object(_record(i, (i - k * per) * 2048))
        records.close({"segment": k, "objects": per})

    threads = [threading.Thread(target=write, args=(k,)) for k in range(SEGMENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def stage_merge(keys: int) -> dict:
    from s3arch.format.manifest import ArchiveLayout
    from s3arch.stored.manifests import ManifestWriter
    from s3arch.produce.segments.assemble import _merge_records

    control = _clients(os.environ["AWS_ENDPOINT_URL_S3"]).control
    per = keys // SEGMENTS
    layout = ArchiveLayout(STAGE_BUCKET, "merge/out")
    for key in (layout.manifest_key, layout.index_key):  # an earlier simulation's output
        control.delete_object(Bucket=STAGE_BUCKET, Key=key)
    results = [{"objects": per, "first_block": k * 1000, "last_block": k * 1000 + 999, "last_block_start": 0}
               for k in range(SEGMENTS)]
    started = time.monotonic()
    manifest = ManifestWriter(control, layout, {"source": {"bucket": "s", "prefix": "p/"}})
    _merge_records(control, ArchiveLayout(STAGE_BUCKET, "merge/"), _SegmentKeys(), results,
                   [k << 30 for k in range(SEGMENTS)], manifest)
    manifest.complete({"objects": keys})
    manifest.write_index()
    return {"objects": keys, "seconds": time.monotonic() - started}


class _SegmentKeys:
    """What the merge needs of a plan: where segment k's records are."""

    def temp_key(self, layout, k: int, what: str) -> str:
        return f"merge/seg/{k:05d}{what}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--stages", default="plan,seed,merge",
                        help="stages to run (seed writes what merge reads: keep it for the same --keys)")
    parser.add_argument("--stage", choices=["plan", "seed", "merge"], help=argparse.SUPPRESS)  # one process each
    args = parser.parse_args(argv)
    if args.stage:
        out = {"plan": stage_plan, "seed": lambda n: seed_segments(n) or {}, "merge": stage_merge}[args.stage](args.keys)
        print(json.dumps(out))
        return 0
    server = start_bench_minio()
    try:
        s3 = server.client()
        try:
            s3.create_bucket(Bucket=STAGE_BUCKET)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        env = bench_env(server)
        argv = [sys.executable, "-m", "bench.simulate", "--keys", str(args.keys), "--stage"]
        out = ROOT / "bench" / "results" / f"simulate-{args.keys}.json"
        figures = json.loads(out.read_text()) if out.exists() else {}
        for stage in args.stages.split(","):
            run = measure(argv + [stage], env, server.pid)
            figures[stage] = {**json.loads(run.pop("stdout").strip().splitlines()[-1]), **run}
            f = figures[stage]
            seconds = f.get("seconds", f["wall_s"])  # the stage itself, without the interpreter's start
            print(f"{stage}: {args.keys:,} keys in {seconds:.1f}s ({args.keys / seconds:,.0f} keys/s); process "
                  f"{f['wall_s']:.1f}s wall, {f['cpu_s']:.1f}s CPU, peak RSS {f['peak_rss_mib']:.0f} MiB"
                  + (" (setup, not a stage of a run)" if stage == "seed" else ""), flush=True)
        (ROOT / "bench" / "results").mkdir(exist_ok=True)
        out.write_text(json.dumps(figures, indent=1))
        print(f"results: {out.relative_to(ROOT)}")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
