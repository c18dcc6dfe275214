"""Typed errors of the engine (S3's answers are classified into them by tasks/io/classify.py).

Every error the engine raises on purpose is an ``ArchiverError``. ``retryable`` tells a
scheduler (the Airflow layer) whether another try can help: throttling, 5xx and network
faults are already retried with backoff inside the engine, so what escapes as retryable is
a fault that outlasted those retries, or a race another try resolves; everything else needs a
person to change something, and the message says what. The exit code follows from
``retryable`` (3 retry later, 2 fix something), so the CLI and Airflow never disagree.
"""

from __future__ import annotations

from typing import NamedTuple


class ArchiverError(Exception):
    retryable = False
    status: int | None = None  # the HTTP status of the S3 answer it came from (``error_for``), if any
    code: str | None = None  # S3's error code in that answer (``NoSuchKey``), if it had one
    # The layer that sent the request resent it until its give-up rule (tasks/core/backoff.py)
    # said stop: no layer above sends it again for the same fault.
    retries_spent = False

    def __init__(self, message: str, *, hint: str | None = None):
        self.message, self.hint = message, hint  # apart, so a segment worker can send both across
        super().__init__(message if not hint else f"{message} ({hint})")

    @property
    def exit_code(self) -> int:
        return 3 if self.retryable else 2

    def to_dict(self) -> dict:
        """The error as plain data, for another process (a segment worker's parent)."""
        return {"error": type(self).__name__, "message": self.message, "hint": self.hint,
                "retryable": self.retryable, "status": self.status, "code": self.code}

    @staticmethod
    def from_dict(data: dict) -> "ArchiverError":
        """The error ``to_dict`` made, as its own class (any loaded subclass; else ArchiverError),
        with its ``retryable`` and ``status``."""
        classes = {cls.__name__: cls for cls in _subclasses(ArchiverError)}
        error = classes.get(data["error"], ArchiverError)(data["message"], hint=data.get("hint"))
        error.retryable, error.status = data.get("retryable", error.retryable), data.get("status")
        error.code = data.get("code")
        return error


def _subclasses(cls: type[ArchiverError]) -> list[type[ArchiverError]]:
    found = [cls]
    for direct in cls.__subclasses__():
        found += _subclasses(direct)
    return found


class BadArgument(ArchiverError):
    """A parameter is malformed or inconsistent."""


class SegmentMissing(ArchiverError):
    """An assembly found a segment of its plan not produced (its task failed or never ran)."""


class BucketMissing(ArchiverError):
    """The named bucket does not exist (or is in another account)."""


class ObjectMissing(ArchiverError):
    """An object the engine expected (an archive, a manifest) is not there."""


class AccessDenied(ArchiverError):
    """The credentials may not do what was asked."""


class BadCredentials(ArchiverError):
    """The access key or signature is not accepted."""


class CredentialsExpired(ArchiverError):
    """Temporary credentials expired mid-run; a new try gets fresh ones."""

    retryable = True


class CertificateUntrusted(ArchiverError):
    """The endpoint's TLS certificate does not verify against the trusted CAs."""


class ClockSkewed(ArchiverError):
    """The machine's clock is too far from S3's for signatures to be accepted."""


class StorageClassRejected(ArchiverError):
    """The endpoint does not support the storage class asked for."""


class WrongRegion(ArchiverError):
    """The bucket lives in another region than the client was configured for."""


class ArchivedObjectNotReadable(ArchiverError):
    """The object is in a Glacier class and must be restored before it can be read."""


class RestoreNotFinished(ArchivedObjectNotReadable):
    """``restore --wait`` reached its timeout while S3 was still restoring: the restore goes on
    in S3, so running the same command again keeps waiting. Retryable (exit 3)."""

    retryable = True


class RestoreLapsed(ArchivedObjectNotReadable):
    """A wait for a restore found none in progress (it expired, or was never requested): the
    restore operator's next try requests it again. Retryable (exit 3)."""

    retryable = True


