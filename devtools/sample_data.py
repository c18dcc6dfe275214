"""Sample data that looks like real date-partitioned logs (compresses 5-10x with gzip -6)."""

from __future__ import annotations

import random
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


def seed_day(client, bucket: str, template: str, day: date, files_per_hour: int,
             lines_per_file: int, seed: int = 0) -> dict[str, bytes]:
    """Write one day of hourly log files under ``template.format(date=day)``; return them."""
    rng = random.Random(f"{seed}-{day}")
    prefix = template.format(date=day)
    objects = {}
    for hour in range(24):
        for n in range(files_per_hour):
            objects[f"{prefix}{hour:02d}/app-{n:04d}.log"] = log_lines(day, hour, lines_per_file, rng)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()))
    return objects


def days(first: date, last: date):
    d = first
    while d <= last:
        yield d
        d += timedelta(days=1)
