"""Bring an archive back from a Glacier storage class so it can be read (docs/RESTORE.md).

Only the archive object is ever restored: the manifest and its index are STANDARD. The state
comes from HeadObject: the storage class says whether a restore is needed at all (GLACIER and
DEEP_ARCHIVE do, GLACIER_IR and the others do not), and the ``Restore`` header says where a
requested restore is (``ongoing-request="true"``, or ``"false", expiry-date="..."``).
Requesting is idempotent: RestoreAlreadyInProgress, or a copy that is already restored, is a
success that says so.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass
from typing import Callable

from s3arch.core.errors import ArchivedObjectNotReadable, ArchiverError, BadArgument, RestoreNotFinished, TransientError
from s3arch.io.store import Store

NEEDS_RESTORE = ("GLACIER", "DEEP_ARCHIVE")
TIERS = ("Expedited", "Standard", "Bulk")
# A sensible polling interval per tier: Expedited answers in minutes, the others in hours.
POLL_SECONDS = {"Expedited": 30.0, "Standard": 300.0, "Bulk": 900.0}


@dataclass
class RestoreState:
    archive: str
    storage_class: str
    state: str  # not-needed | not-restored | in-progress | restored
    expiry: str | None = None
    requested: str | None = None  # what this call did: "requested", "already in progress", ...
    tier: str | None = None

    @property
    def readable(self) -> bool:
        return self.state in ("not-needed", "restored")

    def line(self) -> str:
        if self.state == "not-needed":
            return f"{self.archive} is {self.storage_class}: readable now, no restore needed"
        if self.state == "restored":
            return f"{self.archive} is restored until {self.expiry}"
        if self.state == "in-progress":
            return f"{self.archive}: restore in progress ({self.storage_class})"
        return f"{self.archive}: {self.storage_class}, not restored"

    def to_dict(self) -> dict:
        return {**asdict(self), "readable": self.readable}


def archive_state(store: Store, bucket: str, key: str) -> RestoreState:
    url = f"s3://{bucket}/{key}"
    head = store.call("head_object", f"check the archive {url}", Bucket=bucket, Key=key)
    storage_class = head.get("StorageClass") or "STANDARD"
    if storage_class not in NEEDS_RESTORE:
        return RestoreState(url, storage_class, "not-needed")
    restore = head.get("Restore")
    if not restore:
        return RestoreState(url, storage_class, "not-restored")
    if 'ongoing-request="true"' in restore:
        return RestoreState(url, storage_class, "in-progress")
    expiry = re.search(r'expiry-date="([^"]+)"', restore)
    return RestoreState(url, storage_class, "restored", expiry=expiry.group(1) if expiry else None)


def request_restore(store: Store, bucket: str, key: str, *, tier: str = "Standard", days: int = 7,
                    fallback_tier: str | None = None, restore_store: Store | None = None) -> RestoreState:
    """Ask S3 to restore the archive for ``days`` days at ``tier``; idempotent.
    ``restore_store``: the store for RestoreObject itself (one without retries, so that an
    Expedited refusal falls back at once)."""
    if tier not in TIERS or (fallback_tier and fallback_tier not in TIERS):
        raise BadArgument(f"unknown restore tier {tier if tier not in TIERS else fallback_tier!r}",
                          hint="--tier takes Expedited, Standard or Bulk")
    if not 1 <= days <= 36500:
        raise BadArgument(f"--days {days} is out of range", hint="keep the restored copy 1 to 36500 days")
    state = archive_state(store, bucket, key)
    if state.state == "not-needed":
        return state
    if state.storage_class == "DEEP_ARCHIVE" and tier == "Expedited":
        if not fallback_tier:
            raise BadArgument(f"{state.archive} is DEEP_ARCHIVE, which has no Expedited tier",
                              hint="use --tier Standard (within 12 h) or Bulk (within 48 h)")
        tier = fallback_tier
    try:
        response = (restore_store or store).call(
            "restore_object", f"restore {state.archive} (s3:RestoreObject)", Bucket=bucket, Key=key,
            RestoreRequest={"Days": days, "GlacierJobParameters": {"Tier": tier}})
    except ArchiverError as exc:
        if exc.code == "RestoreAlreadyInProgress" or exc.status == 409:
            state = archive_state(store, bucket, key)
            state.requested, state.tier = "already in progress", tier
            return state
        if exc.code == "GlacierExpeditedRetrievalNotAvailable":
            if fallback_tier and fallback_tier != tier:
                return request_restore(store, bucket, key, tier=fallback_tier, days=days,
                                       restore_store=restore_store)
            raise TransientError(f"{state.archive}: Expedited retrievals are not available right now",
                                 hint="retry later, or pass --fallback-tier Standard") from exc
        raise
    already = response.get("ResponseMetadata", {}).get("HTTPStatusCode") == 200
    state = archive_state(store, bucket, key)
    state.requested = "already restored; expiry extended" if already else "requested"
    state.tier = tier
    return state


def wait_restored(store: Store, bucket: str, key: str, *, timeout: float, interval: float,
                  on_progress: Callable[[RestoreState, float], None] = lambda s, waited: None,
                  sleep: Callable[[float], None] = time.sleep) -> RestoreState:
    """Poll HeadObject until the archive is readable; RestoreNotFinished (retryable: the restore
    goes on in S3) at the deadline."""
    started = time.monotonic()
    while True:
        state = archive_state(store, bucket, key)
        waited = time.monotonic() - started
        if state.readable:
            return state
        if state.state == "not-restored":
            raise ArchivedObjectNotReadable(f"{state.archive} is {state.storage_class} and no restore "
                                            "was requested", hint="s3arch restore ARCHIVE first")
        if waited >= timeout:
            raise RestoreNotFinished(
                f"{state.archive} was still being restored after {waited / 60:.0f} min",
                hint="Standard restores take 3-5 h (12 h from DEEP_ARCHIVE); run the same command "
                     "again to keep waiting")
        on_progress(state, waited)
        sleep(min(interval, max(0.0, timeout - waited)))


def require_readable(store: Store, bucket: str, key: str) -> RestoreState:
    """Fail with the command that helps if the archive cannot be read yet."""
    state = archive_state(store, bucket, key)
    if state.readable:
        return state
    url = state.archive
    if state.state == "in-progress":
        raise ArchivedObjectNotReadable(f"{url} is being restored from {state.storage_class}; not readable yet",
                                        hint=f"s3arch restore {url} --wait waits for it")
    raise ArchivedObjectNotReadable(f"{url} is in {state.storage_class} and not restored",
                                    hint=f"s3arch restore {url} --wait, then run this again")
