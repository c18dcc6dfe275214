"""A source that scales without seeding: the synthetic S3 endpoint (bench/synthetic_s3, Go,
standard library only) serving a virtual bucket of N log-like objects computed from their
keys, for benches that archive days of millions of objects into MinIO.

    from bench.synthetic_source import SyntheticSource

    with SyntheticSource(objects=10_000_000, bucket="synthetic", prefix="day/") as source:
        source.endpoint_url        # http://127.0.0.1:NNNN, path-style, any credentials
        source.client()            # a boto3 client for it
        source.fetch(key)          # an object's bytes, by one plain GET

    # One endpoint for a source and a destination: the virtual bucket is served, every other
    # bucket's request is passed to MinIO unchanged (signatures stay valid), so
    # `s3arch archive s3://synthetic/day/ s3://archive/ --endpoint-url SOURCE` writes to MinIO.
    with SyntheticSource(objects=N, upstream=minio) as source:
        source.env()               # MinIO's credentials, the endpoint this server

The server is built with ``go build`` into .cache/bin/synthetic-s3 when missing or older than
its sources (``build``), started on a free loopback port (it prints the port it bound), and
stopped by PID with its process group on exit, on an error too (devtools/servers.py and
devtools/stopping.py, as MinIO is). Keys are ``{prefix}host-NNNN/app-NNNNNNNNN.log``, sorted by
index; bytes, sizes and ETags depend on the seed and the key only, so the same seed serves the
same bucket on every run and machine.
"""

from __future__ import annotations

import http.client
import os
import shutil
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

from devtools.servers import S3Server, ServerStartError, spawn_server, wait_healthy

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = ROOT / "bench" / "synthetic_s3"
BINARY_DIR = ROOT / ".cache" / "bin"
BINARY_NAME = "synthetic-s3"
GO_FALLBACK = Path("/usr/local/go/bin/go")


def go_binary() -> str:
    """The ``go`` command: on PATH, else the official install location."""
    found = shutil.which("go") or (str(GO_FALLBACK) if GO_FALLBACK.exists() else None)
    if not found:
        raise ServerStartError("the Go toolchain (>= 1.24) is needed to build bench/synthetic_s3: "
                               "install it (README.md, Prerequisites) or put `go` on PATH")
    return found


