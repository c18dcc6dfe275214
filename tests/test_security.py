"""Security and compliance against a real MinIO: archives under Object Lock, the expected
bucket owner on every request, the IAM policies of docs/SECURITY.md as MinIO users, and KMS.

The policies are read from docs/SECURITY.md itself, so the page and the tests cannot drift.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime, timedelta, timezone

import boto3
import pytest

from faultproxy import Fault
from helpers import (as_user, engine_clients, keys_in, minio_user, open_uploads, policy, role_clients, run_cli,
                     run_json, seed, user_client)


pytestmark = pytest.mark.slow  # Object Lock, IAM roles and KMS: a MinIO of its own and many CLI runs


PREFIX = "logs/2026/11/21/"


@pytest.fixture
def lockable(minio):
    """A source with a day of logs and an Object Lock destination."""
    s3 = minio.client()
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"sec-src-{suffix}", f"sec-lock-{suffix}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst, ObjectLockEnabledForBucket=True)
    seed(s3, src, {f"{PREFIX}{i:02d}.log": b"line %d\n" % i * 40 for i in range(30)})
    return s3, src, dst


def source_with_one_object(server, tag: str) -> tuple:
    """(client, source, destination): two fresh buckets on ``server``, one object in the source."""
    s3 = server.client()
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"{tag}-src-{suffix}", f"{tag}-dst-{suffix}"
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket)
    seed(s3, src, {f"{PREFIX}a.log": b"a"})
    return s3, src, dst


def _denied(proc) -> str:
    message = proc.stderr.decode()
    assert proc.returncode == 2, message
    assert "Traceback" not in message
    return message


# --- Object Lock ----------------------------------------------------------------------------


def test_archive_committed_under_governance_lock_survives_delete_bypass_and_overwrite(lockable, minio, cli_env,
                                                                                      tmp_path):
    s3, src, dst = lockable
    manifest = f"s3://{dst}/vault/{src}/logs/2026/11/21.manifest.jsonl.gz"
    result = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class",
                      "STANDARD", "--object-lock", "GOVERNANCE", "--retain-days", "2")
    retention = result["retention"]
    assert retention["mode"] == "GOVERNANCE" and retention["applied"] == "on creation"
    until = datetime.fromisoformat(retention["retain_until"])
    assert timedelta(days=1, hours=23) < until - datetime.now(timezone.utc) <= timedelta(days=2)
    stem = f"vault/{src}/logs/2026/11/21"
    for suffix in (".tar.gz", ".manifest.jsonl.gz", ".manifest-index.json.gz"):
        head = s3.head_object(Bucket=dst, Key=stem + suffix)
        assert head["ObjectLockMode"] == "GOVERNANCE", suffix
    assert not [k for k in keys_in(s3, dst) if k.endswith(".lease.json")]

    # A principal allowed everything but bypassing governance cannot remove the archive.
    user, secret = minio_user(minio, [{"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]},
                                      {"Effect": "Deny", "Action": ["s3:BypassGovernanceRetention"],
                                       "Resource": ["arn:aws:s3:::*"]}])
    other = user_client(minio, user, secret)
    version = s3.head_object(Bucket=dst, Key=stem + ".tar.gz")["VersionId"]
    for bypass in (False, True):
        with pytest.raises(other.exceptions.ClientError):
            other.delete_object(Bucket=dst, Key=stem + ".tar.gz", VersionId=version,
                                **({"BypassGovernanceRetention": True} if bypass else {}))
    assert s3.head_object(Bucket=dst, Key=stem + ".tar.gz", VersionId=version)["ContentLength"] > 0

    refused = run_cli(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class",
                      "STANDARD", "--overwrite", "--json", check=False)
    assert refused.returncode == 2
    message = json.loads(refused.stdout.decode().splitlines()[-1])["message"]
    assert "GOVERNANCE retention until" in message and retention["retain_until"][:10] in message

    again = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD")
    assert again["status"] == "skipped" and again["retention"]["mode"] == "GOVERNANCE"
    assert run_json(cli_env, "verify", manifest)["objects"] == 30
    out = tmp_path / "out"
    assert run_json(cli_env, "extract", manifest, "--to-dir", str(out))["objects"] == 30
    assert (out / "07.log").read_bytes() == b"line 7\n" * 40


def test_legal_hold_and_compliance_are_applied_to_archive_manifest_and_index(lockable, cli_env):
    s3, src, dst = lockable
    result = run_json(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/held/", "--storage-class",
                      "STANDARD", "--object-lock", "COMPLIANCE", "--retain-days", "1", "--legal-hold")
    assert result["retention"]["mode"] == "COMPLIANCE" and result["retention"]["legal_hold"] == "ON"
    for suffix in (".tar.gz", ".manifest.jsonl.gz", ".manifest-index.json.gz"):
        head = s3.head_object(Bucket=dst, Key=f"held/{src}/logs/2026/11/21{suffix}")
        assert head["ObjectLockMode"] == "COMPLIANCE" and head["ObjectLockLegalHoldStatus"] == "ON", suffix
    text = run_cli(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/held2/", "--storage-class", "STANDARD",
                   "--legal-hold").stdout.decode()
    assert "[locked: legal hold]" in text


def test_object_lock_on_a_bucket_without_it_is_refused_before_any_get(minio, cli_env, proxy):
    s3, src, dst = source_with_one_object(minio, "nl")
    gets = proxy.add(Fault("status", rate=0.0, match=lambda r: r.method == "GET" and r.key.startswith(src)))
    proc = run_cli({**cli_env, "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}, "archive", f"s3://{src}/{PREFIX}",
                   f"s3://{dst}/v/", "--storage-class", "STANDARD", "--object-lock", "COMPLIANCE",
                   "--retain-days", "30", check=False)
    message = _denied(proc)
    assert "does not have Object Lock enabled" in message and "--object-lock-enabled-for-bucket" in message
    assert gets.seen == 0 and keys_in(s3, dst) == [] and open_uploads(s3, dst) == []
    assert _denied(run_cli(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/v/", "--retain-days", "3",
                           check=False))


# --- The expected bucket owner ----------------------------------------------------------------


def test_expected_owner_goes_out_on_every_request_of_both_planes(minio, buckets, s3, proxy):
    from s3arch.archive import archive_prefix
    from s3arch.core.config import ArchiveSpec, S3Url

    src, dst = buckets
    seed(s3, src, {f"{PREFIX}{i}.log": b"x" * (i + 1) for i in range(20)})
    s3.put_object(Bucket=src, Key=f"{PREFIX}tagged.log", Body=b"t", Tagging="a=b")
    s3.put_object(Bucket=src, Key=f"{PREFIX}big.bin", Body=b"b" * (9 << 20))  # ranged GETs and a HEAD
    seen: list = []
    proxy.add(Fault("status", rate=0.0, match=lambda r: seen.append(r) or False))
    result = archive_prefix(ArchiveSpec(S3Url(src, PREFIX), S3Url(dst, "v/"), storage_class="STANDARD",
                                        expected_owner="111122223333", delete_source=True),
                            engine_clients(minio, proxy.endpoint_url, expected_owner="111122223333"))
    assert result.status == "archived" and result.deleted == 22
    kinds = {(r.method, "tagging" in r.query, "Range" in r.headers or "range" in r.headers) for r in seen}
    assert ("GET", True, False) in kinds and ("GET", False, True) in kinds  # tag reads and ranged GETs were seen
    missing = [f"{r.method} {r.path}?{'&'.join(r.query)}" for r in seen
               if r.headers.get("x-amz-expected-bucket-owner") != "111122223333"]
    assert missing == [], f"{len(missing)} of {len(seen)} requests lack the header: {missing[:5]}"


@pytest.mark.parametrize("built_with", [None, "999988887777"])
def test_clients_built_without_the_specs_owner_are_refused_before_any_request(built_with):
    """The owner is set where the clients are built (S3Clients.from_session): a run whose spec
    names one and whose clients name none (or another) stops, rather than send requests
    without the header."""
    from s3arch.archive import archive_prefix, archive_segment
    from s3arch.core.config import ArchiveSpec, S3Url
    from s3arch.core.errors import BadArgument
    from s3arch.io.s3 import S3Clients

    # Nothing listens on port 9: a request sent would fail as a connection error, not BadArgument.
    session = boto3.Session(aws_access_key_id="k", aws_secret_access_key="s", region_name="us-east-1")
    clients = S3Clients.from_session(session, "http://127.0.0.1:9", expected_owner=built_with)
    spec = ArchiveSpec(S3Url("src", PREFIX), S3Url("dst", "v/"), expected_owner="111122223333")
    for run in (lambda: archive_prefix(spec, clients), lambda: archive_segment(spec, 0, clients)):
        with pytest.raises(BadArgument, match="expects its buckets owned by 111122223333"):
            run()


def test_bucket_owned_by_another_account_is_a_clear_exit_2_and_nothing_is_written(minio, buckets, s3, cli_env, proxy):
    src, dst = buckets
    seed(s3, src, {f"{PREFIX}a.log": b"a"})
    # What S3 answers when ExpectedBucketOwner names another account than the bucket's.
    proxy.add(Fault("status", status=403, code="AccessDenied",
                    match=lambda r: r.headers.get("x-amz-expected-bucket-owner", "111122223333") != "111122223333"))
    env = {**cli_env, "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}
    args = ("archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/v/", "--storage-class", "STANDARD")
    started = time.monotonic()
    proc = run_cli(env, *args, "--expected-owner", "999988887777", check=False)
    took = time.monotonic() - started
    message = _denied(proc)
    assert "not owned by account 999988887777" in message and took < 15
    assert keys_in(s3, dst) == [] and open_uploads(s3, dst) == []
    assert run_json(env, *args, "--expected-owner", "111122223333")["status"] == "archived"
    manifest = f"s3://{dst}/v/{src}/logs/2026/11/21.manifest.jsonl.gz"
    assert _denied(run_cli(env, "ls", manifest, "--expected-owner", "999988887777", check=False))


# --- Least privilege: the policies of docs/SECURITY.md as MinIO users --------------------------


@pytest.fixture
def roles(minio, cli_env):
    s3 = minio.client()
    suffix = uuid.uuid4().hex[:8]
    src, dst, back = f"r-src-{suffix}", f"r-vault-{suffix}", f"r-back-{suffix}"
    for bucket in (src, dst, back):
        s3.create_bucket(Bucket=bucket)
    for day in ("20", "21"):
        seed(s3, src, {f"logs/2026/11/{day}/{i:02d}.log": b"entry %d\n" % i * 30 for i in range(12)})
    s3.put_object(Bucket=src, Key="logs/2026/11/21/tagged.log", Body=b"t", Tagging="team=ops")
    names = dict(SOURCE_BUCKET=src, SOURCE_PREFIX="logs/", ARCHIVE_BUCKET=dst, ARCHIVE_PREFIX="archive/", RESTORE_BUCKET=back,
                 RESTORE_PREFIX="day/")
    users = {
        "archive": minio_user(minio, policy("archive", **names)),
        "archive-delete": minio_user(minio, policy("archive", **names) + policy("archive-delete-extra", **names)),
        "restore": minio_user(minio, policy("restore", **names)),
    }
    return s3, src, dst, back, {role: as_user(cli_env, *creds) for role, creds in users.items()}


def test_each_role_can_do_its_commands_and_nothing_else(roles):
    s3, src, dst, back, env = roles
    day20, day21 = (f"s3://{src}/logs/2026/11/{d}/" for d in ("20", "21"))
    vault = f"s3://{dst}/archive/"
    manifest = f"s3://{dst}/archive/{src}/logs/2026/11/21.manifest.jsonl.gz"
    standard = ("--storage-class", "STANDARD")

    # Archive role: archives, re-runs, and a segmented run; no deletion of any kind.
    assert run_json(env["archive"], "archive", day21, vault, *standard)["status"] == "archived"
    assert run_json(env["archive"], "archive", day21, vault, *standard)["status"] == "skipped"
    assert run_json(env["archive"], "archive", day20, vault, *standard, "--segments", "2", "--processes", "1",
                    "--segment-min-objects", "1")["segments"] == 2
    assert "access denied" in _denied(run_cli(env["archive"], "archive", day21, vault, *standard, "--delete-source",
                                              check=False)).lower()
    assert _denied(run_cli(env["archive"], "archive", day21, vault, *standard, "--overwrite", check=False))
    assert _denied(run_cli(env["archive"], "archive", day21, f"s3://{back}/x/", *standard, check=False))
    archive_user = user_client_from_env(env["archive"], s3)
    with pytest.raises(archive_user.exceptions.ClientError, match="AccessDenied"):
        archive_user.delete_object(Bucket=dst, Key=f"archive/{src}/logs/2026/11/21.tar.gz")
    assert len(keys_in(s3, src, "logs/2026/11/21/")) == 13  # nothing deleted by any of it

    # Archive role with deletion: finishes the deletion the plain role could not.
    deleted = run_json(env["archive-delete"], "archive", day21, vault, *standard, "--delete-source")
    assert deleted["deleted"] == 13 and keys_in(s3, src, "logs/2026/11/21/") == []

    # Restore role: reads and extracts (tags included) into the restore bucket only.
    assert "team=ops" in run_cli(env["restore"], "ls", "--long", manifest).stdout.decode()
    assert run_json(env["restore"], "verify", manifest)["objects"] == 13
    assert run_json(env["restore"], "extract", manifest, "--to", f"s3://{back}/day/")["objects"] == 13
    assert s3.get_object_tagging(Bucket=back, Key="day/tagged.log")["TagSet"] == [{"Key": "team", "Value": "ops"}]
    assert _denied(run_cli(env["restore"], "extract", manifest, "--to", f"s3://{src}/back/", check=False))
    assert _denied(run_cli(env["restore"], "archive", day20, f"s3://{back}/a/", *standard, check=False))
    assert _denied(run_cli(env["restore"], "delete-sources", manifest, check=False))
    assert keys_in(s3, src, "back/") == []


def user_client_from_env(env: dict, s3):
    return boto3.client("s3", endpoint_url=s3.meta.endpoint_url, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")


LOCK_READS = ("s3:GetObjectRetention", "s3:GetObjectLegalHold")


def role_names(src: str, dst: str) -> dict:
    return dict(SOURCE_BUCKET=src, SOURCE_PREFIX="logs/", ARCHIVE_BUCKET=dst, ARCHIVE_PREFIX="vault/")


def locked_run(src: str, dst: str, *extra: str) -> tuple:
    return ("archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD",
            "--object-lock", "GOVERNANCE", "--retain-days", "1", *extra)


def test_locked_runs_as_the_archive_role_commit_and_a_role_that_cannot_see_the_lock_says_so(lockable, minio,
                                                                                              cli_env):
    s3, src, dst = lockable
    names = role_names(src, dst)
    statements = policy("archive", **names)
    blind = [dict(st, Action=[a for a in st["Action"] if a not in LOCK_READS]) if st["Sid"] == "WriteArchives" else st
             for st in statements]
    message = _denied(run_cli(as_user(cli_env, *minio_user(minio, blind)), *locked_run(src, dst), check=False))
    assert "s3:GetObjectRetention" in message and "nothing was committed" in message, message
    stem = f"vault/{src}/logs/2026/11/21"
    # What docs/SECURITY.md says a failed locked try leaves: its archive, locked, and no manifest.
    assert keys_in(s3, dst, "vault/") == [f"{stem}.tar.gz"]
    assert s3.head_object(Bucket=dst, Key=f"{stem}.tar.gz")["ObjectLockMode"] == "GOVERNANCE"

    role = as_user(cli_env, *minio_user(minio, statements))
    result = run_json(role, *locked_run(src, dst))
    assert result["status"] == "archived" and result["retention"]["mode"] == "GOVERNANCE"
    versions = s3.list_object_versions(Bucket=dst, Prefix=f"{stem}.tar.gz")["Versions"]
    assert len(versions) == 2  # the failed try's copy stays, noncurrent, until its retention ends
    assert run_json(role, *locked_run(src, dst))["status"] == "skipped"
    held = run_json(role, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/held/", "--storage-class", "STANDARD",
                    "--legal-hold")
    assert held["retention"]["legal_hold"] == "ON"

    deleting = as_user(cli_env, *minio_user(minio, statements + policy("archive-delete-extra", **names)))
    assert run_json(deleting, *locked_run(src, dst, "--delete-source"))["deleted"] == 30
    assert keys_in(s3, src, PREFIX) == []


def test_the_catalog_and_scrub_roles_see_and_check_locked_archives(lockable, minio, cli_env):
    from datetime import date

    from s3arch.core.errors import ArchiverError
    from s3arch.ops.catalog.job_catalog import Catalog
    from s3arch.ops.catalog.view import ARCHIVED
    from s3arch.ops.jobs import job_from_dict
    from s3arch.ops.scrub import scrub

    s3, src, dst = lockable
    names = role_names(src, dst)
    run_json(as_user(cli_env, *minio_user(minio, policy("archive", **names))), *locked_run(src, dst))
    job = job_from_dict("sec", {"source": f"s3://{src}/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                "destination": f"s3://{dst}/vault/", "storage_class": "STANDARD",
                                "start_date": "2026-11-21", "object_lock": "GOVERNANCE", "retain_days": 1})
    day = date(2026, 11, 21)
    results = f"vault/{src}/logs/_s3arch-scrub/sec/"

    catalog = role_clients(minio, policy("catalog", **names)).store
    view = Catalog(job, catalog).view(day, day, today=date(2026, 11, 27))
    assert [d.state for d in view.days] == [ARCHIVED] and view.days[0].locked_until
    with pytest.raises(ArchiverError, match="(?i)denied"):
        scrub(job, catalog, day, day, sample=1)  # the catalog's role writes nothing
    assert keys_in(s3, dst, results) == []

    scrubber = role_clients(minio, policy("catalog", **names) + policy("scrub-extra", **names)).store
    checked = scrub(job, scrubber, day, day, sample=2)
    assert checked.ok and checked.verified == [day.isoformat()], checked.table()
    assert f"{results}latest.json" in keys_in(s3, dst, results)
    # The archive role, which a job's one connection usually carries, scrubs as well.
    assert scrub(job, role_clients(minio, policy("archive", **names)).store, day, day, sample=1).ok


def test_archive_bucket_policy_denies_archive_deletion_and_plain_http(minio, roles):
    """MinIO applies bucket policies to anonymous requests only, so the statements are shown
    twice: MinIO accepts them as the archive bucket's policy, and (without Principal) as part
    of a user's policy its evaluator denies exactly what they say, beside an Allow s3:*."""
    s3, src, dst, _, env = roles
    names = dict(ARCHIVE_BUCKET=dst, ARCHIVE_PREFIX="archive/")
    run_json(env["archive"], "archive", f"s3://{src}/logs/2026/11/21/", f"s3://{dst}/archive/",
             "--storage-class", "STANDARD")
    statements = policy("archive-bucket", **names)
    s3.put_bucket_policy(Bucket=dst, Policy=json.dumps({"Version": "2012-10-17", "Statement": statements}))
    assert json.loads(s3.get_bucket_policy(Bucket=dst)["Policy"])["Statement"]
    s3.delete_bucket_policy(Bucket=dst)

    allow_all = {"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]}
    unprincipled = [{k: v for k, v in st.items() if k != "Principal"} for st in statements]
    deletion_only = [st for st in unprincipled if st["Sid"] == "DenyArchiveDeletion"]
    admin = user_client(minio, *minio_user(minio, [allow_all, *deletion_only]))
    for suffix in (".tar.gz", ".manifest.jsonl.gz", ".manifest-index.json.gz"):
        with pytest.raises(admin.exceptions.ClientError, match="AccessDenied"):
            admin.delete_object(Bucket=dst, Key=f"archive/{src}/logs/2026/11/21{suffix}")
    admin.put_object(Bucket=dst, Key="archive/scratch.txt", Body=b"s")
    admin.delete_object(Bucket=dst, Key="archive/scratch.txt")  # other objects stay deletable

    plain_http = user_client(minio, *minio_user(minio, [allow_all, *unprincipled]))
    with pytest.raises(plain_http.exceptions.ClientError, match="AccessDenied"):
        plain_http.get_object(Bucket=dst, Key=f"archive/{src}/logs/2026/11/21.manifest.jsonl.gz")
    assert plain_http.list_objects_v2(Bucket=src)["KeyCount"] >= 0  # other buckets are not the policy's


# --- Encryption ------------------------------------------------------------------------------


def test_kms_archive_with_bucket_key_verifies_extracts_and_cats(tmp_path, cli_env, start_proxy):
    from devtools.servers import start_minio

    server = start_minio(kms_key_id="s3arch-test-key")
    proxy = start_proxy(server.endpoint_url)
    try:
        s3 = server.client()
        for bucket in ("kms-src", "kms-dst", "kms-back"):
            s3.create_bucket(Bucket=bucket)
        objects = {f"p/{i}.log": b"secret line %d\n" % i * 50 for i in range(20)}
        seed(s3, "kms-src", objects)
        env = {**{k: v for k, v in cli_env.items() if not k.startswith("AWS_")}, **server.env()}
        creates = proxy.add(Fault("status", rate=0.0, match=lambda r: r.method in ("POST", "PUT") and
                                  r.headers.get("x-amz-server-side-encryption-bucket-key-enabled") == "true"))
        run_cli({**env, "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}, "archive", "s3://kms-src/p/", "s3://kms-dst/",
                "--storage-class", "STANDARD", "--sse", "aws:kms", "--sse-kms-key-id", "s3arch-test-key",
                "--sse-bucket-key")
        assert creates.seen >= 3  # the archive's and manifest's uploads, and the index
        for key in ("kms-src/p.tar.gz", "kms-src/p.manifest.jsonl.gz", "kms-src/p.manifest-index.json.gz"):
            head = s3.head_object(Bucket="kms-dst", Key=key)
            assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"].endswith("s3arch-test-key"), key
        manifest = "s3://kms-dst/kms-src/p.manifest.jsonl.gz"
        assert run_json(env, "verify", manifest)["objects"] == 20
        assert run_json(env, "extract", manifest, "--to", "s3://kms-back/x/")["objects"] == 20
        assert s3.get_object(Bucket="kms-back", Key="x/3.log")["Body"].read() == objects["p/3.log"]
        assert run_cli(env, "cat", manifest, "p/5.log").stdout == objects["p/5.log"]
        dsse = run_cli(env, "archive", "s3://kms-src/p/", "s3://kms-dst/d/", "--storage-class", "STANDARD",
                       "--sse", "aws:kms:dsse", "--sse-kms-key-id", "s3arch-test-key", check=False)
        assert "encryption method is not supported" in _denied(dsse)  # MinIO has no DSSE: said plainly
    finally:
        server.stop()


def test_dsse_archive_round_trips_on_moto(moto_server, cli_env, tmp_path):
    s3 = moto_server.client()
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"dsse-src-{suffix}", f"dsse-dst-{suffix}"
    for bucket in (src, dst):
        s3.create_bucket(Bucket=bucket)
    seed(s3, src, {f"p/{i}.log": b"d%d\n" % i * 20 for i in range(10)})
    env = {**{k: v for k, v in cli_env.items() if not k.startswith("AWS_")}, **moto_server.env()}
    run_cli(env, "archive", f"s3://{src}/p/", f"s3://{dst}/", "--storage-class", "STANDARD",
            "--sse", "aws:kms:dsse", "--sse-kms-key-id", "alias/archive", "--sse-bucket-key")
    head = s3.head_object(Bucket=dst, Key=f"{src}/p.tar.gz")
    assert head["ServerSideEncryption"] == "aws:kms:dsse"
    manifest = f"s3://{dst}/{src}/p.manifest.jsonl.gz"
    assert run_json(env, "verify", manifest)["objects"] == 10
    assert run_json(env, "extract", manifest, "--to-dir", str(tmp_path))["objects"] == 10


# --- Secrets -----------------------------------------------------------------------------------


def test_cli_output_errors_and_manifest_carry_no_credential_or_token(minio, buckets, s3, cli_env):
    src, dst = buckets
    seed(s3, src, {f"{PREFIX}{i}.log": b"z" * 100 for i in range(10)})
    sts = boto3.client("sts", endpoint_url=minio.endpoint_url, aws_access_key_id=minio.access_key,
                       aws_secret_access_key=minio.secret_key, region_name=minio.region)
    creds = sts.assume_role(RoleArn="arn:aws:iam::000000000000:role/s3arch", RoleSessionName="s3arch-scan",
                            DurationSeconds=900)["Credentials"]
    env = {**cli_env, "AWS_ACCESS_KEY_ID": creds["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"],
           "AWS_SESSION_TOKEN": creds["SessionToken"]}
    archive = ("archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/v/", "--storage-class", "STANDARD")
    outputs = [run_cli(env, *archive), run_cli(env, *archive, "--json"),
               run_cli(env, *archive, "--overwrite", "--dry-run"),
               run_cli(env, "archive", f"s3://{src}/{PREFIX}", "s3://no-such-bucket-here/v/", check=False),
               run_cli({**env, "AWS_SECRET_ACCESS_KEY": creds["SecretAccessKey"][:-2] + "xx"}, *archive, check=False),
               run_cli(env, "ls", "--long", f"s3://{dst}/v/{src}/logs/2026/11/21.tar.gz"),
               run_cli(env, "verify", f"s3://{dst}/v/{src}/logs/2026/11/21.tar.gz")]
    assert [p.returncode for p in outputs] == [0, 0, 0, 2, 2, 0, 0]
    manifest = s3.get_object(Bucket=dst, Key=f"v/{src}/logs/2026/11/21.manifest.jsonl.gz")["Body"].read()
    texts = [p.stdout + p.stderr for p in outputs] + [__import__("gzip").decompress(manifest)]
    for name, value in (("secret key", creds["SecretAccessKey"]), ("session token", creds["SessionToken"]),
                        ("access key", creds["AccessKeyId"]), ("root secret", minio.secret_key)):
        assert not [t for t in texts if value.encode() in t], f"the {name} was printed"
    assert not [t for t in texts if re.search(rb"X-Amz-Signature|X-Amz-Credential|Signature=", t)]


def test_expected_owner_self_is_the_callers_account_from_sts(moto_server, cli_env, start_proxy):
    """moto server answers sts:GetCallerIdentity (MinIO does not) and owns its buckets as
    account 123456789012: `self` resolves to it and the run goes through."""
    s3, src, dst = source_with_one_object(moto_server, "own")
    proxy = start_proxy(moto_server.endpoint_url)
    owners = []
    proxy.add(Fault("status", rate=0.0, match=lambda r: owners.append(r.headers.get("x-amz-expected-bucket-owner"))))
    env = {**{k: v for k, v in cli_env.items() if not k.startswith("AWS_")}, **moto_server.env(),
           "AWS_ENDPOINT_URL_S3": proxy.endpoint_url, "AWS_ENDPOINT_URL_STS": moto_server.endpoint_url}
    result = run_json(env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/v/", "--storage-class", "STANDARD",
                      "--expected-owner", "self")
    assert result["status"] == "archived"
    assert owners and set(owners) == {"123456789012"}  # moto does not check it; the proxy saw it sent


def test_missing_key_403_under_a_prefix_conditioned_list_bucket(minio, cli_env, proxy):
    """S3 answers 403, not 404, for a missing key to a caller whose s3:ListBucket has an
    s3:prefix condition, and denies its HeadBucket. MinIO does the latter but answers 404 for
    a missing key, so the fault proxy plays S3: 403 AccessDenied for every HEAD/GET of a key
    of the destination that does not exist. The archive role of docs/SECURITY.md (its
    ListBucket narrowed by prefix): a first run (no manifest, index or lease yet) archives,
    a second skips, verify reads it. With the destination's ListBucket narrowed to another
    prefix, the run stops with exit 2 naming s3:ListBucket, and writes nothing."""
    s3, src, dst = source_with_one_object(minio, "lb")
    names = dict(SOURCE_BUCKET=src, SOURCE_PREFIX="logs/", ARCHIVE_BUCKET=dst, ARCHIVE_PREFIX="archive/",
                 RESTORE_BUCKET=dst, RESTORE_PREFIX="restored/")
    statements = policy("archive", **names)
    assert [s["Condition"] for s in statements if s["Action"] == ["s3:ListBucket"]] == [
        {"StringLike": {"s3:prefix": ["logs/*"]}}, {"StringLike": {"s3:prefix": ["archive/*"]}}]

    def missing(r) -> bool:
        if r.method not in ("HEAD", "GET") or "list-type" in r.query or not r.key.startswith(f"{dst}/"):
            return False
        key = r.key.split("/", 1)[1]
        if not key:
            return False
        try:
            s3.head_object(Bucket=dst, Key=key)
            return False
        except s3.exceptions.ClientError:
            return True

    as_s3 = proxy.add(Fault("status", status=403, code="AccessDenied", match=missing))
    env = {**as_user(cli_env, *minio_user(minio, statements)), "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}
    vault = f"s3://{dst}/archive/"
    started = time.monotonic()
    result = run_json(env, "archive", f"s3://{src}/{PREFIX}", vault, "--storage-class", "STANDARD")
    print(f"first run {result['status']} in {time.monotonic() - started:.1f} s, {as_s3.injected} 403s for missing keys")
    assert result["status"] == "archived" and as_s3.injected >= 2  # the manifest and the lease, at least
    assert run_json(env, "archive", f"s3://{src}/{PREFIX}", vault, "--storage-class", "STANDARD")["status"] == "skipped"
    assert run_json(env, "verify", f"s3://{dst}/archive/{src}/logs/2026/11/21.manifest.jsonl.gz")["objects"] == 1

    narrowed = [dict(s, Condition={"StringLike": {"s3:prefix": ["elsewhere/*"]}})
                if s.get("Sid") == "ListDestination" else s
                for s in policy("archive", **{**names, "ARCHIVE_PREFIX": "other/"})]
    env = {**as_user(cli_env, *minio_user(minio, narrowed)), "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}
    started = time.monotonic()
    message = _denied(run_cli(env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/other/", "--storage-class",
                              "STANDARD", check=False))
    print(f"exit 2 in {time.monotonic() - started:.1f} s: {message.strip().splitlines()[-1]}")
    assert "s3:ListBucket" in message and dst in message and "other/" in message
    assert keys_in(s3, dst, "other/") == [] and open_uploads(s3, dst) == []

    # The bucket check passes (its folder may be listed), the manifest's HEAD gets 403 and
    # the listing of that key is denied: the message names s3:ListBucket and the key.
    exact = [dict(s, Condition={"StringEquals": {"s3:prefix": [f"other/{src}/logs/2026/11/"]}})
             if s.get("Sid") == "ListDestination" else s
             for s in policy("archive", **{**names, "ARCHIVE_PREFIX": "other/"})]
    env = {**as_user(cli_env, *minio_user(minio, exact)), "AWS_ENDPOINT_URL_S3": proxy.endpoint_url}
    started = time.monotonic()
    message = _denied(run_cli(env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/other/", "--storage-class",
                              "STANDARD", check=False))
    print(f"exit 2 in {time.monotonic() - started:.1f} s: {message.strip().splitlines()[-1]}")
    assert "s3:ListBucket" in message and "403 rather than 404" in message
    assert f"s3://{dst}/other/{src}/logs/2026/11/21." in message
    assert keys_in(s3, dst, "other/") == [] and open_uploads(s3, dst) == []
