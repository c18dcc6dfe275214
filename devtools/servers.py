"""Real S3 servers on loopback for development, the demo and the test suite.

MinIO is the everyday S3 (built from the Go module proxy at a pinned version, see
``make minio``); moto server is the second S3, for what MinIO cannot show (Glacier storage
classes, RestoreObject, InvalidObjectState). Each server runs on a free loopback port with
generated credentials and a throwaway data dir, is checked healthy before it is handed
out, and is stopped by PID.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from devtools.stopping import spawn, stop_processes

ROOT = Path(__file__).resolve().parent.parent
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
MINIO_BIN = Path(os.environ.get("MINIO_BIN", ROOT / ".cache" / "bin" / "minio"))
# devtools/build_minio.sh holds this lock while it builds, and `make demo`'s background build logs here.
MINIO_BUILD_LOCK = MINIO_BIN.parent / ".minio-build.lock"
MINIO_BUILD_LOG = MINIO_BIN.parent.parent / "minio-build.log"


def minio_build_state() -> str:
    """``built``, ``building`` (devtools/build_minio.sh holds its lock: `make demo`'s background
    build, or a `make minio`) or ``absent`` (never started, or it failed: its log says which)."""
    if MINIO_BIN.exists():
        return "built"
    try:
        with open(MINIO_BUILD_LOCK, "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except FileNotFoundError:
        return "absent"
    except BlockingIOError:
        # the build may have finished between the two looks
        return "built" if MINIO_BIN.exists() else "building"
    return "built" if MINIO_BIN.exists() else "absent"


class ServerStartError(RuntimeError):
    """A test server did not come up; the message says why and what to do."""


def stop_process(process: subprocess.Popen | None, grace: float = 10.0) -> None:
    """SIGTERM a server we started (its process group and descendants), SIGKILL what is
    left after ``grace`` seconds (devtools/stopping.py)."""
    stop_processes([process], grace=grace)


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    """A running S3-compatible server: where it listens and how to sign for it."""

    name: str
    endpoint_url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    process: subprocess.Popen | None = None
    workdir: Path | None = None
    log_path: Path | None = None
    console_url: str | None = None
    _log_file: object = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid if self.process else -1

    def env(self) -> dict[str, str]:
        """Environment that points the AWS SDKs (and so `python -m s3arch`) at this server."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL_S3": self.endpoint_url,
        }

    def client(self, **config):
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint_url,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(s3={"addressing_style": "path"}, **config),
        )

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path or not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        stop_process(self.process)
        if self._log_file:
            self._log_file.close()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def wait_healthy(server: S3Server, url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise ServerStartError(
                f"{server.name} exited with code {server.process.returncode} before it was "
                f"healthy. Its log ends with:\n{server.log_tail()}"
            )
        try:
            # An HTTPS server's own CA is the caller's to trust; health is all that is asked here.
            context = ssl._create_unverified_context() if url.startswith("https:") else None
            with urllib.request.urlopen(url, timeout=2, context=context) as resp:
                if resp.status < 500:
                    return
        except urllib.error.HTTPError as e:
            if e.code < 500:
                return
            last_error = f"HTTP {e.code}"
        except OSError as e:
            last_error = str(e)
        time.sleep(0.1)
    server.stop()
    raise ServerStartError(
        f"{server.name} did not answer {url} within {timeout:.0f}s (last: {last_error}). "
        f"Log:\n{server.log_tail()}"
    )


# Where throwaway files go: tmpfs when it has room. On the ext4 (mounted with discard) of the
# machine make test runs on, deleting cost about 2 ms a file: a MinIO data dir of 10,000
# objects took 45 s (the session MinIO's is deleted at the end of the suite), 1.4 s on /dev/shm.
SHM = Path("/dev/shm")
SHM_MIN_FREE = 4 << 30


def scratch_root() -> str | None:
    """/dev/shm when it is writable with 4 GiB free, else None (tempfile's default): the
    ``dir`` for ``tempfile.mkdtemp`` of a throwaway tree of many files."""
    try:
        stat = os.statvfs(SHM)
    except OSError:
        return None
    roomy = stat.f_bavail * stat.f_frsize >= SHM_MIN_FREE
    return str(SHM) if roomy and os.access(SHM, os.W_OK | os.X_OK) else None


def spawn_server(name: str, argv: list[str], env: dict[str, str], workdir: Path) -> tuple:
    log_path = workdir / f"{name}.log"
    log_file = open(log_path, "wb")
    process = spawn(argv, env=env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return process, log_path, log_file


def start_minio(console: bool = False, timeout: float = 60.0, data_dir: Path | None = None,
                access_key: str | None = None, secret_key: str | None = None,
                region: str = "us-east-1", kms_key_id: str | None = None,
                certs_dir: Path | None = None) -> S3Server:
    """Start the pinned MinIO build on a free loopback port.

    By default the data dir is throwaway and the credentials random; the benchmark passes a
    ``data_dir`` (kept on stop) and fixed credentials so its seeded data sets survive runs.
    ``kms_key_id`` turns on MinIO's built-in single-key KMS, so SSE-KMS works under that id.
    ``certs_dir`` (holding ``public.crt`` and ``private.key``) serves HTTPS with that certificate.
    """
    if not MINIO_BIN.exists():
        if minio_build_state() == "building":
            raise ServerStartError(
                f"MinIO is still building in the background (log: {MINIO_BUILD_LOG}): "
                f"`make minio` waits for it.")
        raise ServerStartError(
            f"MinIO binary not found at {MINIO_BIN}. Build it with `make minio` "
            f"(go install github.com/minio/minio@{MINIO_VERSION}, about 2 minutes)."
        )
    workdir = Path(tempfile.mkdtemp(prefix="s3arch-minio-", dir=scratch_root()))
    data_dir = data_dir or workdir / "data"
    port = free_loopback_port()
    access_key = access_key or "minio-" + secrets.token_hex(4)
    secret_key = secret_key or secrets.token_hex(20)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(workdir),
        "MINIO_ROOT_USER": access_key,
        "MINIO_ROOT_PASSWORD": secret_key,
        "MINIO_BROWSER": "on" if console else "off",
        "MINIO_UPDATE": "off",
        "MINIO_API_REQUESTS_MAX": "10000",
        "MINIO_SITE_REGION": region,
    }
    if kms_key_id:
        import base64

        env["MINIO_KMS_SECRET_KEY"] = f"{kms_key_id}:{base64.b64encode(secrets.token_bytes(32)).decode()}"
    argv = [str(MINIO_BIN), "server", str(data_dir), "--quiet",
            "--address", f"127.0.0.1:{port}"]
    scheme = "http"
    if certs_dir is not None:
        argv += ["--certs-dir", str(certs_dir)]
        scheme = "https"
    console_url = None
    if console:
        console_port = free_loopback_port()
        argv += ["--console-address", f"127.0.0.1:{console_port}"]
        console_url = f"http://127.0.0.1:{console_port}"
    process, log_path, log_file = spawn_server("minio", argv, env, workdir)
    server = S3Server("MinIO", f"{scheme}://127.0.0.1:{port}", access_key, secret_key, region=region,
                      process=process, workdir=workdir, log_path=log_path,
                      console_url=console_url, _log_file=log_file)
    # /minio/health/live answers before the object layer, bucket metadata and IAM are up (a
    # CreateBucket then fails with XMinioServerNotInitialized); /minio/health/cluster waits for all three.
    wait_healthy(server, f"{server.endpoint_url}/minio/health/cluster", timeout)
    return server


def start_moto(timeout: float = 60.0) -> S3Server:
    """Start moto server (S3 with Glacier semantics) on a free loopback port."""
    workdir = Path(tempfile.mkdtemp(prefix="s3arch-moto-"))
    port = free_loopback_port()
    env = dict(os.environ, HOME=str(workdir))
    argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    process, log_path, log_file = spawn_server("moto", argv, env, workdir)
    server = S3Server("moto server", f"http://127.0.0.1:{port}", "testing", "testing",
                      process=process, workdir=workdir, log_path=log_path, _log_file=log_file)
    wait_healthy(server, f"{server.endpoint_url}/moto-api/", timeout)
    return server
