"""A committed prefix is skipped on a re-run only while its archive and index are whole:
damage is reported (exit 2) with the fix, and the re-run reads the small index."""

from __future__ import annotations

import pytest

from helpers import cli_archive_day, day_spec, minio_user, read_archive, run_cli, seed
from s3arch.archive import archive_prefix
from s3arch.core.config import S3Url


pytestmark = pytest.mark.slow  # archives 1,500 objects and re-runs the CLI over each damage


@pytest.mark.parametrize("damage", ["deleted", "replaced", "truncated"])
def test_committed_prefix_with_a_damaged_archive_is_not_skipped(s3, buckets, day, cli_env, damage, reliability):
    src, dst = buckets
    cli_archive_day(cli_env, src, dst, check=True)
    key = f"a/{src}/day.tar.gz"
    original = s3.get_object(Bucket=dst, Key=key)["Body"].read()
    if damage == "deleted":
        s3.delete_object(Bucket=dst, Key=key)
    else:
        s3.put_object(Bucket=dst, Key=key, Body=original[:-1] if damage == "truncated" else original[::-1])
    proc = run_cli(cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--storage-class", "STANDARD",
                   check=False)
    message = proc.stderr.decode()
    assert proc.returncode == 2 and "--overwrite" in message and "verify" in message, message
    assert ("missing" if damage == "deleted" else "is not the archive") in message
    # The fix the message names works: --overwrite rebuilds from the intact source.
    cli_archive_day(cli_env, src, dst, "--overwrite", check=True)
    assert read_archive(s3, dst, key) == day
    reliability.record(f"archive {damage} under its manifest", "1 object",
                       "re-run exit 2 ArchiveDamaged naming --overwrite; --overwrite rebuilt it")

def test_a_read_only_caller_is_told_a_committed_prefix_is_skipped(minio, s3, buckets, cli_env):
    src, dst = buckets
    seed(s3, src, {"day/a.log": b"a"})
    cli_archive_day(cli_env, src, dst, check=True)
    user, secret = minio_user(minio, [{"Effect": "Allow", "Action": ["s3:GetObject", "s3:ListBucket"],
                                       "Resource": ["arn:aws:s3:::*"]}])
    result = cli_archive_day({**cli_env, "AWS_ACCESS_KEY_ID": user, "AWS_SECRET_ACCESS_KEY": secret}, src, dst,
                         check=True)
    assert result["status"] == "skipped"


def test_rerun_of_a_committed_prefix_reads_the_small_index_not_the_manifest(s3, buckets, day, clients):
    from s3arch.format.manifest import layout_for
    from s3arch.stored.manifests import iter_manifest

    src, dst = buckets
    archive_prefix(day_spec(src, dst), clients)
    archive_prefix(day_spec(src, dst), clients)  # the first re-check reads the manifest once: the day index
    gets = []
    clients.control.meta.events.register("before-send.s3.GetObject", lambda request, **_: gets.append(request.url))
    again = archive_prefix(day_spec(src, dst), clients)
    assert again.status == "skipped" and again.objects == len(day)
    assert sorted(url.rsplit("/", 1)[1] for url in gets) == ["day.manifest-index.json.gz", "day.parts.json"], gets
    layout = layout_for(S3Url(src, "day/"), S3Url(dst, "a/"))
    scanned = [r for r in iter_manifest(clients.store, layout) if r["type"] == "summary"][0]
    assert {k: again.to_dict()[k] for k in ("objects", "bytes_in", "bytes_out")} == {
        "objects": scanned["objects"], "bytes_in": scanned["bytes"], "bytes_out": scanned["archive_size"]}


@pytest.mark.parametrize("damage", [lambda body: body[: len(body) // 2], lambda body: b"[1, 2, 3]"],
                         ids=["truncated-gzip", "not-an-object"])
def test_a_damaged_index_is_reported_as_damage_not_as_a_bug(s3, buckets, day, clients, cli_env, damage):
    """``cat`` and a re-run read the index first: a cut or reshaped index is the archive's
    damage (exit 2, the index named), never a traceback (exit 1)."""
    from s3arch.format.manifest import layout_for

    src, dst = buckets
    archive_prefix(day_spec(src, dst), clients)
    layout = layout_for(S3Url(src, "day/"), S3Url(dst, "a/"))
    body = s3.get_object(Bucket=dst, Key=layout.index_key)["Body"].read()
    s3.put_object(Bucket=dst, Key=layout.index_key, Body=damage(body))
    key = sorted(day)[0]
    cat = run_cli(cli_env, "cat", f"s3://{dst}/{layout.archive_key('.tar.gz')}", key, check=False)
    assert cat.returncode == 2, cat.stderr.decode()
    assert layout.index_key in cat.stderr.decode() and b"Traceback" not in cat.stderr
