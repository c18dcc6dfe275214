"""Our own work per small object, stage by stage, in one process without a server.

    python -m bench.ownwork                 # 10,000 objects of 7 KiB, 5 runs
    python -m bench.ownwork --objects 2000 --size 1024 --runs 9

What the member loop does for every object once its bytes have arrived, each stage timed on
its own over all the objects (CPU time of this process, no threads): the attributes from the
GET's response headers (a MinIO answer's 15 headers), the tar header and the member's bytes
into the block buffer, the SHA-256, the manifest record and its JSON line into the manifest's
gzip stream. The reference, in the same invocation: Python's ``tarfile`` writing the same
members into a null file (what "write a tar" costs the obvious way). The GETs, listing,
compression and uploads are left out: `python -m bench.profile` sees those in a real run.
Printed: ms per object per stage, median [min-max] over the runs, and the tar stage against
the reference.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import statistics
import sys
import tarfile
import time
from datetime import datetime, timezone

from s3arch.io import attributes

from s3arch.stored import manifests

from s3arch.produce import pipeline

from s3arch.format import tarwriter
from s3arch.io.listed import ListedObject

HEADERS = [("Accept-Ranges", "bytes"), ("Content-Length", "7168"), ("Content-Type", "binary/octet-stream"),
           ("ETag", '"5d41402abc4b2a76b9719d911017c592"'), ("Last-Modified", "Wed, 25 Nov 2026 09:31:13 GMT"),
           ("Server", "MinIO"), ("Strict-Transport-Security", "max-age=31536000; includeSubDomains"),
           ("Vary", "Origin"), ("Vary", "Accept-Encoding"), ("X-Amz-Checksum-Crc64nvme", "8TjmpYyKrXU="),
           ("X-Amz-Checksum-Type", "FULL_OBJECT"), ("X-Amz-Id-2", "dd9025bab4ad464b049177c95eb6ebf3"),
           ("X-Amz-Request-Id", "187B0E1C5E5A2B1F"), ("X-Content-Type-Options", "nosniff"),
           ("Date", "Wed, 25 Nov 2026 09:31:13 GMT")]


class _NullUpload:
    def write(self, data) -> None:
        pass


class _NullFile(io.RawIOBase):
    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        return len(data)


def _objects(n: int, size: int) -> list:
    modified = datetime(2026, 11, 1, 13, 5, 7, tzinfo=timezone.utc)
    return [ListedObject(f"logs/2026/11/01/{i % 24:02d}/app-{i:06d}.log", size, '"5d41402abc4b2a76b9719d911017c592"',
                         modified) for i in range(n)]


def _timed(work) -> float:
    started = time.process_time()
    work()
    return time.process_time() - started


def one_run(objects: list, body: bytes) -> dict[str, float]:
    """CPU seconds of each stage over all ``objects``."""
    n = len(objects)
    captured: list = []
    placed: list = []
    digests: list = []
    sink = tarwriter.BlockSink(4 << 20, lambda index, block, final: None)
    tar = tarwriter.TarStream(sink)

    def tar_members():
        for obj in objects:
            placed.append(tar.begin(obj.key, obj.size, int(obj.last_modified.timestamp())))
            tar.write(body)
            tar.end(obj.size)
            sink.emit_ready()

    def records():
        lines = manifests.JsonLinesUpload(_NullUpload())
        for i, obj in enumerate(objects):
            record = pipeline._record(obj, digests[i], *placed[i], captured[i])
            record["block"], record["range"] = i // 500, [i * 1000, i * 1000 + 1000]
            lines.write(record)
        lines.close()

    def reference():
        with tarfile.open(fileobj=_NullFile(), mode="w|", format=tarfile.PAX_FORMAT) as out:
            for obj in objects:
                info = tarfile.TarInfo(obj.key)
                info.size, info.mtime = obj.size, int(obj.last_modified.timestamp())
                out.addfile(info, io.BytesIO(body))

    seconds = {
        "attributes from headers": _timed(lambda: captured.extend(attributes.from_headers(HEADERS) for _ in range(n))),
        "tar header and bytes": _timed(tar_members),
        "SHA-256": _timed(lambda: digests.extend(hashlib.sha256(body).hexdigest() for _ in range(n))),
        "manifest record and line": _timed(records),
    }
    seconds["all stages"] = sum(seconds.values())
    seconds["reference: tarfile, tar stage only"] = _timed(reference)
    return seconds


def ownwork_line(repeat: int, objects: int = 10_000, size: int = 7 << 10) -> dict:
    """The member loop's own stages, ``repeat`` runs: ms of CPU per object of each (median
    [min-max]), the tar stage against ``tarfile``, and an info line for the bench."""
    from bench.bench import fmt, spread

    listed, body = _objects(objects, size), bytes(range(256)) * (size // 256) + bytes(size % 256)
    runs = [one_run(listed, body) for _ in range(repeat)]
    stages = {stage: spread([{"v": 1000 * r[stage] / objects} for r in runs], "v") for stage in runs[0]}
    vs_tarfile = spread([{"v": r["tar header and bytes"] / r["reference: tarfile, tar stage only"]} for r in runs], "v")
    print(f"ownwork: {objects:,} objects of {size:,} bytes, {repeat} runs; ms of CPU per object, median [min-max]")
    for stage, ms in stages.items():
        print(f"  {stage:36s} {fmt(ms, 4)}")
    print(f"  tar stage against tarfile: {fmt(vs_tarfile)}", flush=True)
    verdicts = [f"info  ownwork the member loop's own stages (tar, record, attributes, SHA-256) "
                f"{fmt(stages['all stages'], 4)} ms of CPU per object without a server; the end-to-end "
                "target is the small set's client CPU per object"]
    return {"objects": objects, "size": size, "stages_ms_per_object": stages, "tar_vs_tarfile": vs_tarfile,
            "verdicts": verdicts}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=7 << 10, help="bytes per object (default 7 KiB)")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    ownwork_line(args.runs, args.objects, args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
