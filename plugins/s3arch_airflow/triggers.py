"""ArchiveRestoredTrigger: wait on the triggerer, not a worker, until an archive is restored.

A Bulk restore takes up to 12 hours (48 from DEEP_ARCHIVE); the restore operator defers to
this trigger, which polls HeadObject every ``poll_interval`` seconds and fires once the
``Restore`` header says ``ongoing-request="false"``, or with an error at the deadline.
HeadObject runs in a thread (``asyncio.to_thread``): the amazon provider's async hooks need
aiobotocore, which this project does not install, and one HEAD per interval is no load.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

if TYPE_CHECKING:
    from s3arch.core.errors import Failure


class ArchiveRestoredTrigger(BaseTrigger):
    def __init__(self, *, bucket: str, key: str, aws_conn_id: str | None, region_name: str | None = None,
                 verify: bool | str | None = None, botocore_config: dict | None = None,
                 poll_interval: float = 300.0, deadline: float | None = None, expected_owner: str | None = None):
        super().__init__()
        self.bucket = bucket
        self.key = key
        self.aws_conn_id = aws_conn_id
        self.region_name = region_name
        self.verify = verify
        self.botocore_config = botocore_config
        self.poll_interval = poll_interval
        self.deadline = deadline  # epoch seconds; None waits as long as the task allows
        self.expected_owner = expected_owner  # the job's: its HEADs name the owner as its other requests do

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("s3arch_airflow.triggers.ArchiveRestoredTrigger",
                {"bucket": self.bucket, "key": self.key, "aws_conn_id": self.aws_conn_id,
                 "region_name": self.region_name, "verify": self.verify,
                 "botocore_config": self.botocore_config, "poll_interval": self.poll_interval,
                 "deadline": self.deadline, "expected_owner": self.expected_owner})

    def _store(self):
        from s3arch_airflow.hooks import S3ArchHook

        return S3ArchHook(aws_conn_id=self.aws_conn_id, region_name=self.region_name, verify=self.verify,
                          config=self.botocore_config, expected_owner=self.expected_owner).engine_clients().store

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from s3arch.core.errors import RestoreLapsed, RestoreNotFinished
        from s3arch.restore.glacier import archive_state

        url = f"s3://{self.bucket}/{self.key}"
        try:
            store = await asyncio.to_thread(self._store)
            while True:
                state = await asyncio.to_thread(archive_state, store, self.bucket, self.key)
                if state.readable:
                    yield TriggerEvent({"status": "restored", "archive": url, "expiry": state.expiry})
                    return
                if state.state == "not-restored":
                    raise RestoreLapsed(f"{url} is {state.storage_class} and no restore is in progress (it "
                                        "expired or was never requested)", hint="the task's next try requests it")
                if self.deadline is not None and time.time() >= self.deadline:
                    yield failed_event("timeout", url, RestoreNotFinished(
                        f"{url} was still being restored at the deadline", hint="the task's next try waits again"))
                    return
                self.log.info("%s: restore in progress; next check in %.0fs", url, self.poll_interval)
                await asyncio.sleep(self.poll_interval)
        except Exception as exc:  # noqa: BLE001 - the engine's errors and bugs alike, as the task reads them
            yield failed_event("error", url, exc)


def failed_event(status: str, url: str, exc: Exception) -> TriggerEvent:
    """The event of a wait that failed: the engine's ``outcome`` of ``exc`` (exit code,
    retryable, bug, message), so the task fails as the same error would fail it on a worker."""
    from s3arch.core.errors import outcome

    return TriggerEvent({"status": status, "archive": url, **outcome(exc)._asdict()})


def event_failure(event: dict[str, Any] | None) -> Failure:
    """What a failed event means (``failed_event``). An event of a trigger older than these
    fields, or none at all (the triggerer lost it), is retried as such events always were."""
    from s3arch.core.errors import Failure, TransientError, outcome

    if event is not None and all(name in event for name in Failure._fields):
        return Failure(**{name: event[name] for name in Failure._fields})
    message = (event or {}).get("message") or "the wait for the restore ended without a result"
    return outcome(TransientError(message, hint="the task's next try waits again"))
