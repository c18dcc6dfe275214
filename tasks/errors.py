"""Typed errors of the engine.

Every error the engine raises on purpose is an ``ArchiverError``. ``retryable`` tells a
scheduler (the Airflow layer) whether another try can help: throttling, 5xx and network
faults are already retried with backoff inside the engine, so what escapes as retryable is
a fault that outlasted those retries; everything else needs a person to change something,
and the message says what.
"""

from __future__ import annotations


class ArchiverError(Exception):
    retryable = False
    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None):
        self.hint = hint
        super().__init__(message if not hint else f"{message} ({hint})")


class BadArgument(ArchiverError):
    """A parameter is malformed or inconsistent."""


class BucketMissing(ArchiverError):
    """The named bucket does not exist (or is in another account)."""


class AccessDenied(ArchiverError):
    """The credentials may not do what was asked."""


class BadCredentials(ArchiverError):
    """The access key or signature is not accepted."""


class StorageClassRejected(ArchiverError):
    """The endpoint does not support the storage class asked for."""


class WrongRegion(ArchiverError):
    """The bucket lives in another region than the client was configured for."""


class ArchivedObjectNotReadable(ArchiverError):
    """The object is in a Glacier class and must be restored before it can be read."""


class SourceChanged(ArchiverError):
    """A listed object changed or vanished before it was archived; the prefix is not committed.

    Retryable: a later run lists again and archives the new state.
    """

    retryable = True


class DestinationConflict(ArchiverError):
    """The destination already holds something this run must not replace."""


class IntegrityError(ArchiverError):
    """What S3 stored (or returned) differs from what was written (or listed)."""

    retryable = True


class TransientError(ArchiverError):
    """Throttling, 5xx or network faults that outlasted the engine's own retries."""

    retryable = True
    exit_code = 3


class EmptyPrefix(ArchiverError):
    """The source prefix holds no objects; nothing was written."""

    exit_code = 4
