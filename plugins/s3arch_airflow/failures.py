"""How a failure fails an Airflow task, in one place, from the engine's ``outcome``
(tasks/core/errors.py), as the CLI's exit code comes from it: what another try can help is
retried (``AirflowException``), anything else fails at once (``AirflowFailException``: not
retried, whatever ``retries`` says), a bug says so and keeps its traceback, and Airflow's own
stops (a timeout, a kill signal) go on as they are. The operators, the restore trigger's events
and the DAGs' plan and measure tasks all fail through here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from s3arch_airflow.compat import AirflowException, AirflowFailException

if TYPE_CHECKING:
    from s3arch.core.errors import Failure


def _airflows_own(exc: BaseException) -> bool:
    return isinstance(exc, AirflowException) or not isinstance(exc, Exception)


def task_error(what: str, failure: Failure) -> AirflowException:
    """The exception that fails the task for ``failure``; ``what`` names the work."""
    if failure.bug:
        return AirflowFailException(f"{what}: a bug, not retried: {failure.message}")
    if failure.retryable:
        return AirflowException(f"{what}: {failure.message}")
    return AirflowFailException(f"{what}: {failure.message} (fails permanently: not retried)")


def fail_task(what: str, exc: BaseException) -> NoReturn:
    """Fail the task for ``exc`` (call it where ``exc`` was caught)."""
    from s3arch.core.errors import outcome

    if _airflows_own(exc):
        raise exc
    raise task_error(what, outcome(exc)) from exc


def fail_if_any(failed: Sequence[tuple[str, Exception]], total: int, not_run: Sequence[str], stop: str | None) -> None:
    """Fail a task of ``total`` prefixes if any ``failed`` ((prefix, engine error) pairs) or
    some were ``not_run`` because of a ``stop`` from above: then the stop is its outcome,
    whatever failed before it. Else it is retried if any prefix can be helped by another try
    (the done ones skip)."""
    from s3arch.core.errors import Cancelled, outcome

    message = "; ".join(f"{p}: {e}" for p, e in failed)
    if not_run:
        stopped = outcome(Cancelled(f"{stop}: {len(not_run)} of {total} prefix(es) not run ({', '.join(not_run)})"))
        raise task_error("stopped", stopped._replace(message="; ".join(filter(None, (stopped.message, message)))))
    if failed:
        failures = [outcome(e) for _, e in failed]
        worst = next((f for f in failures if f.retryable), failures[0])
        raise task_error(f"{len(failed)} of {total} prefix(es) failed", worst._replace(message=message))


def failed_fields(exc: BaseException) -> dict[str, Any]:
    """A failed row's ``error`` and ``retryable`` for ``exc``."""
    from s3arch.core.errors import outcome

    if isinstance(exc, AirflowException):
        return {"error": "see the task log", "retryable": not isinstance(exc, AirflowFailException)}
    failure = outcome(exc)
    return {"error": failure.message, "retryable": failure.retryable}
