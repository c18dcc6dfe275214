"""Temporary credentials that rotate under a segmented run (issue 31).

The CLI runs on a profile whose credential_process hands out new MinIO STS keys, which botocore
refreshes LIFETIME seconds after each issue (tests/rotating_credentials.py); the fault proxy in
front of MinIO answers 400 ExpiredToken, as S3 does, to every request signed more than EXPIRES
seconds after its access key's first signature. GETs pass the proxy one at a time, slowly, so each
segment lives several keys long. Before: each worker signed with a frozen copy of the parent's
keys, failed with ExpiredToken, was started again from zero three times, and the prefix failed.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from datetime import datetime

import pytest

from faultproxy import Fault, is_get, is_upload_part
from helpers import ROOT, open_uploads, read_archive, run_cli, seed


pytestmark = pytest.mark.slow  # a segmented run outliving many short-lived keys


PREFIX = "logs/2026/11/02/"
LIFETIME = 3.0  # seconds after its issue that botocore refreshes a key
EXPIRES = 4.0  # seconds after its first signature that the proxy answers ExpiredToken for a key


def test_segmented_prefix_outlives_many_rotating_keys(minio, s3, buckets, tmp_path, reliability, proxy):
    src, dst = buckets
    objects = {f"{PREFIX}{part}/{i:03d}.log": (f"{part}{i}\n" * 400).encode() for part in "ab" for i in range(90)}
    seed(s3, src, objects)
    issued_log = tmp_path / "issued.log"
    config = tmp_path / "config"
    config.write_text(
        "[profile rotating]\n"
        f"region = {minio.region}\n"
        f"credential_process = {sys.executable} {ROOT / 'tests' / 'rotating_credentials.py'} {minio.endpoint_url} "
        f"{minio.access_key} {minio.secret_key} {minio.region} {LIFETIME} {issued_log}\n")
    first_signed: dict[str, float] = {}
    lock = threading.Lock()

    def expired(request) -> bool:
        """Signed (x-amz-date) more than EXPIRES seconds after the key's first signature: GETs
        wait here in line, so the time they arrive is not the time they were signed."""
        found = re.search(r"Credential=([^/]+)/", request.headers.get("authorization", ""))
        if not found or "x-amz-date" not in request.headers:
            return False
        signed = datetime.strptime(request.headers["x-amz-date"], "%Y%m%dT%H%M%SZ").timestamp()
        with lock:
            born = first_signed[found.group(1)] = min(first_signed.get(found.group(1), signed), signed)
        return signed - born > EXPIRES

    rejected = proxy.add(Fault("status", status=400, code="ExpiredToken", match=expired))
    # And a token that S3 calls expired before botocore does (a revoked session, a clock
    # off): two GETs (CRT plane) and a part upload (boto3) answered ExpiredToken once each.
    early = [proxy.add(Fault("status", status=400, code="ExpiredToken", count=2, after=30, match=is_get)),
             proxy.add(Fault("status", status=400, code="ExpiredToken", count=1, match=is_upload_part))]
    # One GET at a time through the proxy, 60 ms each: a segment of 90 objects lives
    # longer than a key's EXPIRES.
    proxy.add(Fault("stall", seconds=0, match=is_get, on_inject=lambda r: time.sleep(0.06)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYTHONPATH=str(ROOT), AWS_CONFIG_FILE=str(config), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
               AWS_PROFILE="rotating", AWS_ENDPOINT_URL_S3=proxy.endpoint_url)
    began = time.monotonic()
    proc = run_cli(env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/", "--storage-class", "STANDARD",
                   "--segments", "2", "--processes", "2", "--segment-min-objects", "1", check=False)
    seconds = time.monotonic() - began
    keys = issued_log.read_text().split("\n") if issued_log.exists() else []
    message = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
    print(f"\nrotating credentials, 2 segments: exit {proc.returncode} in {seconds:.1f} s, "
          f"{len([k for k in keys if k])} keys issued, {rejected.injected} ExpiredToken answers for old keys, "
          f"{sum(f.injected for f in early)} early ones; {message[0]}")
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    assert seconds > 2 * EXPIRES and len([k for k in keys if k]) >= 3, "no segment outlived a key: proves nothing"
    assert [f.injected for f in early] == [2, 1]
    assert read_archive(s3, dst, f"{src}/{PREFIX.rstrip('/')}.tar.gz") == objects
    assert open_uploads(s3, dst) == []
    reliability.record("temporary credentials rotating under a segmented run (ExpiredToken for old keys)",
                       f"keys refreshed every {LIFETIME:.0f} s, 400 ExpiredToken {EXPIRES:.0f} s after a key's first "
                       "signature, 3 more ExpiredToken answers; 2 segments outliving several keys",
                       "workers sign with the parent's refreshed keys, ExpiredToken retried; archive green")