def build(binary_dir: Path | str = BINARY_DIR) -> Path:
    """The synthetic-s3 binary in ``binary_dir``, built first if missing or older than any of
    its sources. Concurrent builds (pytest-xdist workers) each write a file of their own and
    rename it into place, so none sees half a binary."""
    binary = Path(binary_dir) / BINARY_NAME
    sources = [*(path for path in SOURCE_DIR.glob("*.go") if not path.name.endswith("_test.go")), SOURCE_DIR / "go.mod"]
    newest_source = max(path.stat().st_mtime for path in sources)
    if binary.exists() and binary.stat().st_mtime >= newest_source:
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f".{BINARY_NAME}.{os.getpid()}")
    # GOTOOLCHAIN=local: never download another toolchain for go.mod's `go` line; no
    # dependencies, so no module download either.
    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-trimpath", GOWORK="off", CGO_ENABLED="0")
    proc = subprocess.run([go_binary(), "build", "-o", str(partial), "."], cwd=SOURCE_DIR, env=env,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise ServerStartError(f"go build of {SOURCE_DIR} failed:\n{proc.stderr.strip()}")
    os.replace(partial, binary)
    return binary


class SyntheticSource:
    """The synthetic S3 endpoint, running while the ``with`` block runs. The arguments are the
    server's flags (``synthetic-s3 --help``); ``server`` is the running ``S3Server`` (endpoint,
    credentials, ``client()``, ``env()``) once entered.

    ``upstream``: an S3 endpoint that every request not for the virtual bucket is passed to
    unchanged (``--upstream``): an ``S3Server`` (MinIO: its credentials and region are then
    this server's, so ``client()`` and ``env()`` sign for both) or a URL (then give
    ``credentials``, the upstream's access and secret key, unless it checks none)."""

    def __init__(self, objects: int = 1_000_000, bucket: str = "synthetic", prefix: str = "day/",
                 size_min: int = 2000, size_max: int = 12000, seed: int = 1, per_host: int = 10_000,
                 last_modified: str = "2026-11-02T00:00:00Z", region: str | None = None,
                 gomaxprocs: int | None = None, binary_dir: Path | str = BINARY_DIR, timeout: float = 30.0,
                 upstream: S3Server | str | None = None, credentials: tuple[str, str] | None = None):
        self.objects, self.bucket, self.prefix = objects, bucket, prefix
        self.size_min, self.size_max, self.seed, self.per_host = size_min, size_max, seed, per_host
        self.upstream_url = upstream.endpoint_url if isinstance(upstream, S3Server) else upstream
        if credentials is None:
            # Any credentials sign for the virtual bucket: it checks no signature.
            credentials = ((upstream.access_key, upstream.secret_key) if isinstance(upstream, S3Server)
                           else ("synthetic", "synthetic"))
        self.credentials = credentials
        if region is None:
            region = upstream.region if isinstance(upstream, S3Server) else "us-east-1"
        self.last_modified, self.region = last_modified, region
        self.gomaxprocs = gomaxprocs  # CPUs the server may use at once (Go's default: all)
        self.binary_dir, self.timeout = binary_dir, timeout
        self.server: S3Server | None = None

    def argv(self, binary: Path) -> list[str]:
        return [str(binary), "--listen", "127.0.0.1:0", "--bucket", self.bucket, "--prefix", self.prefix,
                "--objects", str(self.objects), "--per-host", str(self.per_host),
                "--size-min", str(self.size_min), "--size-max", str(self.size_max), "--seed", str(self.seed),
                "--last-modified", self.last_modified, "--region", self.region,
                *(["--upstream", self.upstream_url] if self.upstream_url else [])]

    def start(self) -> S3Server:
        binary = build(self.binary_dir)
        workdir = Path(tempfile.mkdtemp(prefix="s3arch-synthetic-s3-"))
        env = {"PATH": os.environ.get("PATH", "")}
        if self.gomaxprocs:
            env["GOMAXPROCS"] = str(self.gomaxprocs)
        process, log_path, log_file = spawn_server("synthetic-s3", self.argv(binary), env, workdir)
        self.server = S3Server("synthetic S3", "", *self.credentials, region=self.region, process=process,
                               workdir=workdir, log_path=log_path, _log_file=log_file)
        try:
            self.server.endpoint_url = f"http://{self._bound_address(process, log_path)}"
            wait_healthy(self.server, f"{self.endpoint_url}/{urllib.parse.quote(self.bucket)}?list-type=2&max-keys=1",
                          self.timeout)
        except BaseException:  # a start that failed or was interrupted leaves nothing running
            self.server.stop()
            raise
        return self.server

    def _bound_address(self, process: subprocess.Popen, log_path: Path) -> str:
        """host:port from the server's first line, ``listening on 127.0.0.1:NNNN``."""
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            first = log_path.read_text(errors="replace").partition("\n")
            if first[1]:  # the whole first line is there
                if first[0].startswith("listening on "):
                    return first[0].removeprefix("listening on ").strip()
                break
            if process.poll() is not None:
                break
            time.sleep(0.02)
        assert self.server is not None
        code = process.poll()
        what = f"exited with code {code}" if code is not None else f"did not report it within {self.timeout:.0f}s"
        raise ServerStartError(f"synthetic-s3 {what} before its address line. Its log:\n{self.server.log_tail()}")

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()

    def __enter__(self) -> "SyntheticSource":
        self.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()

    def key(self, index: int) -> str:
        """The key of object ``index`` (0 <= index < objects), as objects.go's appendKey writes
        it: both numbers zero-padded (at least 4 and 9 digits), so keys sort as indexes do."""
        host_width = max(4, len(str(max(self.objects - 1, 0) // self.per_host)))
        index_width = max(9, len(str(max(self.objects - 1, 0))))
        return f"{self.prefix}host-{index // self.per_host:0{host_width}d}/app-{index:0{index_width}d}.log"

    @property
    def endpoint_url(self) -> str:
        if self.server is None:
            raise RuntimeError("SyntheticSource is not started")
        return self.server.endpoint_url

    @property
    def pid(self) -> int:
        return self.server.pid if self.server else -1

    def client(self, **config):
        """A boto3 S3 client for the endpoint (path-style)."""
        assert self.server is not None
        return self.server.client(**config)

    def env(self) -> dict[str, str]:
        """Environment pointing the AWS SDKs (and `python -m s3arch`) at the endpoint."""
        assert self.server is not None
        return self.server.env()

    def fetch(self, key: str, connection: http.client.HTTPConnection | None = None) -> bytes:
        """The bytes the endpoint serves for ``key``, by one plain unsigned GET (a connection
        of the caller's is reused; else one is opened for this GET). KeyError if it has no
        such key."""
        own = connection is None
        if connection is None:
            connection = self.connection()
        try:
            connection.request("GET", f"/{urllib.parse.quote(self.bucket)}/{urllib.parse.quote(key)}")
            response = connection.getresponse()
            body = response.read()
        finally:
            if own:
                connection.close()
        if response.status == 404:
            raise KeyError(key)
        if response.status != 200:
            raise RuntimeError(f"GET {key}: HTTP {response.status}: {body[:300]!r}")
        return body

    def connection(self) -> http.client.HTTPConnection:
        """A keep-alive connection to the endpoint, for ``fetch`` in a loop."""
        netloc = urllib.parse.urlsplit(self.endpoint_url).netloc
        host, _, port = netloc.rpartition(":")
        return http.client.HTTPConnection(host, int(port), timeout=30)


def list_page_body(connection, bucket: str, prefix: str, token: str | bytes | None = None,
                   start_after: str | None = None) -> bytes:
    """One ListObjectsV2 page of 1,000 keys, its XML as sent, over a plain ``http.client``
    connection (the benches read pages without boto3's parsing cost)."""
    from urllib.parse import quote

    query = f"list-type=2&max-keys=1000&prefix={quote(prefix)}"
    if token:
        query += f"&continuation-token={quote(token)}"
    if start_after:
        query += f"&start-after={quote(start_after)}"
    connection.request("GET", f"/{bucket}?{query}")
    response = connection.getresponse()
    body = response.read()
    if response.status != 200:
        raise RuntimeError(f"LIST: HTTP {response.status}: {body[:300]!r}")
    return body
