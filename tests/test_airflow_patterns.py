"""A job whose day spans many prefixes, run by Airflow (dag.test() against MinIO): split by
account, the archive DAG maps one task per account and day, and the restore DAG brings a
day's accounts back."""

from __future__ import annotations

from datetime import date, datetime, timezone

import pytest

from helpers import ROOT, airflow_with_log_job, keys_in, read_archive, seed, use_airflow_home

ORG_TEMPLATE = "AWSLogs/o-exampleorg/*/CloudTrail/*/{date:%Y/%m/%d}/"
ACCOUNTS = ("111122223333", "444455556666", "777788889999")
DAY = date(2026, 9, 21)


def _trail(day: date) -> dict[str, bytes]:
    return {f"AWSLogs/o-exampleorg/{a}/CloudTrail/{r}/{day:%Y/%m/%d}/{a}_CloudTrail_{r}_{day:%Y%m%d}T0005Z_x.json.gz":
            f"{a} {r} {day}\n".encode() * 30 for a in ACCOUNTS for r in ("us-east-1", "eu-west-1")}


@pytest.fixture(scope="module")
def trail_af(minio, tmp_path_factory):
    airflow, s3, src, dst = airflow_with_log_job(minio, tmp_path_factory.mktemp("trail-home"), "trail",
                                                 prefix_template=ORG_TEMPLATE, split_by=1)
    with pytest.MonkeyPatch.context() as mp:
        use_airflow_home(mp, airflow.env)
        mp.syspath_prepend(str(ROOT / "plugins"))
        yield airflow, s3, src, dst


def _run(dag_id: str, conf: dict):
    from airflow.dag_processing.dagbag import DagBag
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    run = bag.dags[dag_id].test(logical_date=datetime(2026, 10, 1, tzinfo=timezone.utc), run_conf=conf)
    with create_session() as session:
        tis = session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=run.run_id).all()
        session.expunge_all()
    return run, tis


@pytest.mark.slow  # a whole DagRun through dag.test(), then the restore of the day: end to end
def test_a_split_job_maps_one_task_per_account_and_restores_the_day(trail_af):
    _, s3, src, dst = trail_af
    day = _trail(DAY)
    seed(s3, src, {**day, **_trail(date(2026, 9, 22))})
    run, tis = _run("s3_archive__trail", {"date_from": DAY.isoformat(), "date_to": DAY.isoformat()})
    assert run.state == "success"
    archive_tasks = [ti for ti in tis if ti.task_id == "archive"]
    assert len(archive_tasks) == len(ACCOUNTS) and all(ti.state == "success" for ti in archive_tasks)
    for account in ACCOUNTS:
        members = read_archive(s3, dst, f"archive/{src}/AWSLogs/o-exampleorg/{account}/CloudTrail/*/"
                                        f"{DAY:%Y/%m/%d}.tar.gz")
        assert members == {k: v for k, v in day.items() if f"/{account}/" in k}

    run, tis = _run("s3_restore__trail", {"date_from": DAY.isoformat(), "date_to": DAY.isoformat(),
                                          "target": f"s3://{dst}/back/"})
    assert run.state == "success", [(ti.task_id, ti.state) for ti in tis]
    assert sorted(keys_in(s3, dst, "back/")) == sorted(f"back/{k}" for k in day)
