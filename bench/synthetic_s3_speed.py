"""How fast the synthetic S3 endpoint (bench/synthetic_s3) answers, so that a bench reading from
it knows the source is not its bottleneck.

    .venv/bin/python -m bench.synthetic_s3_speed [--objects 10000000] [--gomaxprocs 1]
        [--threads 8] [--processes 2] [--gets 60000] [--list-pages 300]

Three phases against one server, each from plain keep-alive ``http.client`` connections (no
signing, no XML parsing beyond the keys):
- LIST latency: pages of 1,000 keys one after the other on one connection (median and p99 ms);
- LIST throughput: threads paginating from different places in the bucket (pages/s);
- GET throughput: ``--processes`` client processes of ``--threads`` connections each GETting
  keys the listing returned (GETs/s, MB/s).

Python clients cost more CPU per request than the server does, so on a small machine the
clients, not the server, set the rates above. Each phase therefore also records the server's own
CPU time (/proc) per request, and from it the rate one server core sustains:
``server_gets_per_core_s`` = GETs / server CPU-seconds. Prints a summary and writes
bench/results/synthetic-s3-speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from datetime import datetime, timezone

from bench.bench import RESULTS, proc_cpu_seconds
from bench.synthetic_source import SyntheticSource, list_page_body

KEY = re.compile(rb"<Key>([^<]*)</Key>")
TOKEN = re.compile(rb"<NextContinuationToken>([^<]*)</NextContinuationToken>")


def _list_page(connection, bucket: str, prefix: str, token: bytes | None = None,
               start_after: str | None = None) -> tuple[list[bytes], bytes | None]:
    body = list_page_body(connection, bucket, prefix, token, start_after)
    found = TOKEN.search(body)
    return KEY.findall(body), found.group(1) if found else None


def list_latency(source: SyntheticSource, pages: int) -> tuple[dict, list[str]]:
    """``pages`` pages in a row from the start of the bucket; also the keys they listed."""
    connection = source.connection()
    keys: list[bytes] = []
    times, token = [], None
    cpu_before = proc_cpu_seconds(source.pid)
    for _ in range(pages):
        started = time.perf_counter()
        page, token = _list_page(connection, source.bucket, source.prefix, token)
        times.append(time.perf_counter() - started)
        keys += page
        if token is None:
            break
    server_cpu = proc_cpu_seconds(source.pid) - cpu_before
    connection.close()
    times.sort()
    figures = {"pages": len(times), "keys_per_page": len(keys) // len(times),
               "page_ms_median": round(1000 * statistics.median(times), 2),
               "page_ms_p99": round(1000 * times[int(0.99 * (len(times) - 1))], 2),
               "server_cpu_ms_per_page": round(1000 * server_cpu / len(times), 3)}
    return figures, [k.decode() for k in keys]


def list_throughput(source: SyntheticSource, threads: int, seconds: float) -> dict:
    """Threads paginating from evenly spread StartAfter positions for ``seconds``."""
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def run(n: int) -> None:
        connection = source.connection()
        start_after = source.key(n * source.objects // threads)
        page, token = _list_page(connection, source.bucket, source.prefix, start_after=start_after)
        counts[n] += 1
        while time.monotonic() < stop:
            page, token = _list_page(connection, source.bucket, source.prefix, token=token)
            counts[n] += 1
            if token is None:  # the end of the bucket: start over
                page, token = _list_page(connection, source.bucket, source.prefix)
                counts[n] += 1
        connection.close()

    cpu_before, started = proc_cpu_seconds(source.pid), time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, range(threads)))
    wall = time.monotonic() - started
    server_cpu = proc_cpu_seconds(source.pid) - cpu_before
    pages = sum(counts)
    return {"threads": threads, "pages": pages, "pages_per_s": round(pages / wall),
            "keys_per_s": round(1000 * pages / wall),
            "server_cpu_ms_per_page": round(1000 * server_cpu / pages, 3),
            "server_pages_per_core_s": round(pages / server_cpu) if server_cpu else None}


def _get_keys(endpoint: tuple[str, int], bucket: str, keys: list[str], threads: int) -> tuple[int, int]:
    """GET every key (``threads`` keep-alive connections in this process); (GETs, bytes)."""
    import http.client
    from urllib.parse import quote

    total = [0, 0]
    lock = threading.Lock()
    shares = [keys[n::threads] for n in range(threads)]

    def run(share: list[str]) -> None:
        connection = http.client.HTTPConnection(*endpoint, timeout=30)
        got = size = 0
        for key in share:
            connection.request("GET", f"/{bucket}/{quote(key)}")
            response = connection.getresponse()
            size += len(response.read())
            if response.status != 200:
                raise RuntimeError(f"GET {key}: HTTP {response.status}")
            got += 1
        connection.close()
        with lock:
            total[0] += got
            total[1] += size

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(run, shares))
    return total[0], total[1]


def get_throughput(source: SyntheticSource, keys: list[str], gets: int, processes: int, threads: int) -> dict:
    host, _, port = source.endpoint_url.removeprefix("http://").rpartition(":")
    work = (keys * (gets // len(keys) + 1))[:gets]
    shares = [work[n::processes] for n in range(processes)]
    with ProcessPoolExecutor(processes) as pool:
        list(pool.map(_get_keys, [(host, int(port))] * processes, [source.bucket] * processes,
                      [shares[n][:50] for n in range(processes)], [1] * processes))  # warm the workers up
        cpu_before, started = proc_cpu_seconds(source.pid), time.monotonic()
        results = list(pool.map(_get_keys, [(host, int(port))] * processes, [source.bucket] * processes,
                                shares, [threads] * processes))
        wall = time.monotonic() - started
    server_cpu = proc_cpu_seconds(source.pid) - cpu_before
    done, size = sum(r[0] for r in results), sum(r[1] for r in results)
    return {"processes": processes, "threads_per_process": threads, "gets": done,
            "gets_per_s": round(done / wall), "mb_per_s": round(size / wall / 1e6, 1),
            "mean_object_bytes": round(size / done),
            "server_cpu_us_per_get": round(1e6 * server_cpu / done, 1),
            "server_gets_per_core_s": round(done / server_cpu) if server_cpu else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=10_000_000)
    parser.add_argument("--gomaxprocs", type=int, default=1, help="CPUs the server may use (default 1: per core)")
    parser.add_argument("--threads", type=int, default=8, help="connections per client process")
    parser.add_argument("--processes", type=int, default=max(1, (os.cpu_count() or 2)),
                        help="client processes for the GET phase (default: one per CPU)")
    parser.add_argument("--gets", type=int, default=60_000)
    parser.add_argument("--list-pages", type=int, default=300)
    parser.add_argument("--list-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)

    result: dict = {"when": datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ"), "cpus": os.cpu_count(),
                    "load_average_1min_at_start": round(os.getloadavg()[0], 1), "objects": args.objects,
                    "server_gomaxprocs": args.gomaxprocs}
    with SyntheticSource(objects=args.objects, gomaxprocs=args.gomaxprocs) as source:
        result["list_latency"], keys = list_latency(source, args.list_pages)
        print(f"LIST latency: {result['list_latency']}", flush=True)
        result["list_throughput"] = list_throughput(source, args.threads, args.list_seconds)
        print(f"LIST throughput: {result['list_throughput']}", flush=True)
        result["get_throughput"] = get_throughput(source, keys, args.gets, args.processes, args.threads)
        print(f"GET throughput: {result['get_throughput']}", flush=True)
    result["load_average_1min_at_end"] = round(os.getloadavg()[0], 1)
    g, lat = result["get_throughput"], result["list_latency"]
    print(f"\nsynthetic-s3 (GOMAXPROCS={args.gomaxprocs}, {args.objects:,} objects): "
          f"{g['gets_per_s']:,} GETs/s measured from Python ({g['mb_per_s']} MB/s), the server "
          f"{g['server_cpu_us_per_get']} us CPU per GET = {g['server_gets_per_core_s']:,} GETs/s per core; "
          f"LIST page of 1,000 {lat['page_ms_median']} ms median ({lat['server_cpu_ms_per_page']} ms server CPU), "
          f"{result['list_throughput']['pages_per_s']:,} pages/s", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "synthetic-s3-speed.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
