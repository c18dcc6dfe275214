"""The restore DAG, as on-call would use it: a real dag.test() run against moto server whose
archives are in GLACIER, with the wait on the triggerer exercised; and the trigger itself."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import date, datetime, timezone

import pytest

from devtools.sample_data import seed_day
from faultproxy import Fault, FaultProxy
from helpers import LOG_TEMPLATE, ROOT, airflow_with_log_job, keys_in, run_json, use_airflow_home


pytestmark = pytest.mark.slow  # an in-process Airflow restoring from Glacier on moto


DAG_ID = "s3_restore__oncall"


class _StubControl:
    """HeadObject answers that walk through a restore: not yet done twice, then done."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.heads = 0

    def head_object(self, Bucket, Key):
        self.heads += 1
        restore = self.answers.pop(0)
        return {"StorageClass": "GLACIER", **({"Restore": restore} if restore else {})}


def _clients_of(control):
    """What ``S3ArchHook.engine_clients`` returns, for a trigger that uses only its ``store``."""
    from s3arch.io.store import Store

    return lambda hook: type("Clients", (), {"control": control, "store": Store(control)})()


def test_trigger_waits_through_ongoing_restores_and_fires_once_restored(glacier_airflow, monkeypatch):
    from s3arch_airflow.hooks import S3ArchHook
    from s3arch_airflow.triggers import ArchiveRestoredTrigger

    stub = _StubControl(['ongoing-request="true"', 'ongoing-request="true"',
                         'ongoing-request="false", expiry-date="Fri, 27 Nov 2026 00:00:00 GMT"'])
    trigger = ArchiveRestoredTrigger(bucket="vault", key="a/day.tar.gz", aws_conn_id=None, poll_interval=0.01)
    monkeypatch.setattr(S3ArchHook, "engine_clients", _clients_of(stub))
    kind, kwargs = trigger.serialize()
    assert kind == "s3arch_airflow.triggers.ArchiveRestoredTrigger" and kwargs["key"] == "a/day.tar.gz"

    async def first_event():
        async for event in trigger.run():
            return event

    event = asyncio.run(first_event())
    assert stub.heads == 3 and event.payload["status"] == "restored"
    assert event.payload["expiry"] == "Fri, 27 Nov 2026 00:00:00 GMT"

    expired = ArchiveRestoredTrigger(bucket="vault", key="a/day.tar.gz", aws_conn_id=None, poll_interval=0.01)
    monkeypatch.setattr(S3ArchHook, "engine_clients", _clients_of(_StubControl([None])))
    assert asyncio.run(_first(expired)).payload["status"] == "error"


async def _first(trigger):
    async for event in trigger.run():
        return event


@pytest.fixture(scope="module")
def glacier_airflow(moto_server, tmp_path_factory):
    """A local Airflow whose job archives into GLACIER on moto, reached through a proxy that
    can hold a restore in the "ongoing" state."""
    proxy = FaultProxy(moto_server.endpoint_url)
    through_proxy = dataclasses.replace(moto_server, endpoint_url=proxy.endpoint_url)
    airflow, s3, src, dst = airflow_with_log_job(through_proxy, tmp_path_factory.mktemp("restore-home"), "oncall",
                                                 storage_class="GLACIER", poll_interval=0.5)
    with pytest.MonkeyPatch.context() as mp:
        use_airflow_home(mp, airflow.env)
        mp.syspath_prepend(str(ROOT / "plugins"))  # as Airflow's plugins folder is for its processes
        yield airflow, proxy, s3, src, dst
    proxy.stop()


def test_restore_dag_defers_until_restored_then_extracts_every_object(glacier_airflow, moto_server, cli_env,
                                                                      reliability):
    from helpers import dag_bag

    airflow, proxy, s3, src, dst = glacier_airflow
    days = (date(2026, 8, 3), date(2026, 8, 4))
    seeded = {}
    for day in days:
        seeded.update(seed_day(s3, src, LOG_TEMPLATE, day, files_per_hour=2, lines_per_file=10))
    described = "logs/2026/08/03/described.json"  # comes back with its headers, metadata and tags
    s3.put_object(Bucket=src, Key=described, Body=b'{"a": 1}', ContentType="application/json",
                  Metadata={"origin": "app-7"}, Tagging="team=ops")
    seeded[described] = b'{"a": 1}'
    env = {**{k: v for k, v in cli_env.items() if not k.startswith("AWS_")}, **moto_server.env()}
    for day in days:
        run_json(env, "archive", f"s3://{src}/{day:logs/%Y/%m/%d}/", f"s3://{dst}/archive/",
                 "--storage-class", "GLACIER")
    out = f"restored-{src[-8:]}"
    s3.create_bucket(Bucket=out)
    # The first HEAD after each restore request and the trigger's first poll see "ongoing".
    ongoing = proxy.add(Fault("header", headers={"x-amz-restore": 'ongoing-request="true"'}, after=1, count=2,
                              match=lambda r: r.method == "HEAD" and r.key.endswith("08/03.tar.gz")))

    bag = dag_bag(str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    run = bag.dags[DAG_ID].test(logical_date=datetime(2026, 11, 1, tzinfo=timezone.utc), run_conf={
        "date_from": "2026-08-03", "date_to": "2026-08-04", "target": f"s3://{out}/back/", "tier": "Bulk"})
    assert run.state == "success"
    assert ongoing.injected == 2, "the restore was never seen in progress, so nothing deferred"
    got = {k: s3.get_object(Bucket=out, Key=k)["Body"].read() for k in keys_in(s3, out)}
    assert got == {f"back/{k}": v for k, v in seeded.items()}
    head = s3.head_object(Bucket=out, Key=f"back/{described}")
    assert head["ContentType"] == "application/json" and head["Metadata"]["origin"] == "app-7"
    assert s3.get_object_tagging(Bucket=out, Key=f"back/{described}")["TagSet"] == [{"Key": "team", "Value": "ops"}]
    rows = _report_rows(run)
    assert [r["prefix"] for r in rows] == ["logs/2026/08/03/", "logs/2026/08/04/"]
    assert all(r["status"] == "restored" for r in rows) and sum(r["objects"] for r in rows) == len(seeded)
    reliability.record("restore DAG on GLACIER archives (moto), restore held 'ongoing'", "2 days",
                       f"task deferred, trigger polled until restored; {len(seeded)} objects byte for byte")


def _report_rows(run) -> list[dict]:
    import json

    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        value = session.query(XComModel.value).filter_by(dag_id=DAG_ID, run_id=run.run_id, task_id="report",
                                                         key="return_value").scalar()
    return json.loads(value) if isinstance(value, str) else value
