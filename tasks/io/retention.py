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

import weakref
from typing import Any
from datetime import datetime, timezone

from s3arch.io.attributes import lock_reason
from s3arch.core.errors import ArchiverError, BadArgument, DestinationConflict, LockNotApplied
from s3arch.io.store import Store


def require_object_lock(store: Store, bucket: str) -> None:
    """Refuse, before any GET, a destination bucket that cannot hold locked objects."""
    try:
        config = store.call("get_object_lock_configuration", f"read the Object Lock configuration of s3://{bucket}",
                            "bucket", Bucket=bucket).get("ObjectLockConfiguration", {})
    except ArchiverError as error:
        if error.code != "ObjectLockConfigurationNotFoundError" and error.status != 404:
            raise
        config = {}
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


def check_applied(store: Store, bucket: str, key: str, wanted: dict) -> dict:
    """HEAD the object just completed and check S3 locked it as asked (an endpoint that
    ignored the lock arguments, or a caller that cannot see the lock, must not leave an
    archive believed immutable)."""
    head = store.call("head_object", f"check the retention of s3://{bucket}/{key}", Bucket=bucket, Key=key)
    state = retention_of(head)
    missing = [name for name, arg in (("mode", "ObjectLockMode"), ("retain_until", "ObjectLockRetainUntilDate"),
                                      ("legal_hold", "ObjectLockLegalHoldStatus")) if arg in wanted and name not in state]
    if missing:
        # S3 returns the x-amz-object-lock-* headers only to a caller allowed to read them, so
        # their absence is either a missing permission or an endpoint without Object Lock.
        raise LockNotApplied(f"the HEAD of s3://{bucket}/{key} did not return the Object Lock asked for (no "
                             f"{', '.join(missing)}): either the caller may not read it (it lacks "
                             "s3:GetObjectRetention / s3:GetObjectLegalHold there) or the endpoint ignored the "
                             "lock; nothing was committed",
                             hint=f"grant s3:GetObjectRetention and s3:GetObjectLegalHold on s3://{bucket}/{key} "
                                  "(docs/SECURITY.md, archive role) and run again; if the caller has them, archive "
                                  "to an endpoint that enforces Object Lock, or without --object-lock/--legal-hold. "
                                  "The archive this try wrote stays, locked, until its retention ends "
                                  "(docs/SECURITY.md, after a failed locked run)")
    return {**state, "applied": "on creation"}


def refuse_locked_overwrite(store: Store, bucket: str, keys: list[str], now: datetime | None = None) -> None:
    """``--overwrite`` must not even start on an archive S3 would keep: name its retention."""
    for key in keys:
        head = store.maybe("head_object", f"check the retention of s3://{bucket}/{key}", Bucket=bucket, Key=key)
        if head is None:
            continue
        reason = lock_reason({"object_lock": retention_of(head)}, now)
        if reason is not None:
            raise DestinationConflict(f"s3://{bucket}/{key} is {reason}: it cannot be replaced or deleted "
                                      "before then, so --overwrite was refused; nothing was read or written",
                                      hint="archive into another destination prefix, or wait until the "
                                           "retention ends (a legal hold must be lifted by whoever placed it)")


# -- scratch objects in a bucket with a default retention -----------------------------------

SCRATCH_HOLD_SECONDS = 3600
_DEFAULT_RETENTION: "weakref.WeakKeyDictionary[object, dict[str, bool]]" = weakref.WeakKeyDictionary()


def has_default_retention(store: Store, bucket: str) -> bool:
    """Whether ``bucket`` locks every new object by default (Object Lock with a
    DefaultRetention), read once per client and bucket; a caller who may not read the
    configuration (403) or a bucket without one: False."""
    known = _DEFAULT_RETENTION.setdefault(store.client, {})
    cached = known.get(bucket)
    if cached is None:
        try:
            config = store.call("get_object_lock_configuration", f"read the Object Lock configuration of s3://{bucket}",
                                "bucket", Bucket=bucket).get("ObjectLockConfiguration", {})
        except ArchiverError as error:
            if error.status not in (400, 403, 404, 405, 501):
                raise
            if error.code == "NoSuchBucket":
                return False  # not remembered: asked beside the bucket's check, which fails the run
            config = {}
        cached = bool(config.get("ObjectLockEnabled") == "Enabled" and config.get("Rule", {}).get("DefaultRetention"))
        known[bucket] = cached
    return cached


def scratch_lock_args(store: Store, bucket: str) -> dict:
    """PutObject arguments for a scratch object (the lease, the delete probe) in ``bucket``:
    none, unless the bucket's default retention would lock it (for years, as a noncurrent
    version nobody may delete); then an explicit GOVERNANCE retention of one hour instead,
    which ``delete_scratch_version`` lifts at once with BypassGovernanceRetention (S3 lets a
    PutObject name its own retention, never none, in such a bucket)."""
    if not has_default_retention(store, bucket):
        return {}
    from datetime import timedelta

    return {"ObjectLockMode": "GOVERNANCE",
            "ObjectLockRetainUntilDate": datetime.now(timezone.utc) + timedelta(seconds=SCRATCH_HOLD_SECONDS)}


def delete_scratch_version(store: Store, bucket: str, key: str, version_id: str) -> None:
    """Delete one version of a scratch object this run wrote, for good (no delete marker),
    bypassing the GOVERNANCE retention ``scratch_lock_args`` gave it."""
    bypass: dict[str, Any] = {"BypassGovernanceRetention": True} if has_default_retention(store, bucket) else {}
    store.call("delete_object", f"delete the scratch object s3://{bucket}/{key} (version {version_id})",
               Bucket=bucket, Key=key, VersionId=version_id, **bypass)
