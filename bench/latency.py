"""Real S3 round trips on loopback: Shopify's toxiproxy between the client and MinIO.

Loopback MinIO answers a small GET in well under a millisecond; S3 in tens of milliseconds.
toxiproxy (built from the Go module proxy at a pinned version, ``make bench-tools``) is a TCP
proxy whose ``latency`` toxic holds every chunk the server sends for ``ms`` ± ``jitter``:
SigV4 passes through unchanged, so any S3 client can be pointed at it. It runs on loopback
and is stopped by PID.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from devtools.servers import ROOT, ServerStartError, free_loopback_port, stop_process

TOXIPROXY = ROOT / ".cache" / "bin" / "toxiproxy-server"


class LatencyProxy:
    """One toxiproxy server with one proxy in front of ``upstream`` (host:port)."""

    def __init__(self, upstream: str):
        if not TOXIPROXY.exists():
            raise ServerStartError(f"{TOXIPROXY} is missing: run `make bench-tools`")
        self.api_port, self.port = free_loopback_port(), free_loopback_port()
        self._log = tempfile.NamedTemporaryFile(prefix="toxiproxy-", suffix=".log", delete=False)
        self.process = subprocess.Popen([str(TOXIPROXY), "-host", "127.0.0.1", "-port", str(self.api_port)],
                                        stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            try:
                self._call("GET", "/version")
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise ServerStartError(f"toxiproxy did not start; log: {Path(self._log.name).read_text()[-1000:]}")
                time.sleep(0.1)
        self._call("POST", "/proxies", {"name": "s3", "listen": f"127.0.0.1:{self.port}",
                                        "upstream": upstream, "enabled": True})

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(f"http://127.0.0.1:{self.api_port}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.read()

    def set_latency(self, ms: int, jitter: int = 0) -> None:
        """Delay every response chunk by ``ms`` ± ``jitter`` (0 removes the delay)."""
        try:
            self._call("DELETE", "/proxies/s3/toxics/latency")
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        if ms:
            self._call("POST", "/proxies/s3/toxics", {
                "name": "latency", "type": "latency", "stream": "downstream", "toxicity": 1.0,
                "attributes": {"latency": ms, "jitter": jitter}})

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)
