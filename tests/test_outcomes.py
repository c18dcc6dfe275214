"""One mapping from a failure to what it means (``s3arch.core.errors.outcome``): the CLI's exit
code, and for Airflow retry, fail, or fail as a bug. Each place that ends a run reads it: the
CLI, the operators (an archive step's prefixes, the restore's steps), the restore trigger's
events, and a segment worker's error sent to its parent. Pure logic, no server: the engine steps
are stubs that raise."""

from __future__ import annotations

import asyncio

import pytest

from helpers import run_one_segment_inline


def test_every_failure_maps_to_one_exit_code_retry_and_bug():
    from s3arch.core.errors import BadArgument, ConcurrentRun, EmptyPrefix, MalformedRequest, RestoreLapsed, outcome

    assert outcome(ConcurrentRun("another run holds it"))[:3] == (3, True, False)
    assert outcome(BadArgument("no such codec"))[:3] == (2, False, False)
    assert outcome(EmptyPrefix("nothing there"))[:3] == (4, False, False)
    assert outcome(RestoreLapsed("expired"))[:3] == (3, True, False)
    assert outcome(MalformedRequest("S3 said 400"))[:3] == (1, False, True)
    bug = outcome(KeyError("no such key"))
    assert bug[:3] == (1, False, True) and bug.message == "KeyError: 'no such key'" and bug.error == "KeyError"
    interrupted = outcome(KeyboardInterrupt())
    assert interrupted.exit_code == 130 and "uploads in progress were aborted" in interrupted.message


def test_an_error_sent_across_processes_keeps_its_class_status_retryable_and_hint():
    from s3arch.core.errors import ArchiverError, ConcurrentRun
    from s3arch.io.classify import error_for
    from s3arch.produce.segments import PlanOutdated

    sent = error_for("", 412, "", what="commit s3://b/a.tar.gz", subject="commit")
    copy = ArchiverError.from_dict(sent.to_dict())
    assert type(copy) is ConcurrentRun and copy.status == 412 and copy.retryable and str(copy) == str(sent)
    # An Airflow segment task's PlanOutdated is permanent, though the class is retryable.
    outdated = PlanOutdated("segment 1/2: the source changed", retryable=False)
    copy = ArchiverError.from_dict(outdated.to_dict())
    assert type(copy) is PlanOutdated and not copy.retryable and copy.exit_code == 2
    assert str(copy).count("a new plan is made") == 1


def test_a_segment_workers_error_reaches_the_parent_with_its_status_and_is_not_retried_if_permanent(monkeypatch):
    from s3arch.core.errors import AccessDenied
    from s3arch.io.classify import error_for

    starts = []

    def worker(spec, connection, layout, plan, k, send):
        starts.append(k)
        send.send(error_for("AccessDenied", 403, "denied", what="GET s3://src/day/1.log").to_dict())
        send.close()

    with pytest.raises(AccessDenied) as denied:
        run_one_segment_inline(monkeypatch, worker)
    assert denied.value.status == 403 and not denied.value.retryable and starts == [0]
    assert str(denied.value).startswith("segment 1/1: GET s3://src/day/1.log: access denied")


class TaskInstanceStub:
    def __init__(self):
        self.pushed = {}

    def xcom_push(self, key, value):
        self.pushed[key] = value


def restore_operator():
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    return S3RestoreArchiveOperator(task_id="restore", source_bucket="app-logs", prefix="logs/2026/11/01/",
                                    destination="s3://vault/archive/")


def test_a_bug_in_a_restore_fails_it_without_spending_retries():
    """The restore's guard had no branch for a bug: a KeyError in a restore was retried."""
    from airflow.sdk.exceptions import AirflowFailException
    from s3arch_airflow.restore import RESTORE_ROWS_XCOM_KEY

    ti = TaskInstanceStub()
    with pytest.raises(AirflowFailException, match="a bug, not retried: KeyError") as raised:
        restore_operator()._guard({"ti": ti}, lambda: {}["no such key"])
    assert isinstance(raised.value.__cause__, KeyError)
    assert [(r["status"], r["retryable"]) for r in ti.pushed[RESTORE_ROWS_XCOM_KEY]] == [("failed", False)]


def trigger_events(monkeypatch, control) -> list[dict]:
    """The events the restore trigger sends when making its client does ``control()`` (its
    hook's ``engine_clients``, which makes the engine's clients from the connection)."""
    from s3arch_airflow.hooks import S3ArchHook
    from s3arch_airflow.triggers import ArchiveRestoredTrigger

    trigger = ArchiveRestoredTrigger(bucket="vault", key="archive/a.tar.gz", aws_conn_id=None)
    monkeypatch.setattr(S3ArchHook, "engine_clients", lambda hook: control())

    async def collect():
        return [event.payload async for event in trigger.run()]

    return asyncio.run(collect())


def test_the_restore_trigger_sends_the_errors_outcome_and_the_task_fails_as_that_error_would(monkeypatch):
    """The trigger flattened an engine error to text, and the task took every event as
    retryable (a None event raised AttributeError)."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException
    from s3arch.core.errors import BadArgument, TransientError
    from s3arch_airflow.restore import RESTORE_ROWS_XCOM_KEY

    def denied():
        raise BadArgument("Airflow connection 'aws' does not exist", hint="create it")

    def broken():
        return {}["no such key"]

    def unreachable():
        raise TransientError("HEAD s3://vault/archive/a.tar.gz: 503")

    [permanent] = trigger_events(monkeypatch, denied)
    assert permanent["status"] == "error" and permanent["error"] == "BadArgument"
    assert (permanent["retryable"], permanent["bug"], permanent["exit_code"]) == (False, False, 2)
    [bug] = trigger_events(monkeypatch, broken)
    assert bug["bug"] and not bug["retryable"] and bug["message"] == "KeyError: 'no such key'"
    [transient] = trigger_events(monkeypatch, unreachable)
    operator = restore_operator()
    for event, raised, retryable in ((permanent, AirflowFailException, False), (bug, AirflowFailException, False),
                                     (transient, AirflowException, True), (None, AirflowException, True)):
        ti = TaskInstanceStub()
        with pytest.raises(raised) as failed:
            operator.execute_complete({"ti": ti}, event)
        assert isinstance(failed.value, AirflowFailException) is (raised is AirflowFailException)
        [row] = ti.pushed[RESTORE_ROWS_XCOM_KEY]
        assert row["status"] == "failed" and row["retryable"] is retryable and row["error"]
