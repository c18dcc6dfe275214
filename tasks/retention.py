"""Object Lock on the destination: archives nobody can alter before their retention ends.

With ``--object-lock MODE --retain-days N`` (and/or ``--legal-hold``) the archive, its
manifest and its index are created under retention (the lock arguments go on the
CreateMultipartUpload / PutObject that creates each, ``ArchiveSpec.lock_args``), so none of
them is ever visible unlocked. This module holds the checks around that: the bucket must have
Object Lock before anything is read, a commit verifies S3 applied the lock before the manifest
makes the archive count, and an ``--overwrite`` of an archive still under retention is refused
with its date.
"""

from __future__ import annotations

from datetime import datetime, timezone

from .attributes import lock_reason
from .errors import IO_ERRORS, BadArgument, DestinationConflict, LockNotApplied, status_of, translate


def require_object_lock(control, bucket: str) -> None:
    """Refuse, before any GET, a destination bucket that cannot hold locked objects."""
    try:
        config = control.get_object_lock_configuration(Bucket=bucket).get("ObjectLockConfiguration", {})
    except IO_ERRORS as exc:
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code == "ObjectLockConfigurationNotFoundError" or status_of(exc) == 404:
            config = {}
        else:
            raise translate(exc, f"read the Object Lock configuration of s3://{bucket}", "bucket") from exc
    if config.get("ObjectLockEnabled") != "Enabled":
        raise BadArgument(f"s3://{bucket} does not have Object Lock enabled, so the archive could not be "
                          "locked; nothing was read or written",
                          hint="archive into a bucket created with Object Lock (aws s3api create-bucket "
                               "--object-lock-enabled-for-bucket), or drop --object-lock/--legal-hold")


def retention_of(head: dict) -> dict:
    """The Object Lock state a HeadObject response shows: mode, retain_until, legal_hold."""
    state = {}
    if head.get("ObjectLockMode"):
        state["mode"] = head["ObjectLockMode"]
    until = head.get("ObjectLockRetainUntilDate")
    if until:
        state["retain_until"] = until if isinstance(until, str) else \
            until.astimezone(timezone.utc).isoformat(timespec="seconds")
    if head.get("ObjectLockLegalHoldStatus") == "ON":
        state["legal_hold"] = "ON"
    return state


def check_applied(control, bucket: str, key: str, wanted: dict) -> dict:
    """HEAD the object just completed and check S3 locked it as asked (an endpoint that
    ignored the lock arguments must not leave an archive believed immutable)."""
    try:
        head = control.head_object(Bucket=bucket, Key=key)
    except IO_ERRORS as exc:
        raise translate(exc, f"check the retention of s3://{bucket}/{key}") from exc
    state = retention_of(head)
    missing = [name for name, arg in (("mode", "ObjectLockMode"), ("retain_until", "ObjectLockRetainUntilDate"),
                                      ("legal_hold", "ObjectLockLegalHoldStatus")) if arg in wanted and name not in state]
    if missing:
        raise LockNotApplied(f"s3://{bucket}/{key} was written without the Object Lock asked for (no "
                             f"{', '.join(missing)}): the endpoint ignored it; nothing was committed",
                             hint="a retry would be ignored the same way: archive to an endpoint and bucket that "
                                  "enforce Object Lock, or without --object-lock/--legal-hold")
    return {**state, "applied": "on creation"}


def refuse_locked_overwrite(control, bucket: str, keys: list[str], now: datetime | None = None) -> None:
    """``--overwrite`` must not even start on an archive S3 would keep: name its retention."""
    for key in keys:
        try:
            head = control.head_object(Bucket=bucket, Key=key)
        except IO_ERRORS as exc:
            if status_of(exc) == 404:
                continue
            raise translate(exc, f"check the retention of s3://{bucket}/{key}") from exc
        reason = lock_reason({"object_lock": retention_of(head)}, now)
        if reason is not None:
            raise DestinationConflict(f"s3://{bucket}/{key} is {reason}: it cannot be replaced or deleted "
                                      "before then, so --overwrite was refused; nothing was read or written",
                                      hint="archive into another destination prefix, or wait until the "
                                           "retention ends (a legal hold must be lifted by whoever placed it)")
