"""A day spread over many prefixes: `s3arch archive` given a source pattern with `*` wildcards
(an organization trail's accounts and regions) archives the day as one archive, against a real
MinIO, through every path a user takes: dry run, run, re-run, --delete-source, segments,
extract; and refuses a pattern that matches nothing or too much with exit 2, writing nothing."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import keys_in, read_archive, run_cli, run_json, seed

ACCOUNTS = ("111111111111", "222222222222", "333333333333")
REGIONS = ("eu-west-1", "us-east-1")
DAY_PATTERN = "AWSLogs/o-abc123/*/CloudTrail/*/2026/11/21/"


def trail_keys(day: str = "2026/11/21", stamp: str = "20261121") -> dict[str, bytes]:
    """An organization trail as CloudTrail writes it: data and digest folders side by side."""
    objects = {}
    for account in ACCOUNTS:
        for region in REGIONS:
            for i in range(4):
                name = f"{account}_CloudTrail_{region}_{stamp}T{i:02d}05Z_Ab{i}Cd.json.gz"
                objects[f"AWSLogs/o-abc123/{account}/CloudTrail/{region}/{day}/{name}"] = \
                    json.dumps({"Records": [{"eventName": "GetObject", "n": i, "region": region}]}).encode()
            digest = f"{account}_CloudTrail-Digest_{region}_trail_{region}_{stamp}T0000Z.json.gz"
            objects[f"AWSLogs/o-abc123/{account}/CloudTrail-Digest/{region}/{day}/{digest}"] = b"{}"
    return objects


@pytest.fixture
def trail(s3, buckets):
    src, dst = buckets
    today, other = trail_keys(), trail_keys("2026/11/22", "20261122")
    seed(s3, src, {**today, **other})
    day = {k: v for k, v in today.items() if "/CloudTrail/" in k}
    return src, dst, day


def test_a_pattern_archives_every_account_and_region_of_the_day_as_one_archive(s3, trail, cli_env):
    src, dst, day = trail
    result = run_json(cli_env, "archive", f"s3://{src}/{DAY_PATTERN}", f"s3://{dst}/vault/",
                      "--storage-class", "STANDARD", "--quiet")
    assert result["status"] == "archived" and result["objects"] == len(day) == 24
    archive = f"vault/{src}/AWSLogs/o-abc123/*/CloudTrail/*/2026/11/21.tar.gz"
    assert read_archive(s3, dst, archive) == day  # full keys; no digest, no other day
    again = run_json(cli_env, "archive", f"s3://{src}/{DAY_PATTERN}", f"s3://{dst}/vault/",
                     "--storage-class", "STANDARD", "--quiet")
    assert again["status"] == "skipped"


def test_dry_run_counts_the_days_prefixes_and_writes_nothing(s3, trail, cli_env):
    src, dst, day = trail
    result = run_json(cli_env, "archive", f"s3://{src}/{DAY_PATTERN}", f"s3://{dst}/vault/", "--dry-run")
    assert result["status"] == "dry_run" and result["objects"] == len(day)
    assert result["bytes_in"] == sum(map(len, day.values()))
    assert keys_in(s3, dst) == []


def test_delete_source_removes_only_the_archived_day(s3, trail, cli_env):
    src, dst, day = trail
    before = set(keys_in(s3, src))
    run_json(cli_env, "archive", f"s3://{src}/{DAY_PATTERN}", f"s3://{dst}/vault/",
             "--storage-class", "STANDARD", "--delete-source", "--quiet")
    assert set(keys_in(s3, src)) == before - set(day)


def test_delete_sources_later_finds_the_pattern_in_the_manifest(s3, trail, cli_env):
    src, dst, day = trail
    before = set(keys_in(s3, src))
    run_json(cli_env, "archive", f"s3://{src}/{DAY_PATTERN}", f"s3://{dst}/vault/",
             "--storage-class", "STANDARD", "--quiet")
    assert set(keys_in(s3, src)) == before
    result = run_json(cli_env, "delete-sources",
                      f"s3://{dst}/vault/{src}/AWSLogs/o-abc123/*/CloudTrail/*/2026/11/21.tar.gz")
    assert result["deletion"]["deleted"] == len(day)
    assert set(keys_in(s3, src)) == before - set(day)


@pytest.mark.slow  # a segmented run with worker processes, then an extract: as tests/test_segments.py's
def test_segments_cut_the_union_of_the_prefixes(s3, trail, cli_env, tmp_path):
    src, dst, day = trail
    result = run_json(cli_env, "archive", f"s3://{src}/{DAY_PATTERN}", f"s3://{dst}/vault/",
                      "--storage-class", "STANDARD", "--processes", "2", "--segments", "3",
                      "--segment-min-objects", "1", "--quiet")
    assert result["status"] == "archived" and result["objects"] == len(day)
    archive = f"s3://{dst}/vault/{src}/AWSLogs/o-abc123/*/CloudTrail/*/2026/11/21.tar.gz"
    assert read_archive(s3, dst, archive.split("/", 3)[3]) == day
    run_cli(cli_env, "extract", archive, "--to-dir", str(tmp_path / "out"))
    extracted = {str(p.relative_to(tmp_path / "out")): p.read_bytes()
                 for p in (tmp_path / "out").rglob("*") if p.is_file()}
    # Relative to the pattern's fixed folder, as a prefix's keys are to the prefix.
    assert extracted == {k.removeprefix("AWSLogs/o-abc123/"): v for k, v in day.items()}


def test_a_date_inside_key_names_gives_a_clean_archive_name(s3, buckets, cli_env):
    src, dst = buckets
    seed(s3, src, {"logs/2026-11-21-10-00-00-ABCDEF": b"a", "logs/2026-11-21-11-00-00-ABCDEF": b"b",
                   "logs/2026-11-22-10-00-00-ABCDEF": b"c"})
    result = run_json(cli_env, "archive", f"s3://{src}/logs/2026-11-21-", f"s3://{dst}/vault/",
                      "--storage-class", "STANDARD", "--quiet")
    assert result["objects"] == 2
    assert f"vault/{src}/logs/2026-11-21.tar.gz" in keys_in(s3, dst)
    run_cli(cli_env, "extract", f"s3://{dst}/vault/{src}/logs/2026-11-21.tar.gz", "--to", f"s3://{dst}/back/")
    assert sorted(keys_in(s3, dst, "back/")) == ["back/2026-11-21-10-00-00-ABCDEF", "back/2026-11-21-11-00-00-ABCDEF"]


def test_a_wildcard_inside_a_name_is_expanded_at_its_separator(s3, buckets, cli_env):
    src, dst = buckets
    day = {"cf/E2ABC.2026-11-21-10.a1b2.gz": b"1", "cf/E9XYZ.2026-11-21-23.c3d4.gz": b"2"}
    seed(s3, src, {**day, "cf/E2ABC.2026-11-22-00.e5f6.gz": b"3", "cf/sub/E1.2026-11-21-01.x.gz": b"4"})
    result = run_json(cli_env, "archive", f"s3://{src}/cf/*.2026-11-21-", f"s3://{dst}/vault/",
                      "--storage-class", "STANDARD", "--quiet")
    assert result["objects"] == 2
    assert read_archive(s3, dst, f"vault/{src}/cf/*.2026-11-21.tar.gz") == day


def test_a_pattern_that_matches_nothing_is_exit_2_naming_it(s3, trail, cli_env):
    src, dst, _ = trail
    proc = run_cli(cli_env, "archive", f"s3://{src}/AWSLogs/*/Config/*/2026/11/21/", f"s3://{dst}/vault/",
                   "--storage-class", "STANDARD", check=False)
    assert proc.returncode == 2
    assert f"s3://{src}/AWSLogs/*/Config/*/2026/11/21/ matches no prefix" in proc.stderr.decode()
    assert keys_in(s3, dst) == []


def test_a_pattern_past_its_bound_is_exit_2_before_any_write(s3, trail, cli_env):
    src, dst, _ = trail
    proc = run_cli(cli_env, "archive", f"s3://{src}/{DAY_PATTERN}", f"s3://{dst}/vault/",
                   "--storage-class", "STANDARD", "--max-prefixes", "4", check=False)
    assert proc.returncode == 2
    assert "expands to more than 4 prefixes" in proc.stderr.decode()
    assert keys_in(s3, dst) == []


def test_segment_tasks_plan_produce_and_assemble_a_pattern_day(s3, trail, clients):
    """The Airflow shape without Airflow: prepare lists the day's prefixes as one source and
    plans key ranges over their union; segments run out of order; assemble commits."""
    from s3arch.archive import archive_segment, assemble_segments, prepare_segments
    from s3arch.core.config import ArchiveSpec, S3Url

    src, dst, day = trail
    spec = ArchiveSpec(S3Url(src, DAY_PATTERN), S3Url(dst, "v/"), storage_class="STANDARD", processes=1)
    assert prepare_segments(spec, 3, clients).status == "planned"
    produced = [archive_segment(spec, k, clients)["objects"] for k in (2, 0, 1)]
    assert sum(produced) == len(day) and all(produced)
    result = assemble_segments(spec, clients, segments=3)
    assert result.status == "archived" and result.objects == len(day)
    assert read_archive(s3, dst, f"v/{src}/AWSLogs/o-abc123/*/CloudTrail/*/2026/11/21.tar.gz") == day


def test_each_level_is_listed_once_for_the_life_of_the_clients(trail, clients):
    from s3arch.io.sources import expand, expansion_requests

    src, _, _ = trail
    with ThreadPoolExecutor(8) as pool:  # eight tasks of one process expanding the day at once
        expanded = list(pool.map(lambda _: expand(clients.store, src, DAY_PATTERN), range(8)))
    first = expanded[0]
    assert all(e == first for e in expanded)
    spent = expansion_requests(clients.store)
    assert len(first) == len(ACCOUNTS) * len(REGIONS) and spent == 1 + len(ACCOUNTS)
    other_day = expand(clients.store, src, DAY_PATTERN.replace("/21/", "/22/"))
    assert expansion_requests(clients.store) == spent  # the levels above the date: listed already
    assert [p.replace("/22/", "/21/") for p in other_day] == first


def test_dry_run_of_a_pattern_prices_the_day(trail, cli_env):
    src, dst, day = trail
    result = run_json(cli_env, "archive", f"s3://{src}/{DAY_PATTERN}", f"s3://{dst}/vault/", "--dry-run",
                      "--storage-class", "DEEP_ARCHIVE")
    cost = result["cost"]
    assert cost["objects"] == len(day) and cost["storage_class"] == "DEEP_ARCHIVE"
    assert 0 < cost["archive_requests"] < cost["separate_requests"]


def _expanding(request) -> bool:
    return request.method == "GET" and "delimiter" in request.query


def test_a_pattern_expanded_through_throttling_archives_the_same_day(s3, trail, minio):
    from faultproxy import Fault, FaultProxy
    from helpers import engine_clients

    from s3arch.archive import archive_prefix
    from s3arch.core.config import ArchiveSpec, S3Url

    src, dst, day = trail
    proxy = FaultProxy(minio.endpoint_url, seed=3)
    try:
        fault = proxy.add(Fault("status", status=503, rate=0.5, match=_expanding))
        spec = ArchiveSpec(S3Url(src, DAY_PATTERN), S3Url(dst, "v/"), storage_class="STANDARD")
        result = archive_prefix(spec, engine_clients(minio, proxy.endpoint_url))
    finally:
        proxy.stop()
    assert fault.injected >= 1 and result.objects == len(day)
    assert read_archive(s3, dst, f"v/{src}/AWSLogs/o-abc123/*/CloudTrail/*/2026/11/21.tar.gz") == day


def test_an_expansion_that_keeps_failing_is_retryable_and_writes_nothing(s3, trail, minio):
    from faultproxy import Fault, FaultProxy
    from helpers import engine_clients

    from s3arch.archive import archive_prefix
    from s3arch.core.config import ArchiveSpec, S3Url
    from s3arch.core.errors import TransientError

    src, dst, _ = trail
    proxy = FaultProxy(minio.endpoint_url, seed=3)
    try:
        proxy.add(Fault("status", status=500, match=_expanding))
        spec = ArchiveSpec(S3Url(src, DAY_PATTERN), S3Url(dst, "v/"), storage_class="STANDARD")
        with pytest.raises(TransientError, match="delimiter"):
            archive_prefix(spec, engine_clients(minio, proxy.endpoint_url, max_attempts=2))
    finally:
        proxy.stop()
    assert keys_in(s3, dst) == []
