"""Size and speed of each codec level on the sample logs, as the archiver compresses them.

    .venv/bin/python -m bench.ratio            # prints the table, writes bench/results/ratio.json

The input is what `make demo` and `make airflow` seed (``devtools.sample_data.seed_day`` with
10 files an hour of 60 lines, 240 objects a day), for ten fixed days so every run reads the
same bytes, made into the archiver's own tar stream (``s3arch.format.tarwriter``: pax headers,
512-byte padding, the end blocks). Each codec level compresses it the way the archive
pipeline does (``s3arch.format.compression.codec_for``: 1 MiB blocks, each on its own), on one
thread, timed in that thread's CPU time (``time.thread_time``), so MB/s is per core and other
load on the machine does not count against it. The reference is zlib level 6 on the whole
stream (what `gzip -6` does). Speeds are the best of ``--repeat`` runs; sizes are exact. docs/COST.md's codec table and worked example quote this file's output.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
import zlib
from datetime import date, datetime, timezone
from pathlib import Path

from devtools.sample_data import days, seed_day
from s3arch.format.compression import codec_for
from s3arch.format.tarwriter import member_header

OUT = Path(__file__).resolve().parent / "results" / "ratio.json"
BLOCK = 1 << 20
FIRST_DAY, LAST_DAY = date(2026, 11, 1), date(2026, 11, 10)
LEVELS = [("gzip", 1), ("gzip", 4), ("gzip", 6), ("zstd", 1), ("zstd", 3), ("zstd", 9), ("zstd", 19)]
DEFAULT = ("gzip", 1)  # s3arch archive's default codec and level


class _Discard:
    """A client for seed_day that keeps nothing: the objects are its return value."""

    def put_object(self, **_):
        pass


def sample_objects() -> dict[str, bytes]:
    objects: dict[str, bytes] = {}
    for day in days(FIRST_DAY, LAST_DAY):
        objects.update(seed_day(_Discard(), "app-logs", "logs/{date:%Y/%m/%d}/", day,
                                files_per_hour=10, lines_per_file=60))
    return dict(sorted(objects.items()))


def tar_stream(objects: dict[str, bytes]) -> bytes:
    mtime = int(datetime(2026, 11, 11, tzinfo=timezone.utc).timestamp())
    parts = []
    for key, body in objects.items():
        parts += [member_header(key, len(body), mtime, False), body, bytes(-len(body) % 512)]
    parts.append(bytes(1024))
    return b"".join(parts)


def compressed_size(codec_name: str, level: int, tar: bytes) -> tuple[int, float]:
    """(archive bytes, CPU seconds) for the archiver's block-by-block compression on one thread."""
    codec = codec_for(codec_name, level)
    started = time.thread_time()
    size = len(codec.header())
    blocks = range(0, len(tar), BLOCK)
    for start in blocks:
        size += len(codec.compress(tar[start:start + BLOCK], start + BLOCK >= len(tar))[0])
    size += len(codec.trailer(0, len(tar)))
    return size, time.thread_time() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ratio", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    objects = sample_objects()
    data = sum(len(b) for b in objects.values())
    tar = tar_stream(objects)
    started = time.thread_time()
    reference = len(zlib.compress(tar, 6))
    reference_seconds = time.thread_time() - started
    for _ in range(args.repeat - 1):
        started = time.thread_time()
        zlib.compress(tar, 6)
        reference_seconds = min(reference_seconds, time.thread_time() - started)
    rows = []
    for name, level in LEVELS:
        size, seconds = compressed_size(name, level, tar)
        for _ in range(args.repeat - 1):
            seconds = min(seconds, compressed_size(name, level, tar)[1])
        rows.append({"codec": name, "level": level, "archive_bytes": size,
                     "ratio": round(data / size, 2), "size_vs_gzip6": round(size / reference, 3),
                     "mb_per_s_per_core": round(len(tar) / seconds / 1e6)})
    default = next(r for r in rows if (r["codec"], r["level"]) == DEFAULT)
    result = {
        "what": "sample logs (devtools.sample_data, 240 files a day) for "
                f"{FIRST_DAY} .. {LAST_DAY}, compressed as the archiver does (1 MiB blocks, one thread)",
        "measured": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "objects": len(objects), "object_bytes": data, "mean_object_bytes": round(data / len(objects)),
        "tar_bytes": len(tar), "repeat": args.repeat,
        "default": {"codec": DEFAULT[0], "level": DEFAULT[1], "ratio": default["ratio"]},
        "reference": {"what": "zlib level 6 on the whole stream (gzip -6)", "archive_bytes": reference,
                      "ratio": round(data / reference, 2),
                      "mb_per_s_per_core": round(len(tar) / reference_seconds / 1e6)},
        "levels": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"{len(objects):,} objects, {data / 2**20:.1f} MiB ({result['mean_object_bytes']:,} bytes on average), "
          f"tar {len(tar) / 2**20:.1f} MiB\n")
    print("| codec level | ratio (object bytes : archive) | size vs `gzip -6` | MB/s per core |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['codec']} {r['level']} | {r['ratio']}:1 | {r['size_vs_gzip6']:.3f} | {r['mb_per_s_per_core']} |")
    ref = result["reference"]
    print(f"| `gzip -6` (zlib) | {ref['ratio']}:1 | 1.000 | {ref['mb_per_s_per_core']} |")
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
