"""Source deletion after a commit (--delete-source, delete-sources): cut short, denied,
raced by a writer, versioned."""

from __future__ import annotations

import subprocess
import sys

import pytest

from faultproxy import Fault, wait_until
from helpers import ROOT, cli_archive_day, day_spec, keys_in, minio_user, read_archive, run_cli, run_json, seed
from s3arch.archive import archive_prefix
from s3arch.core.config import S3Url


PROXY_SEED = 13  # the conftest proxy's random faults


@pytest.mark.slow  # a deletion killed and re-run: 14 s
def test_rerun_with_delete_source_finishes_a_deletion_that_was_cut_short(s3, buckets, day, proxy, cli_env,
                                                                          reliability):
    src, dst = buckets
    cli_archive_day(cli_env, src, dst, check=True)
    # The first pass deletes one batch of 1,000, then its second batch hangs: SIGKILL.
    fired = []
    # (the first POST ?delete is the probe of conditional-delete support, in the destination)
    proxy.add(Fault("stall", seconds=60, after=2, match=lambda r: r.method == "POST" and "delete" in r.query,
                    on_inject=fired.append))
    process = subprocess.Popen([sys.executable, "-m", "s3arch", "--endpoint-url", proxy.endpoint_url, "archive",
                                f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                                "--delete-source", "--quiet"], env=cli_env, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert wait_until(lambda: fired or process.poll() is not None, 60) and fired, \
        f"the deletion never reached its second batch: {process.stderr.read().decode()[-2000:]}"
    process.kill()
    process.wait(30)
    proxy.clear()
    left = set(keys_in(s3, src))
    assert 0 < len(left) < len(day)
    # The re-run finds the manifest, skips archiving, and finishes the deletion.
    result = cli_archive_day(cli_env, src, dst, "--delete-source", check=True)
    assert result["status"] == "skipped" and result["deletion"]["finished"] is True
    assert result["deleted"] == len(left) and keys_in(s3, src) == []
    assert read_archive(s3, dst, f"a/{src}/day.tar.gz") == day  # every deleted object is archived
    again = cli_archive_day(cli_env, src, dst, "--delete-source", check=True)
    assert again["deleted"] == 0 and again["deletion"]["finished"] is True
    reliability.record("SIGKILL during source deletion, then a re-run with --delete-source",
                       f"{len(day) - len(left)} deleted before the kill",
                       f"re-run skipped archiving and deleted the other {len(left)}; all "
                       f"{len(day)} in the verified archive")


@pytest.mark.slow  # 13 s
def test_delete_sources_command_finishes_the_deletion_by_hand(s3, buckets, day, cli_env):
    src, dst = buckets
    cli_archive_day(cli_env, src, dst, check=True)
    s3.delete_object(Bucket=src, Key="day/0000.log")  # an earlier pass got this far
    result = run_json(cli_env, "delete-sources", f"s3://{dst}/a/{src}/day.tar.gz")
    assert result["deleted"] == len(day) - 1 and keys_in(s3, src) == []
    assert "finished" in run_cli(cli_env, "delete-sources", f"s3://{dst}/a/{src}/day.tar.gz").stdout.decode()


def test_denied_delete_fails_the_task_and_a_retry_never_reports_success(minio, s3, buckets, day, cli_env,
                                                                       reliability):
    src, dst = buckets
    user, secret = minio_user(minio, [
        {"Effect": "Allow", "Action": ["s3:*"], "Resource": ["arn:aws:s3:::*"]},
        {"Effect": "Deny", "Action": ["s3:DeleteObject"], "Resource": [f"arn:aws:s3:::{src}/*"]}])
    env = {**cli_env, "AWS_ACCESS_KEY_ID": user, "AWS_SECRET_ACCESS_KEY": secret}
    outcomes = []
    for attempt in range(2):  # the first try and its retry
        proc = run_cli(env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                       "--delete-source", "--json", check=False)
        result = __import__("json").loads(proc.stdout.decode().strip().splitlines()[-1])
        outcomes.append((proc.returncode, result))
    for code, result in outcomes:
        assert code == 2 and result["status"] == "failed" and result["error"] == "SourceDeletionFailed"
        assert "access denied" in result["message"] and "delete-sources" in result["message"]
        assert result["retryable"] is False
    assert sorted(keys_in(s3, src)) == sorted(day)  # nothing deleted, nothing claimed
    assert f"a/{src}/day.manifest.jsonl.gz" in keys_in(s3, dst)  # the archive itself is committed
    reliability.record("source DeleteObject denied by a MinIO policy", "2 runs (try and retry)",
                       f"both exit 2 SourceDeletionFailed: {outcomes[1][1]['message'][:80]}")


def test_object_rewritten_right_before_its_delete_batch_survives(s3, buckets, day, clients, reliability):
    src, dst = buckets
    archive_prefix(day_spec(src, dst), clients)
    victim = "day/0007.log"

    deleting = []

    def rewrite_after_listing(**_):
        if deleting and s3.get_object(Bucket=src, Key=victim)["Body"].read() != b"rewritten":
            s3.put_object(Bucket=src, Key=victim, Body=b"rewritten")

    # The deletion's listing has answered; the batch is being prepared: a writer strikes now.
    # (Not at the re-run's first listing, the check for late objects: rewritten then, the
    # object is archived as the day's next part, and deleted with the others.)
    clients.control.meta.events.register("after-call.s3.DeleteObjects", lambda **_: deleting.append(1))  # the probe
    clients.control.meta.events.register("after-call.s3.ListObjectsV2", rewrite_after_listing)
    result = archive_prefix(day_spec(src, dst, delete_source=True), clients)
    assert keys_in(s3, src) == [victim]
    assert s3.get_object(Bucket=src, Key=victim)["Body"].read() == b"rewritten"
    assert result.deleted == len(day) - 1 and result.deletion["kept_changed"] == 1
    assert result.deletion["method"] == "recheck"  # MinIO ignores the ETag in DeleteObjects
    reliability.record("object rewritten after the deletion listed it, before its batch", "1 object",
                       "kept (conditional HEAD before the batch); the other 1,499 deleted")


def test_minio_ignores_etags_in_delete_objects_so_the_probe_chooses_the_recheck(s3, buckets):
    from s3arch.format.manifest import layout_for
    from s3arch.io.store import Store
    from s3arch.protocol.deletion import endpoint_honours_etag

    src, dst = buckets
    assert endpoint_honours_etag(Store(s3), layout_for(S3Url(src, "day/"), S3Url(dst, "a/"))) is False
    assert keys_in(s3, dst) == []  # the probe cleans up after itself


def test_versioned_source_deletes_archived_versions_only_when_asked(s3, buckets, clients):
    src, dst = buckets
    s3.put_bucket_versioning(Bucket=src, VersioningConfiguration={"Status": "Enabled"})
    seed(s3, src, {f"day/{i}.log": b"v1 %d" % i for i in range(20)})
    plain = archive_prefix(day_spec(src, dst, delete_source=True), clients)
    assert plain.deleted == 20 and keys_in(s3, src) == []
    assert any("delete markers" in note for note in plain.notes)
    versions = s3.list_object_versions(Bucket=src)
    assert len(versions["Versions"]) == 20  # hidden, still stored and billed

    _, dst2 = buckets[0], f"{buckets[1]}-v"
    s3.create_bucket(Bucket=dst2)
    src2 = f"{src}-b"
    s3.create_bucket(Bucket=src2)
    s3.put_bucket_versioning(Bucket=src2, VersioningConfiguration={"Status": "Enabled"})
    seed(s3, src2, {f"day/{i}.log": b"v1 %d" % i for i in range(20)})
    archive_prefix(day_spec(src2, dst2), clients)
    s3.put_object(Bucket=src2, Key="day/3.log", Body=b"v2 written after archiving")
    # The re-run archives v2 of 3.log as the day's part 2 (docs/FORMAT.md, "Parts"): both of
    # its versions are archived. v2 of 4.log lands after that check: nobody archived it.
    def write_after_the_check(params, **_):
        if params["Key"].endswith(".parts.json"):  # part 2 is committed; the deletion is next
            s3.put_object(Bucket=src2, Key="day/4.log", Body=b"v2 nobody archived")

    clients.control.meta.events.register("provide-client-params.s3.PutObject", write_after_the_check)
    result = archive_prefix(day_spec(src2, dst2, delete_source=True, delete_versions=True), clients)
    assert result.deletion["method"] == "versions" and result.part == 2
    left = s3.list_object_versions(Bucket=src2).get("Versions", [])
    assert [v["Key"] for v in left] == ["day/4.log"]  # only the version nobody archived
    assert s3.get_object(Bucket=src2, Key="day/4.log")["Body"].read() == b"v2 nobody archived"
