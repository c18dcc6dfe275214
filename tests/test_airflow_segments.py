"""A job with segments, run with dag.test() against MinIO: a large day fans out into a
prepare task, segment tasks named `<prefix> [k/N]` and an assemble task; a small day stays one
archive task; one segment fails once and is retried alone; the report shows it all."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone

import pytest

from devtools.sample_data import seed_day
from helpers import (LOG_TEMPLATE as TEMPLATE, ROOT, airflow_with_log_job, keys_in, open_uploads,
                     planned_listing_starts, read_archive, use_airflow_home)


pytestmark = pytest.mark.slow  # segmented days through dag.test, one segment task each


DAG_ID = "s3_archive__seg"
LARGE, SMALL = date(2026, 8, 1), date(2026, 8, 2)
DRY_LARGE, DRY_SMALL = date(2026, 8, 5), date(2026, 8, 6)
BROKEN = date(2026, 8, 9)


@pytest.fixture(scope="module")
def af(minio, tmp_path_factory):
    airflow, s3, src, dst = airflow_with_log_job(minio, tmp_path_factory.mktemp("airflow-seg"), "seg",
                                                 segments=3, segment_min_objects=30, memory_budget="256MiB")
    with pytest.MonkeyPatch.context() as mp:
        use_airflow_home(mp, airflow.env)
        airflow.s3, airflow.src, airflow.dst = s3, src, dst
        yield airflow


def run_dag(conf: dict, logical_date: date = date(2026, 10, 1)):
    from helpers import dag_bag
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    bag = dag_bag(str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    run = bag.dags[DAG_ID].test(logical_date=datetime.combine(logical_date, datetime.min.time(), tzinfo=timezone.utc),
                                run_conf=conf)
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run.run_id).all()
        session.expunge_all()
    return run, {(ti.task_id if ti.map_index < 0 else (ti.task_id, ti.map_index)): ti for ti in tis}


def report_rows(run) -> dict[str, dict]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel.value).filter_by(dag_id=DAG_ID, run_id=run.run_id, task_id="report",
                                                        key="return_value").scalar()
    rows = json.loads(rows) if isinstance(rows, str) else rows
    return {row["prefix"]: row for row in rows}


def xcom_rows(run, task_id: str) -> list[dict]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        values = session.query(XComModel.value).filter_by(dag_id=DAG_ID, run_id=run.run_id, task_id=task_id,
                                                          key="archive_rows").all()
    return [row for (value,) in values for row in (json.loads(value) if isinstance(value, str) else value)]


def test_large_day_fans_out_into_segment_tasks_one_fails_once_and_retries_alone(af, monkeypatch):
    from s3arch.core.errors import TransientError
    import s3arch.produce.segments.produce

    large = seed_day(af.s3, af.src, TEMPLATE, LARGE, files_per_hour=2, lines_per_file=20)  # 48 objects
    small = seed_day(af.s3, af.src, TEMPLATE, SMALL, files_per_hour=1, lines_per_file=20)  # 24 objects
    produce, failed = s3arch.produce.segments.produce.produce_segment, []

    def fail_segment_2_once(spec, clients, layout, plan, k, *args, **kwargs):
        if k == 1 and not failed:
            failed.append(k)
            raise TransientError("injected: segment 2's worker lost its network")
        return produce(spec, clients, layout, plan, k, *args, **kwargs)

    monkeypatch.setattr(s3arch.produce.segments.produce, "produce_segment", fail_segment_2_once)
    started_after = planned_listing_starts(monkeypatch)
    run, tis = run_dag({"date_from": str(LARGE), "date_to": str(SMALL)})
    assert run.state == "success"
    assert failed == [1]
    assert started_after == [max(large)]  # prepare listed after the page the size task listed (the whole day)
    day = f"{LARGE:logs/%Y/%m/%d}/"
    assert {tis[("segment", k)].rendered_map_index for k in range(3)} == {f"{day} [{k}/3]" for k in (1, 2, 3)}
    assert [tis[("segment", k)].try_number for k in range(3)] == [1, 2, 1]  # only the failed one again
    assert tis[("prepare", 0)].rendered_map_index == day and tis[("assemble", 0)].rendered_map_index == day
    # One archive task per day (a short range), so on-call clears one day in one click; the
    # large day's leaves it to its segment tasks.
    assert [tis[("archive", i)].rendered_map_index for i in (0, 1)] == [day, f"{SMALL:logs/%Y/%m/%d}/"]
    assert ("archive", 2) not in tis

    for when, seeded in ((LARGE, large), (SMALL, small)):
        assert read_archive(af.s3, af.dst, f"archive/{af.src}/{when:logs/%Y/%m/%d}.tar.gz") == seeded
    assert open_uploads(af.s3, af.dst) == []
    assert [k for k in keys_in(af.s3, af.dst) if ".segments/" in k or k.endswith(".lease.json")] == []

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel.value).filter_by(dag_id=DAG_ID, run_id=run.run_id, task_id="report",
                                                        key="return_value").scalar()
    rows = __import__("json").loads(rows) if isinstance(rows, str) else rows
    by_prefix = {row["prefix"]: row for row in rows}
    assert by_prefix[day]["status"] == "archived" and by_prefix[day]["segments"] == 3
    assert by_prefix[day]["objects"] == len(large)
    assert {"plan_s", "slowest_segment_s", "assemble_archive_s"} <= set(by_prefix[day]["timings"])
    assert by_prefix[f"{SMALL:logs/%Y/%m/%d}/"]["segments"] == 1

    # A re-run finds both days committed: every task is green and every row says skipped,
    # the segment tasks' included (their plan is gone with the commit; nothing to produce).
    before = sorted(keys_in(af.s3, af.dst))
    run, tis = run_dag({"date_from": str(LARGE), "date_to": str(SMALL)})
    assert run.state == "success"
    assert {name: ti.state for name, ti in tis.items() if ti.state != "success"} == {}
    assert {row["status"] for row in xcom_rows(run, "segment")} == {"skipped"}
    assert {p: row["status"] for p, row in report_rows(run).items()} == {day: "skipped",
                                                                         f"{SMALL:logs/%Y/%m/%d}/": "skipped"}
    # Nothing rewritten: the re-check of each day for late objects adds only its day index.
    assert sorted(keys_in(af.s3, af.dst)) == sorted(
        {*before, *(f"archive/{af.src}/{d:logs/%Y/%m/%d}.parts.json" for d in (LARGE, SMALL))})


def test_a_scheduled_runs_large_day_is_sized_once_and_archived_by_segment_tasks(af, monkeypatch):
    """A scheduled run plans one day; its plan task lists the day up to the threshold to see it
    is large. The size task takes that sizing instead of listing the day's first keys again,
    and the prepare task the keys it listed: the plan lists only what comes after them."""
    import s3arch.ops.sizing

    day = date(2026, 8, 20)
    seeded = seed_day(af.s3, af.src, TEMPLATE, day, files_per_hour=2, lines_per_file=20)  # 48 objects
    split_by_size, sized = s3arch.ops.sizing.split_by_size, []

    def counted(job, planned, store, hand_off=None):
        sized.append(planned)
        return split_by_size(job, planned, store, hand_off)

    monkeypatch.setattr(s3arch.ops.sizing, "split_by_size", counted)
    started_after = planned_listing_starts(monkeypatch)
    run, tis = run_dag({}, logical_date=date(2026, 8, 22))  # min_age_days 2: the 20th
    assert run.state == "success"
    prefix = f"{day:logs/%Y/%m/%d}/"
    assert sized == [[[prefix]]]  # by the plan task alone
    assert started_after == [max(seeded)]  # one page held the whole day: the plan listed after it
    assert not [k for k in keys_in(af.s3, af.dst) if "/sized-" in k]  # taken over and cleaned up
    assert tis["size"].state == "success" and tis[("prepare", 0)].rendered_map_index == prefix
    assert {tis[("segment", k)].state for k in range(3)} == {"success"}
    assert report_rows(run)[prefix]["segments"] == 3
    assert read_archive(af.s3, af.dst, f"archive/{af.src}/{day:logs/%Y/%m/%d}.tar.gz") == seeded


def test_segmented_dry_run_writes_nothing_and_estimates_every_day(af):
    seed_day(af.s3, af.src, TEMPLATE, DRY_LARGE, files_per_hour=2, lines_per_file=20)  # 48 objects: segmented
    seed_day(af.s3, af.src, TEMPLATE, DRY_SMALL, files_per_hour=1, lines_per_file=20)
    before = sorted(keys_in(af.s3, af.dst))

    run, tis = run_dag({"date_from": str(DRY_LARGE), "date_to": str(DRY_SMALL), "dry_run": True})

    assert run.state == "success"
    assert {name: ti.state for name, ti in tis.items() if ti.state != "success"} == {}
    assert [k for k in range(3) if ("segment", k) in tis] == [0, 1, 2]  # the fan-out is shown, not run
    # Nothing rewritten: the re-check of each day for late objects adds only its day index.
    assert sorted(keys_in(af.s3, af.dst)) == sorted(
        {*before, *(f"archive/{af.src}/{d:logs/%Y/%m/%d}.parts.json" for d in (LARGE, SMALL))})  # no lease, no plan, no temporaries, no archive
    assert open_uploads(af.s3, af.dst) == []
    rows = report_rows(run)
    large, small = rows[f"{DRY_LARGE:logs/%Y/%m/%d}/"], rows[f"{DRY_SMALL:logs/%Y/%m/%d}/"]
    assert (large["status"], large["segments"], large["objects"]) == ("dry_run", 3, 48)
    assert (small["status"], small["segments"], small["objects"]) == ("dry_run", 1, 24)
    assert large["bytes_out"] > 0  # the estimate
    assert {row["status"] for row in xcom_rows(run, "segment")} == {"dry_run"}


def test_a_failed_segment_task_fails_the_run_even_when_its_day_reports_skipped(af, monkeypatch):
    """The report's rows can all be fine while a task failed (here: the segment tasks of a day
    already archived, made to fail): the run must still be red."""
    import s3arch.archive
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import load_jobs

    seed_day(af.s3, af.src, TEMPLATE, BROKEN, files_per_hour=2, lines_per_file=20)
    job = load_jobs(af.env["S3ARCH_JOBS_FILE"])["seg"]
    assert s3arch.archive.archive_prefix(job.spec_for(job.prefix_for(BROKEN))).status == "archived"

    def broken(*args, **kwargs):
        raise BadArgument("injected: this segment task is broken")

    monkeypatch.setattr(s3arch.archive, "archive_segment", broken)
    run, tis = run_dag({"date_from": str(BROKEN), "date_to": str(BROKEN)})
    assert {tis[("segment", k)].state for k in range(3)} == {"failed"}
    assert tis[("prepare", 0)].state == tis[("assemble", 0)].state == "success"  # both: skipped
    assert tis["report"].state == "failed"
    assert run.state == "failed"


def test_one_large_days_failed_prepare_leaves_the_other_large_day_green(af, monkeypatch):
    """Two large days in one DagRun; one's prepare fails (permanently). Today's main made every
    segment task depend on every prepare: the other day's segments were upstream_failed and
    its assembly failed too. Now each day's segments read their own plan: the other day
    archives, and only the broken day's tasks fail."""
    import s3arch.archive
    from s3arch.core.errors import AccessDenied

    good, bad = date(2026, 8, 12), date(2026, 8, 13)
    seeded = seed_day(af.s3, af.src, TEMPLATE, good, files_per_hour=2, lines_per_file=20)  # 48 objects
    seed_day(af.s3, af.src, TEMPLATE, bad, files_per_hour=2, lines_per_file=20)
    bad_day = f"{bad:logs/%Y/%m/%d}/"
    prepare = s3arch.archive.prepare_segments

    def prepare_fails_for_one_day(spec, count, clients=None, cancel=None, sized=None):
        if spec.source.key == bad_day:
            raise AccessDenied(f"injected: listing {bad_day} was denied")
        return prepare(spec, count, clients, cancel, sized)

    monkeypatch.setattr(s3arch.archive, "prepare_segments", prepare_fails_for_one_day)
    run, tis = run_dag({"date_from": str(good), "date_to": str(bad)})
    index = {tis[("prepare", i)].rendered_map_index: i for i in (0, 1)}
    g, b = index[f"{good:logs/%Y/%m/%d}/"], index[bad_day]
    assert tis[("prepare", b)].state == "failed" and tis[("prepare", g)].state == "success"
    segments = {ti.rendered_map_index: ti.state for key, ti in tis.items() if key[0] == "segment"}
    assert {m: s for m, s in segments.items() if m.startswith(f"{good:logs/%Y/%m/%d}/")} == {
        f"{good:logs/%Y/%m/%d}/ [{k}/3]": "success" for k in (1, 2, 3)}
    assert {s for m, s in segments.items() if m.startswith(bad_day)} == {"failed"}
    assert tis[("assemble", g)].state == "success" and tis[("assemble", b)].state == "failed"
    assert read_archive(af.s3, af.dst, f"archive/{af.src}/{good:logs/%Y/%m/%d}.tar.gz") == seeded
    rows = {row["prefix"]: row for row in xcom_rows(run, "assemble")}
    assert rows[f"{good:logs/%Y/%m/%d}/"]["status"] == "archived" and rows[bad_day]["status"] == "failed"
    assert tis["report"].state == "failed" and run.state == "failed"
    assert open_uploads(af.s3, af.dst) == []
