"""The Airflow side of the S3 boundary, as the amazon provider splits it: a hook owns the
connection and the engine's clients made from it; operators, the DAGs' inline tasks, the
restore trigger and the catalog page ask a hook for clients and never build them.

A job may name a connection per duty (``aws_conn_id`` for archiving, ``restore_conn_id`` for
the restore DAG, ``catalog_conn_id`` for the api-server's catalog and the scrub), each
defaulting to ``aws_conn_id``, so each runs with the least privilege of its role
(docs/SECURITY.md)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator, Literal

from airflow.providers.amazon.aws.hooks.s3 import S3Hook

if TYPE_CHECKING:
    from s3arch.io.s3 import S3Clients
    from s3arch.ops.archive_job import ArchiveJob

Duty = Literal["archive", "restore", "catalog"]


class S3ArchHook(S3Hook):
    """An S3Hook that makes the engine's clients from its connection: its session
    (credentials and region), the connection's endpoint_url, ``verify`` and botocore config;
    with ``expected_owner``, every request names the account that must own the bucket; calls
    stay throttled at most ``throttle_budget`` seconds (default S3ARCH_THROTTLE_BUDGET, else 900).
    The clients are made once per hook: one task's steps share them."""

    hook_name = "S3 Archiver"

    def __init__(self, *args: Any, expected_owner: str | None = None, throttle_budget: float | str | None = None,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.expected_owner = expected_owner
        self.throttle_budget = throttle_budget
        self._engine_clients: S3Clients | None = None

    @classmethod
    def for_job(cls, job: ArchiveJob, duty: Duty = "archive") -> S3ArchHook:
        """The hook of ``job``'s connection for ``duty``."""
        return cls(aws_conn_id=job.conn_id_for(duty), expected_owner=job.expected_owner,
                   throttle_budget=job.throttle_budget)

    def engine_clients(self) -> S3Clients:
        if self._engine_clients is None:
            self._engine_clients = self._make_engine_clients()
        return self._engine_clients

    def _make_engine_clients(self) -> S3Clients:
        from s3arch.core.config import resolve_throttle_budget
        from s3arch.core.errors import BadArgument
        from s3arch.io.s3 import S3Clients

        if self.aws_conn_id:
            # The provider would quietly fall back to the default credential chain and AWS
            # endpoint for a missing connection: for an archiver that is a wrong account.
            from airflow.exceptions import AirflowNotFoundException

            try:
                self.get_connection(self.aws_conn_id)
            except AirflowNotFoundException:
                raise BadArgument(f"Airflow connection {self.aws_conn_id!r} does not exist",
                                  hint="create it (Admin > Connections, type aws, endpoint_url in "
                                       "the extra for MinIO) or set aws_conn_id=None for the "
                                       "default AWS credential chain") from None
        # The connection's region, else the session's own chain: the hook's conn_region_name
        # would make (and throw away) a boto3 client of its own to read it, 0.17 s per task.
        session = self.get_session(region_name=self.region_name)
        return S3Clients.from_session(session, self.conn_config.get_service_endpoint_url("s3"),
                                      verify=self.verify if self.verify is not None else self.conn_config.verify,
                                      botocore_config=self.config,
                                      throttle_budget=resolve_throttle_budget(self.throttle_budget),
                                      expected_owner=self.expected_owner)


@contextmanager
def failing_task(what: str) -> Iterator[None]:
    """Run the block as a task's work: any failure in it fails the task as its outcome says
    (``failures.fail_task``; ``what`` names the work in the message)."""
    from s3arch_airflow.failures import fail_task

    try:
        yield
    except BaseException as exc:
        fail_task(what, exc)
