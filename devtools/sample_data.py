"""Sample data that looks like real date-partitioned logs (compresses 5-10x with gzip -6)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import date, timedelta

_PATHS = ["/api/v1/orders", "/api/v1/items", "/api/v1/users/me", "/healthz", "/api/v2/search"]
_LEVELS = ["INFO"] * 8 + ["WARN", "ERROR"]


def log_lines(day: date, hour: int, n: int, rng: random.Random) -> bytes:
    out = []
    for i in range(n):
        ts = f"{day.isoformat()}T{hour:02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}.{rng.randrange(1000):03d}Z"
        out.append(
            f"{ts} {rng.choice(_LEVELS)} req={rng.getrandbits(48):012x} method=GET "
            f"path={rng.choice(_PATHS)} status={rng.choice((200, 200, 200, 201, 404, 500))} "
            f"latency_ms={rng.randrange(1, 900)} user=u{rng.randrange(5000)}\n")
    return "".join(out).encode()


def day_objects(template: str, day: date, files_per_hour: int, lines_per_file: int,
                seed: int = 0) -> dict[str, bytes]:
    """One day of hourly log files under ``template.format(date=day)``: key -> body."""
    rng = random.Random(f"{seed}-{day}")
    prefix = template.format(date=day)
    return {f"{prefix}{hour:02d}/app-{n:04d}.log": log_lines(day, hour, lines_per_file, rng)
            for hour in range(24) for n in range(files_per_hour)}


def seed_day(client, bucket: str, template: str, day: date, files_per_hour: int,
             lines_per_file: int, seed: int = 0) -> dict[str, bytes]:
    """Write one day of hourly log files (``day_objects``), one PUT each; return them."""
    objects = day_objects(template, day, files_per_hour, lines_per_file, seed)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()))
    return objects


def put_extracted(client, bucket: str, objects: Iterable[tuple[str, bytes]], batch: int = 10_000) -> int:
    """Write ``objects`` (key, body) as tar batches that MinIO unpacks into one object per
    file (its snowball auto-extract): same keys, bodies and ETags as one PUT each, three
    times as fast (2,400 files: 12 s instead of 40 on a loaded machine). MinIO only. Returns
    how many were written."""
    import io
    import tarfile

    written = 0
    pending = iter(objects)
    while chunk := list(itertools.islice(pending, batch)):
        tar_bytes = io.BytesIO()
        with tarfile.open(fileobj=tar_bytes, mode="w") as tar:
            for key, body in chunk:
                info = tarfile.TarInfo(key)
                info.size = len(body)
                tar.addfile(info, io.BytesIO(body))
        client.put_object(Bucket=bucket, Key=f".seed-{written}.tar", Body=tar_bytes.getvalue(),
                          Metadata={"snowball-auto-extract": "true"})
        written += len(chunk)
    return written


def seed_large_day(client, bucket: str, template: str, day: date, objects: int, seed: int = 0) -> int:
    """A day of ``objects`` small log files (two lines each), written by ``put_extracted``."""
    rng = random.Random(f"{seed}-{day}-large")
    prefix = template.format(date=day)
    per_hour = -(-objects // 24)
    names = [f"{prefix}{hour:02d}/app-{n:05d}.log" for hour in range(24) for n in range(per_hour)][:objects]
    return put_extracted(client, bucket, ((name, log_lines(day, int(name[len(prefix):len(prefix) + 2]), 2, rng))
                                          for name in names))


def days(first: date, last: date):
    d = first
    while d <= last:
        yield d
        d += timedelta(days=1)