class LockNotApplied(ArchiverError):
    """The HEAD of what was written shows no Object Lock: the caller lacks
    s3:GetObjectRetention / s3:GetObjectLegalHold, or the endpoint ignores Object Lock; nothing
    was committed. Permanent (exit 2): a retry would see the same; grant the permissions, or
    use an endpoint and bucket that enforce Object Lock."""


class SourceChanged(ArchiverError):
    """A listed object changed or vanished before it was archived; the prefix is not committed.

    Retryable: a later run lists again and archives the new state.
    """

    retryable = True


class DestinationConflict(ArchiverError):
    """The destination already holds something this run must not replace."""


class ConcurrentRun(ArchiverError):
    """Another run of the same prefix holds it (or took it over); this run committed nothing.

    Retryable: the next try finds that run's result (and skips) or its lease expired.
    """

    retryable = True


class Cancelled(ArchiverError):
    """The run was cancelled (Ctrl-C, the Airflow task killed or marked failed): uploads were
    aborted and nothing was committed."""


class UploadLost(ArchiverError):
    """A multipart upload of this run was aborted by someone else."""

    retryable = True


class IntegrityError(ArchiverError):
    """What S3 stored (or returned) differs from what was written (or listed)."""

    retryable = True


class ArchiveDamaged(ArchiverError):
    """A committed prefix whose archive object is missing or differs from its manifest.

    Not retryable: a re-run would only find the same damage; a person decides (see hint).
    """


class SourceDeletionFailed(ArchiverError):
    """The archive is committed, but deleting its sources stopped part way.

    Retryable as its cause is: a re-run with --delete-source (or ``delete-sources``) resumes
    the deletion only, it never re-archives.
    """

    def __init__(self, message: str, *, cause: ArchiverError | None = None, hint: str | None = None):
        self.cause = cause
        self.retryable = cause.retryable if cause is not None else True
        super().__init__(message if cause is None else f"{message}: {cause}", hint=hint)


class LocalFileError(ArchiverError):
    """A file or directory on this machine cannot be written (full disk, read-only, no
    permission): permanent, the message names the path."""


class MalformedRequest(ArchiverError):
    """S3 answered 400 to a request this code built: retrying sends the same request again, so
    it is never "try again"; it is a bug in s3arch (exit 1), and the message says what S3 said."""

    @property
    def exit_code(self) -> int:
        return 1


class TransientError(ArchiverError):
    """Throttling, 5xx or network faults that outlasted the engine's own retries."""

    retryable = True


class Throttled(TransientError):
    """S3 asked for fewer requests (503 SlowDown and the like): retried with a backoff that keeps
    growing for as long as it lasts, within the throttle budget (tasks/io/fetching.py)."""


class EmptyPrefix(ArchiverError):
    """The source prefix holds no objects; nothing was written."""

    @property
    def exit_code(self) -> int:
        return 4


class Failure(NamedTuple):
    """What a failure means to whoever ran the engine (``outcome``)."""

    exit_code: int  # the CLI's: 2 fix something, 3 try again later, 4 empty, 1 a bug, 130 Ctrl-C
    retryable: bool  # another try can help: Airflow retries it, and nothing else
    bug: bool  # a bug in s3arch: never retried; its traceback is kept
    error: str  # the exception's type, as a JSON result names it
    message: str  # what the user reads


def outcome(exc: BaseException) -> Failure:
    """The one mapping from an exception to what it means: the CLI's exit code, and for Airflow
    retry, fail or (a bug) fail saying so. The engine's own errors say it themselves; anything
    else raised as an ``Exception`` is a bug; a stop from outside the engine (Ctrl-C, a timeout
    or kill signal of the scheduler) may be run again."""
    name = type(exc).__name__
    if isinstance(exc, ArchiverError):
        return Failure(exc.exit_code, exc.retryable, exc.exit_code == 1, name, str(exc))
    if isinstance(exc, Exception):
        return Failure(1, False, True, name, f"{name}: {exc}")
    if isinstance(exc, KeyboardInterrupt):
        return Failure(130, True, False, name, "interrupted; uploads in progress were aborted")
    return Failure(3, True, False, name, f"{name}: {exc}")
