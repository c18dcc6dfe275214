"""Client CPU per small GET on three data planes, side by side in one process: the CRT S3
client's meta-requests (what the archiver uses), obstore (Rust's object_store, on tokio and
reqwest) and boto3's get_object. Each fetches the same objects, the same number at once;
the figure is the process's CPU time (every thread, the clients' own included) per object."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

IN_FLIGHT = 32


def crt_meta_requests(server, bucket: str, keys: list[str]) -> int:
    import boto3

    from s3arch.s3 import S3Clients

    clients = S3Clients.from_session(boto3.Session(aws_access_key_id=server.access_key,
                                                   aws_secret_access_key=server.secret_key,
                                                   region_name=server.region), endpoint_url=server.endpoint_url)
    plane = clients.data_for(bucket, concurrency=IN_FLIGHT)
    got = [0]
    slots = threading.Semaphore(IN_FLIGHT)
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
        for key in keys:
            slots.acquire()
            plane.get(key, etag=None, byte_range=None, on_body=on_body, on_done=on_done)
        for _ in keys:
            finished.acquire()

    return _timed(run, got, errors)


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


PATHS = {"crt_meta_request": crt_meta_requests, "obstore": obstore_gets, "boto3": boto3_gets}
