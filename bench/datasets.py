"""The benchmark's data sets, seeded once into the benchmark's MinIO and reused.

Content is generated into /dev/shm and uploaded with s5cmd (far cheaper than 200,000
boto3 PUTs); a marker object written last makes seeding idempotent: a set whose marker
exists is complete and is not seeded again.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from devtools.sample_data import log_lines

SOURCE_BUCKET = "bench-src"
STAGING = Path("/dev/shm/s3arch-bench-seed")
DAY = date(2026, 11, 1)


@dataclass(frozen=True)
class DataSet:
    name: str
    description: str
    objects: int

    @property
    def prefix(self) -> str:
        return f"{self.name}/"

    @property
    def marker(self) -> str:
        return f"_seeded/{self.name}.json"


SETS = {
    "small": DataSet("small", "20,000 log files of ~8 KiB under 24 hourly sub-prefixes", 20_000),
    "medium": DataSet("medium", "400 log files of 1 MiB", 400),
    "large": DataSet("large", "4 objects of 256 MiB: 2 of logs, 2 random", 4),
    "many": DataSet("many", "200,000 log files of ~1 KiB", 200_000),
    "day2k": DataSet("day2k", "2,000 log files of ~8 KiB: a day of a small service", 2_000),
    "single": DataSet("single", "1 log file of ~8 KiB: what a prefix costs beyond its objects", 1),
    "tagged": DataSet("tagged", "the small set's 20,000 files, each with a content type, cache control and two "
                                "user metadata entries; every tenth with two tags", 20_000),
}


def _logs_of_size(size: int, rng: random.Random, hour: int) -> bytes:
    out, total = [], 0
    while total < size:
        chunk = log_lines(DAY, hour, 200, rng)
        out.append(chunk)
        total += len(chunk)
    return b"".join(out)[:size]


def _generate(ds: DataSet, root: Path) -> None:
    rng = random.Random(ds.name)
    if ds.name == "small":
        for i in range(ds.objects):
            hour = i % 24
            path = root / f"{hour:02d}" / f"app-{i:05d}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(log_lines(DAY, hour, 62, rng))
    elif ds.name == "many":
        for i in range(ds.objects):
            path = root / f"{i // 1000:03d}" / f"event-{i:06d}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(log_lines(DAY, i % 24, 8, rng))
    elif ds.name in ("day2k", "single"):
        for i in range(ds.objects):
            path = root / f"{i % 24:02d}" / f"app-{i:05d}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(log_lines(DAY, i % 24, 62, rng))
    elif ds.name == "medium":
        for i in range(ds.objects):
            (root / f"part-{i:04d}.log").write_bytes(_logs_of_size(1 << 20, rng, i % 24))
    elif ds.name == "large":
        for i in range(2):
            (root / f"logs-{i}.log").write_bytes(_logs_of_size(256 << 20, rng, i))
            (root / f"blob-{i}.bin").write_bytes(os.urandom(256 << 20))
    else:
        raise ValueError(ds.name)


def _seed_tagged(ds: DataSet, s3) -> None:
    """The small set's content, PUT with attributes (s5cmd cannot set tags)."""
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random("small")  # the same bytes as the small set

    bodies = [(i, log_lines(DAY, i % 24, 62, rng)) for i in range(ds.objects)]

    def put(item) -> None:
        i, body = item
        s3.put_object(Bucket=SOURCE_BUCKET, Key=f"{ds.prefix}{i % 24:02d}/app-{i:05d}.log", Body=body,
                      ContentType="text/plain; charset=utf-8", CacheControl="max-age=86400",
                      Metadata={"service": f"app-{i % 7}", "host": f"ip-10-0-{i % 250}-{i % 200}"},
                      **({"Tagging": f"team=ops&sensitivity=low-{i % 3}"} if i % 10 == 0 else {}))

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, bodies))


def seed(ds: DataSet, s3, s5cmd: list[str], env: dict) -> bool:
    """Seed ``ds`` unless its marker exists. Returns True if it seeded."""
    try:
        s3.head_object(Bucket=SOURCE_BUCKET, Key=ds.marker)
        return False
    except s3.exceptions.ClientError:
        pass
    if ds.name == "tagged":
        _seed_tagged(ds, s3)
        return _mark(ds, s3)
    root = STAGING / ds.name
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    try:
        _generate(ds, root)
        # Remove what an interrupted earlier seeding left, then upload the whole set.
        subprocess.run([*s5cmd, "rm", f"s3://{SOURCE_BUCKET}/{ds.prefix}*"], env=env, check=False,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        subprocess.run([*s5cmd, "cp", f"{root}/", f"s3://{SOURCE_BUCKET}/{ds.prefix}"], env=env,
                       check=True, stdout=subprocess.DEVNULL)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return _mark(ds, s3)


def _mark(ds: DataSet, s3) -> bool:
    count = sum(page.get("KeyCount", 0) for page in
                s3.get_paginator("list_objects_v2").paginate(Bucket=SOURCE_BUCKET, Prefix=ds.prefix))
    if count != ds.objects:
        raise RuntimeError(f"seeding {ds.name}: {count} objects listed, {ds.objects} expected")
    s3.put_object(Bucket=SOURCE_BUCKET, Key=ds.marker, Body=json.dumps({"objects": count}).encode())
    return True
