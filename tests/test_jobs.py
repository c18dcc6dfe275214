"""The jobs file and the planning of prefixes: pure logic, no servers."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from s3arch.core.errors import BadArgument
from s3arch.ops.jobs import job_from_dict, load_jobs
from s3arch.ops.planning import SPREAD_TASKS, archive_batches, batches, plan

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


def test_a_year_is_spread_over_tens_of_archive_tasks_of_consecutive_days():
    days = plan(job(), date_from="2025-01-01", date_to="2025-12-31")
    tasks = archive_batches(days, 1024)
    assert SPREAD_TASKS - 2 <= len(tasks) <= SPREAD_TASKS
    assert [p for batch in tasks for p in batch] == days
    assert max(map(len, tasks)) == 12
    assert len(archive_batches(days, 10)) <= 10  # max_map_length still holds


def test_a_month_or_less_keeps_one_archive_task_per_day_for_on_call():
    days = plan(job(), date_from="2025-01-01", date_to="2025-01-31")
    assert archive_batches(days, 1024) == [[p] for p in days]


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
    ({"prefix_template": "logs/{date:%Y/%m/%d}"}, "must go on after the date with a separator"),
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
    assert job(lease_ttl=20).spec_for("logs/2026/11/01/").lease_ttl == 20
    with pytest.raises(BadArgument, match="lease_ttl.*at least 10"):
        job(lease_ttl=5)


@pytest.mark.parametrize("old, new, value", [("lease_ttl_seconds", "lease_ttl", 20),
                                             ("restore_poll_seconds", "poll_interval", 0.5)])
def test_round_3_keys_still_work_for_a_release_with_a_warning_naming_the_new_key(old, new, value):
    with pytest.warns(FutureWarning, match=f"{old} is deprecated.*write {new}"):
        renamed = job(**{old: value})
    assert getattr(renamed, new) == value == getattr(renamed, old)
    with pytest.raises(BadArgument, match=f"{old} and {new} are the same setting"):
        job(**{old: value, new: value})


def test_a_job_is_one_process_per_task_unless_it_asks():
    """Item 4 of issue 29: the engine's default (the CPUs) is the CLI's; a job's tasks get
    processes 1, and its segment thresholds reach the engine."""
    default = job().spec_for("logs/2026/11/01/")
    assert (default.processes, default.segments) == (1, 0)
    assert job().operator_args["processes"] == 1 and job().segment_tasks == 0
    asked = job(processes=3, segment_min_objects=10, segment_min_bytes="1MiB").spec_for("logs/2026/11/01/")
    assert (asked.processes, asked.segment_min_objects, asked.segment_min_bytes) == (3, 10, 1 << 20)
    # segments: 1 never cuts, whatever processes says (the CLI's --segments 1 likewise).
    never = job(processes=3, segments=1)
    assert never.spec_for("logs/2026/11/01/").processes == 1 and never.operator_args["processes"] == 1
    assert job(segments=4).segment_tasks == 4
    for bad in ({"processes": 0}, {"processes": 65}, {"segments": 0}, {"concurrency": 0}, {"threads": True}):
        with pytest.raises(BadArgument, match=next(iter(bad))):
            job(**bad)


def test_concurrency_and_threads_are_job_settings_with_the_cli_defaults():
    from s3arch.cli import _parser
    from s3arch.core.config import ArchiveSpec, available_cpus

    cli = _parser().parse_args(["archive", "s3://a-b/p/", "s3://c-d/"])
    spec = job().spec_for("logs/2026/11/01/")
    assert spec.concurrency == cli.concurrency == ArchiveSpec.__dataclass_fields__["concurrency"].default == 128
    assert spec.compress_threads == available_cpus()
    tuned = job(concurrency=32, threads=2).spec_for("logs/2026/11/01/")
    assert (tuned.concurrency, tuned.compress_threads) == (32, 2)
