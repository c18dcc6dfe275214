"""Throttling on the control plane (boto3): listing pages, part uploads and every other call
are retried for as long as S3 answers 503 SlowDown, within the throttle budget.

botocore's standard retries give a call 8 attempts (about a minute of backoff at most) from a
retry quota shared by the whole client; a prefix that S3 throttles for minutes while it
re-partitions would fail its listing or an upload after that. ``install`` adds a
``needs-retry`` handler after botocore's own: while botocore retries, its delay is the one used;
once botocore gives up on a throttled answer (attempts or quota spent), this handler goes on
with ``backoff.THROTTLED`` (tasks/core/backoff.py, as the fetcher does) until the call has
been throttled for the budget's seconds (--throttle-budget, else ``S3ARCH_THROTTLE_BUDGET``).
Faults other than throttling keep botocore's attempts. Throttled answers are counted per client
(``throttled``), for the run's summary.
"""

from __future__ import annotations

import threading

from s3arch.core.backoff import Throttling
from s3arch.io.classify import THROTTLE_CODES
from s3arch.core.config import resolve_throttle_budget

__all__ = ["ControlThrottling", "install", "throttled"]


class ControlThrottling:
    """The ``needs-retry`` handler of one boto3 client, and its count of throttled answers."""

    def __init__(self, budget: float | None = None):
        self.budget = resolve_throttle_budget(budget)
        self.throttled = 0
        self._lock = threading.Lock()

    def needs_retry(self, response=None, request_dict=None, **_) -> float | None:
        if response is None or request_dict is None:
            return None  # a connection fault: botocore's attempts, as before
        http, parsed = response
        status = getattr(http, "status_code", None)
        code = str(((parsed or {}).get("Error") or {}).get("Code") or "")
        if not (code in THROTTLE_CODES or ((not code or code.isdigit()) and status in (429, 503))):
            return None
        with self._lock:
            self.throttled += 1
        # One Throttling per call: botocore keeps the context across the call's attempts.
        throttling = request_dict.setdefault("context", {}).setdefault("s3arch_throttling", Throttling())
        return throttling.next_pause(self.budget)  # None once spent: botocore raises it (Throttled)


def install(client, budget: float | None = None) -> ControlThrottling:
    """Wait out throttling on ``client`` beyond botocore's own retries (once per client)."""
    existing = getattr(client.meta, "s3arch_throttling", None)
    if existing is not None:
        return existing
    handler = ControlThrottling(budget)
    service = client.meta.service_model.service_id.hyphenize()
    client.meta.events.register(f"needs-retry.{service}", handler.needs_retry, unique_id=f"s3arch-throttling-{service}")
    client.meta.s3arch_throttling = handler
    return handler


def throttled(client) -> int:
    """Throttled answers ``client`` has had so far (0 without ``install``)."""
    handler = getattr(client.meta, "s3arch_throttling", None)
    return handler.throttled if handler is not None else 0
