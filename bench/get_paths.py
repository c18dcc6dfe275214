"""Client CPU per GET on the data planes, side by side in one process: the CRT S3 client's
meta-requests (S3ARCH_GET_PATH=crt), plain awscrt.http connections with awscrt's signer (the
archiver's default, tasks/io/connections.py), obstore (Rust's object_store, on tokio and
reqwest) and boto3's get_object. Each fetches the same objects, the same number at once;
the figure is the process's CPU time (every thread, the clients' own included) per object.

``python -m bench.get_paths`` runs the comparison that chose the default on its own MinIO:
small objects at 16, 64 and 128 GETs in flight and ranged pieces of a large object (the
fetcher's ``chunk``), the two awscrt paths alternating, printing each path's client CPU per
GET and GETs/s, median [min-max], and plain as a ratio to the CRT client."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

IN_FLIGHT = 32


def _plane_gets(server, bucket: str, keys: list[str], *, path: str, in_flight: int = IN_FLIGHT,
                piece: int | None = None) -> dict:
    """GET ``keys`` through the archiver's data plane on GET path ``path``, ``in_flight`` at
    once; with ``piece``, each key is fetched in ranged GETs of ``piece`` bytes (a large object,
    as the fetcher fetches it)."""
    import boto3

    from s3arch.io.s3 import S3Clients

    previous = os.environ.get("S3ARCH_GET_PATH")
    os.environ["S3ARCH_GET_PATH"] = path
    try:
        clients = S3Clients.from_session(boto3.Session(aws_access_key_id=server.access_key,
                                                       aws_secret_access_key=server.secret_key,
                                                       region_name=server.region), endpoint_url=server.endpoint_url)
        plane = clients.data_for(bucket, concurrency=in_flight)
    finally:
        if previous is None:
            os.environ.pop("S3ARCH_GET_PATH")
        else:
            os.environ["S3ARCH_GET_PATH"] = previous
    requests: list[tuple[str, tuple[int, int] | None]] = [(key, None) for key in keys]
    if piece is not None:
        sizes = {key: clients.control.head_object(Bucket=bucket, Key=key)["ContentLength"] for key in keys}
        requests = [(key, (start, min(start + piece, size))) for key, size in sizes.items()
                    for start in range(0, size, piece)]
    got = [0]
    slots = threading.Semaphore(in_flight)
    finished = threading.Semaphore(0)
    errors = []

    def on_done(error):
        if error is not None:
            errors.append(error)
        slots.release()
        finished.release()

    def on_body(chunk):
        got[0] += len(chunk)

    def run():
        for key, byte_range in requests:
            slots.acquire()
            plane.get(key, etag=None, byte_range=byte_range, on_body=on_body, on_done=on_done)
        for _ in requests:
            finished.acquire()

    result = _timed(run, got, errors)
    result["gets"] = len(requests)
    return result


def crt_meta_requests(server, bucket: str, keys: list[str], **how) -> dict:
    return _plane_gets(server, bucket, keys, path="crt", **how)


def plain_connections(server, bucket: str, keys: list[str], **how) -> dict:
    return _plane_gets(server, bucket, keys, path="plain", **how)


def obstore_gets(server, bucket: str, keys: list[str]) -> int:
    import asyncio

    import obstore
    from obstore.store import S3Store

    store = S3Store(bucket, endpoint=server.endpoint_url, access_key_id=server.access_key,
                    secret_access_key=server.secret_key, region=server.region,
                    client_options={"allow_http": True}, virtual_hosted_style_request=False)
    got = [0]

    async def fetch_all():
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def one(key):
            async with gate:
                result = await obstore.get_async(store, key)
                body = await result.bytes_async()
                got[0] += len(body)  # after the await: `got[0] += len(await ...)` reads got[0] before it

        await asyncio.gather(*(one(k) for k in keys))

    return _timed(lambda: asyncio.run(fetch_all()), got, [])


def boto3_gets(server, bucket: str, keys: list[str]) -> int:
    s3 = server.client(max_pool_connections=IN_FLIGHT)
    got = [0]
    lock = threading.Lock()

    def one(key):
        n = len(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        with lock:
            got[0] += n

    def run():
        with ThreadPoolExecutor(IN_FLIGHT) as pool:
            list(pool.map(one, keys))

    return _timed(run, got, [])


def _timed(run, got: list[int], errors: list) -> dict:
    cpu, started = time.process_time(), time.monotonic()
    run()
    wall, cpu = time.monotonic() - started, time.process_time() - cpu
    if errors:
        raise errors[0]
    return {"cpu_s": cpu, "wall_s": wall, "bytes": got[0]}


PATHS = {"crt_meta_request": crt_meta_requests, "plain": plain_connections, "obstore": obstore_gets,
         "boto3": boto3_gets}
AWSCRT_PATHS = {"crt": crt_meta_requests, "plain": plain_connections}


def _spread(values: list[float]) -> str:
    import statistics

    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def compare(server, bucket: str, keys: list[str], repeat: int, **how) -> dict[str, list[dict]]:
    """The two awscrt paths alternating ``repeat`` times on the same GETs: each path's runs."""
    runs: dict[str, list[dict]] = {name: [] for name in AWSCRT_PATHS}
    for _ in range(repeat):
        for name, fetch in AWSCRT_PATHS.items():
            runs[name].append(fetch(server, bucket, keys, **how))
    sizes = {r["bytes"] for rs in runs.values() for r in rs}
    assert len(sizes) == 1, f"the paths fetched different bytes: {sizes}"
    return runs


