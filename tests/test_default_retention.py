"""A destination bucket with Object Lock and a default retention (issue 31).

Every object written there is locked by default, and a delete only adds a marker over a
locked version: the lease, the delete probe and a segmented run's temporaries would each stay
as a locked noncurrent version until the retention ends (COMPLIANCE: not even root may delete
them), a bill that grows with every run. The engine writes them under an explicit one-hour
GOVERNANCE retention and deletes them version by version with BypassGovernanceRetention:
afterwards only the archive, manifest and index of each prefix are left, locked.
"""

from __future__ import annotations

import time
import uuid

import pytest

from helpers import run_cli, run_json, seed

DAYS = ("logs/2026/11/03/", "logs/2026/11/04/")


@pytest.mark.slow
def test_only_archive_manifest_and_index_are_left_locked(minio, s3, cli_env):
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"src-{suffix}", f"locked-{suffix}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(Bucket=dst, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 1}}})
    objects = {f"{day}{i:03d}.log": (f"{day}{i}\n" * 100).encode() for day in DAYS for i in range(120)}
    seed(s3, src, objects)
    timings = {}
    began = time.monotonic()
    single = run_cli(cli_env, "archive", f"s3://{src}/{DAYS[0]}", f"s3://{dst}/", "--storage-class", "STANDARD",
                     "--delete-source", check=False)  # the delete probe too
    timings["single stream, --delete-source"] = (single.returncode, time.monotonic() - began)
    began = time.monotonic()
    segmented = run_cli(cli_env, "archive", f"s3://{src}/{DAYS[1]}", f"s3://{dst}/", "--storage-class", "STANDARD",
                        "--segments", "2", "--processes", "2", "--segment-min-objects", "1", check=False)
    timings["2 segments"] = (segmented.returncode, time.monotonic() - began)
    versions = s3.list_object_versions(Bucket=dst)
    left = sorted((v["Key"], s3.head_object(Bucket=dst, Key=v["Key"], VersionId=v["VersionId"]).get("ObjectLockMode"))
                  for v in versions.get("Versions", []))
    markers = sorted(m["Key"] for m in versions.get("DeleteMarkers", []))
    for name, (code, seconds) in timings.items():
        print(f"\ndefault retention, {name}: exit {code} in {seconds:.1f} s")
    print(f"versions left: {len(left)}, delete markers: {len(markers)}")
    for key, mode in left:
        print(f"  {mode or '-':10} {key}")
    assert single.returncode == 0, single.stderr.decode(errors="replace")
    assert segmented.returncode == 0, segmented.stderr.decode(errors="replace")
    wanted = sorted((f"{src}/{day.rstrip('/')}{suffix}", "COMPLIANCE") for day in DAYS
                    for suffix in (".tar.gz", ".manifest.jsonl.gz", ".manifest-index.json.gz"))
    assert markers == [] and left == wanted
    assert run_json(cli_env, "verify", f"s3://{dst}/{src}/{DAYS[1].rstrip('/')}.tar.gz")["status"] in ("ok", "verified")


def test_lease_renewals_leave_no_version_behind(minio, s3, clients):
    """Each renewal (every ttl/6, 30 s by default) is a new version of the lease: the previous
    one is deleted as soon as the new one is written, the last at release."""
    from s3arch.protocol.lease import PrefixLease

    dst = f"locked-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=dst, ObjectLockEnabledForBucket=True)
    s3.put_object_lock_configuration(Bucket=dst, ObjectLockConfiguration={
        "ObjectLockEnabled": "Enabled", "Rule": {"DefaultRetention": {"Mode": "COMPLIANCE", "Days": 1}}})
    lease = PrefixLease(clients.store, dst, "a/day.lease.json", purpose="test", ttl=60)
    lease.acquire()
    for _ in range(5):
        lease.renew()
    during = s3.list_object_versions(Bucket=dst).get("Versions", [])
    mode = s3.head_object(Bucket=dst, Key="a/day.lease.json")["ObjectLockMode"]
    lease.release()
    after = s3.list_object_versions(Bucket=dst)
    print(f"\nlease renewed 5 times: {len(during)} version(s) while held ({mode}), "
          f"{len(after.get('Versions', []))} versions and {len(after.get('DeleteMarkers', []))} markers after release")
    assert len(during) == 1 and mode == "GOVERNANCE"
    assert after.get("Versions", []) == [] and after.get("DeleteMarkers", []) == []
