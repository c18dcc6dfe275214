"""The jobs file and the planning of prefixes: pure logic, no servers."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from s3arch.errors import BadArgument
from s3arch.jobs import batches, job_from_dict, load_jobs, plan

JOB = {"source": "s3://app-logs/", "prefix_template": "logs/{date:%Y/%m/%d}/",
       "destination": "s3://vault/archive/", "min_age_days": 2}


def job(**overrides):
    return job_from_dict("logs", {**JOB, **overrides})


def test_three_year_backfill_fits_max_map_length_in_batches_covering_every_date():
    days = plan(job(), date_from="2023-01-01", date_to="2025-12-31")
    assert len(days) == 1096
    planned = batches(days, 1024)
    assert len(planned) <= 1024
    assert [p for batch in planned for p in batch] == days
    assert batches(days[:1024], 1024) == [[p] for p in days[:1024]]  # no batching when it fits


def test_scheduled_run_archives_the_logical_date_minus_the_age():
    assert plan(job(), logical_date=date(2026, 11, 5)) == ["logs/2026/11/03/"]


def test_on_call_prefixes_are_checked_against_the_template_and_sorted():
    assert plan(job(), prefixes="logs/2026/11/02/, logs/2026/11/01/") == ["logs/2026/11/01/", "logs/2026/11/02/"]
    with pytest.raises(BadArgument, match="not one that job 'logs' archives"):
        plan(job(), prefixes=["logs/2026/11/1/"])
    with pytest.raises(BadArgument, match="either prefixes or a date range"):
        plan(job(), prefixes=["logs/2026/11/01/"], date_from="2026-11-01", date_to="2026-11-01")


@pytest.mark.parametrize("kwargs, message", [
    ({"date_from": "2026-11-02", "date_to": "2026-11-01"}, "empty date range"),
    ({"date_from": "2026-02-30", "date_to": "2026-03-01"}, "is not a date"),
    ({"date_to": "2026-11-01"}, "go together"),
    ({"date_from": "2026-11-01", "date_to": str(date.today())}, "too recent"),
])
def test_bad_ranges_are_rejected_with_what_to_change(kwargs, message):
    with pytest.raises(BadArgument, match=message):
        plan(job(), **kwargs)


def test_prefix_of_a_source_subfolder_is_part_of_every_planned_prefix():
    j = job(source="s3://app-logs/tenant-a/")
    assert plan(j, date_from="2026-01-31", date_to="2026-01-31") == ["tenant-a/logs/2026/01/31/"]
    assert j.date_of("tenant-a/logs/2026/01/31/") == date(2026, 1, 31)


@pytest.mark.parametrize("overrides, message", [
    ({"prefix_template": "logs/"}, "must contain {date:...} exactly once"),
    ({"prefix_template": "logs/{date:%Y/%m}/"}, "same prefix for different days"),
    ({"prefix_template": "logs/{date:%Y/%m/%d}"}, "must end with '/'"),
    ({"storage_class": "GLACIER_FLEXIBLE"}, "storage_class"),
    ({"retention": 3}, "unknown field"),
    ({"memory_budget": "lots"}, "cannot read size"),
    ({"destination": "vault/archive"}, "not an S3 URL"),
])
def test_mistakes_in_a_job_name_the_job_and_the_field(overrides, message):
    with pytest.raises(BadArgument, match=message):
        job(**overrides)


def test_jobs_file_problems_say_where_to_look(tmp_path):
    with pytest.raises(BadArgument, match="does not exist"):
        load_jobs(tmp_path / "missing.yaml")
    (tmp_path / "bad.yaml").write_text("jobs: [")
    with pytest.raises(BadArgument, match="not valid YAML"):
        load_jobs(tmp_path / "bad.yaml")
    (tmp_path / "empty.yaml").write_text("{}")
    with pytest.raises(BadArgument, match="no 'jobs:' mapping"):
        load_jobs(tmp_path / "empty.yaml")


def test_newest_allowed_date_respects_the_age():
    assert job(min_age_days=3).newest_allowed == date.today() - timedelta(days=3)


def test_lease_ttl_is_a_job_setting_with_a_floor():
    assert job(lease_ttl_seconds=20).spec_for("logs/2026/11/01/").lease_ttl == 20
    with pytest.raises(BadArgument, match="lease_ttl_seconds must be at least 10"):
        job(lease_ttl_seconds=5)
