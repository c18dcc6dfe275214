"""`make demo`: the archive path end to end on an embedded MinIO with sample logs.

Starts MinIO on loopback, seeds three days of hourly log files, archives each day with the
real CLI (python -m tasks archive), lists and reads one object back from an archive, verifies
it, shows that a re-run is a no-op, and stops MinIO again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

from devtools.sample_data import days, seed_day
from devtools.servers import ROOT, start_minio

SOURCE_BUCKET = "app-logs"
ARCHIVE_BUCKET = "log-archive"
TEMPLATE = "logs/{date:%Y/%m/%d}/"
FIRST, LAST = date(2026, 11, 19), date(2026, 11, 21)


def run_cli(env, *args, capture=True) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "tasks", *args]
    print("$ python -m tasks " + " ".join(args), flush=True)
    return subprocess.run(cmd, env=env, cwd=ROOT, check=True, text=True,
                          stdout=subprocess.PIPE if capture else None)


def main() -> int:
    server = start_minio()
    print(f"embedded MinIO (pid {server.pid}) at {server.endpoint_url}")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(server.env(), PYTHONPATH=str(ROOT))
        s3 = server.client()
        for bucket in (SOURCE_BUCKET, ARCHIVE_BUCKET):
            s3.create_bucket(Bucket=bucket)
        seeded = 0
        for day in days(FIRST, LAST):
            seeded += len(seed_day(s3, SOURCE_BUCKET, TEMPLATE, day, files_per_hour=40, lines_per_file=60))
        print(f"seeded {seeded:,} log files under s3://{SOURCE_BUCKET}/logs/2026/11/19..21/\n")

        for day in days(FIRST, LAST):
            # MinIO accepts only the STANDARD storage class; on AWS leave the GLACIER default.
            run_cli(env, "archive", f"s3://{SOURCE_BUCKET}/{TEMPLATE.format(date=day)}",
                    f"s3://{ARCHIVE_BUCKET}/archive/", "--storage-class", "STANDARD", capture=False)
        archive = f"s3://{ARCHIVE_BUCKET}/archive/{SOURCE_BUCKET}/logs/2026/11/21.tar.gz"
        members = run_cli(env, "ls", archive).stdout.splitlines()
        print(f"  {len(members)} members, first: {members[0].strip()}")
        key = "logs/2026/11/21/13/app-0007.log"
        text = run_cli(env, "cat", archive, key).stdout
        print(f"  {key}: {len(text.splitlines())} lines, first: {text.splitlines()[0]}")
        run_cli(env, "verify", archive, capture=False)
        again = json.loads(run_cli(env, "archive", f"s3://{SOURCE_BUCKET}/logs/2026/11/21/",
                                   f"s3://{ARCHIVE_BUCKET}/archive/", "--storage-class",
                                   "STANDARD", "--json").stdout)
        print(f"  re-run status: {again['status']} (nothing rewritten)\n")
        print("what the demo made:")
        for obj in s3.list_objects_v2(Bucket=ARCHIVE_BUCKET)["Contents"]:
            print(f"  s3://{ARCHIVE_BUCKET}/{obj['Key']}  {obj['Size']:,} bytes")
        print("\ndemo finished; stopping MinIO (its data dir is removed).")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