def report(label: str, runs: dict[str, list[dict]]) -> None:
    """Client CPU per GET and GETs/s of each path, and plain's as ratios to the CRT client's
    run of the same round."""
    for name, rs in runs.items():
        print(f"  {label} {name:5}: {_spread([1000 * r['cpu_s'] / r['gets'] for r in rs])} ms CPU/GET, "
              f"{_spread([r['gets'] / r['wall_s'] for r in rs])} GETs/s", flush=True)
    pairs = list(zip(runs["plain"], runs["crt"]))
    cpu = [(p["cpu_s"] / p["gets"]) / (c["cpu_s"] / c["gets"]) for p, c in pairs]
    rate = [(p["gets"] / p["wall_s"]) / (c["gets"] / c["wall_s"]) for p, c in pairs]
    print(f"  {label} plain / crt: CPU per GET {_spread(cpu)}x, GETs/s {_spread(rate)}x", flush=True)


def main() -> None:
    import argparse

    from devtools.servers import start_minio
    from s3arch.core.config import ArchiveSpec

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=5_000, help="small objects (7 KiB each)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--in-flight", default="16,64,128")
    parser.add_argument("--large-mib", type=int, default=256, help="the large object's size, fetched in pieces")
    args = parser.parse_args()
    chunk = ArchiveSpec.__dataclass_fields__["large_object_chunk"].default
    server = start_minio()
    try:
        s3 = server.client(max_pool_connections=64)
        bucket = "getpaths"
        s3.create_bucket(Bucket=bucket)
        keys = [f"small/{i:06d}.log" for i in range(args.objects)]
        body = os.urandom(7 << 10)
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda key: s3.put_object(Bucket=bucket, Key=key, Body=body), keys))
        s3.upload_fileobj(__import__("io").BytesIO(os.urandom(args.large_mib << 20)), bucket, "large/one.bin")
        crt_meta_requests(server, bucket, keys[:500])  # warm MinIO and the imports before measuring
        print(f"{args.objects:,} objects of 7 KiB; {args.repeat} alternating runs each", flush=True)
        for n in (int(v) for v in args.in_flight.split(",")):
            report(f"small, {n:3} in flight:", compare(server, bucket, keys, args.repeat, in_flight=n))
        report(f"large, {chunk >> 20} MiB pieces, 8 in flight:",
               compare(server, bucket, ["large/one.bin"], args.repeat, in_flight=8, piece=chunk))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
