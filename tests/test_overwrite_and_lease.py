"""--overwrite and the prefix's lease: an overwrite never loses archived data, two runs of
one prefix at once give one archive, a stranger's lease is taken over only once it expired."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from faultproxy import Fault, is_get, wait_until
from helpers import ROOT, cli_archive_day, day_spec, engine_clients, keys_in, open_uploads, read_archive, run_cli
from s3arch.archive import archive_prefix
from s3arch.core.errors import ArchiverError


PROXY_SEED = 13  # the conftest proxy's random faults


def test_overwrite_refuses_a_shrunken_source_before_reading_any_object(s3, buckets, day, proxy, minio):
    src, dst = buckets
    archive_prefix(day_spec(src, dst), engine_clients(minio))
    s3.delete_object(Bucket=src, Key="day/0003.log")
    # counts the GETs of source objects, never fires
    gets = proxy.add(Fault("status", rate=0.0, match=lambda r: is_get(r) and r.key.startswith(f"{src}/")))
    with pytest.raises(ArchiverError, match="would lose archived data"):
        archive_prefix(day_spec(src, dst, overwrite=True), engine_clients(minio, proxy.endpoint_url))
    assert gets.seen == 0, f"{gets.seen} source objects were read before refusing"
    assert open_uploads(s3, dst) == [] and sorted(keys_in(s3, dst)) == sorted(
        [f"a/{src}/day.tar.gz", f"a/{src}/day.manifest.jsonl.gz", f"a/{src}/day.manifest-index.json.gz"])
def test_two_runs_of_one_prefix_at_once_give_one_archive_and_two_truthful_results(
        s3, buckets, day, proxy, cli_env, reliability):
    src, dst = buckets
    # The first run is held by the proxy as it writes its archive (a small one: one PUT); the
    # second starts meanwhile, directly.
    held = []
    proxy.add(Fault("stall", seconds=6, count=1, match=lambda r: r.method in ("PUT", "POST") and
                    r.key.endswith("day.tar.gz"), on_inject=held.append))
    first = subprocess.Popen([sys.executable, "-m", "s3arch", "archive", f"s3://{src}/day/", f"s3://{dst}/a/",
                              "--storage-class", "STANDARD", "--overwrite", "--json",
                              "--endpoint-url", proxy.endpoint_url], env=cli_env, cwd=ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert wait_until(lambda: held, 60), first.stderr.read().decode()
    second = cli_archive_day(cli_env, src, dst, "--overwrite")
    out, err = first.communicate(timeout=120)
    first_result = __import__("json").loads(out.decode().strip().splitlines()[-1])
    assert first.returncode == 0 and first_result["status"] == "archived", err.decode()
    assert second["status"] == "failed" and second["error"] == "ConcurrentRun" and second["retryable"]
    assert "another run holds this prefix" in second["message"]
    assert sorted(keys_in(s3, dst)) == [f"a/{src}/day.manifest-index.json.gz", f"a/{src}/day.manifest.jsonl.gz",
                                        f"a/{src}/day.tar.gz"]
    assert open_uploads(s3, dst) == []
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == day
    run_cli(cli_env, "verify", f"s3://{dst}/a/{src}/day.tar.gz")
    # The loser's retry, once the winner is done, tells the truth too.
    assert cli_archive_day(cli_env, src, dst, check=True)["status"] == "skipped"
    reliability.record("a second run of a prefix while the first uploads", "2 runs at once",
                       "one archive, one manifest, no upload left; the second exit 3 ConcurrentRun, "
                       "its retry skipped")


def test_lease_of_a_run_on_another_machine_is_taken_over_only_after_it_expires(s3, buckets, day, clients):
    import json

    src, dst = buckets
    lease_key = f"a/{src}/day.lease.json"
    stranger = {"owner": "x", "host": "another-worker", "boot_id": "b", "pid": 1, "pid_start": "1",
                "purpose": "archive of elsewhere"}
    s3.put_object(Bucket=dst, Key=lease_key, Body=json.dumps(stranger).encode())
    with pytest.raises(ArchiverError, match="another-worker") as err:
        archive_prefix(day_spec(src, dst, lease_ttl=3), clients)
    assert err.value.retryable and err.value.exit_code == 3
    time.sleep(4.5)  # no renewal for longer than the TTL, by S3's clock: the holder is gone
    assert archive_prefix(day_spec(src, dst, lease_ttl=3), clients).status == "archived"
    assert lease_key not in keys_in(s3, dst)
