"""How every resend the engine makes waits, and how many it makes: one policy type, and each
policy side by side with the reason it differs from the others.

A ``Backoff`` pauses before its n-th resend for a ceiling that doubles from ``base`` up to
``cap``, drawn at random from its top ``jitter`` share (1.0: full jitter, anywhere from 0 to
the ceiling, so that many requests failed at once do not come back at once; 0.0: the
ceiling itself). ``retries`` is how many resends follow the first try (None: as long as a
budget of seconds lasts, ``Throttling``).

| policy | base | cap | retries | jitter | where | why it differs |
|---|---|---|---|---|---|---|
| ``BOTOCORE`` | 1 | 20 | 7 | full | every boto3 call | botocore's standard mode pauses by itself; only its attempts are ours: about a minute in all |
| ``EXPIRED_TOKEN`` | 0.25 | 2 | 4 | none | boto3, ExpiredToken | botocore refreshes credentials meanwhile; a fixed short pause is enough |
| ``THROTTLED`` | 1 | 20 | budget | full | boto3, fetcher, extract's PUTs | S3 asks for fewer requests: waited out for the throttle budget, not a count |
| ``CONNECTION`` | 0.2 | 5 | 8 | full | plain GET path | a reset or 5xx before the answer: the one layer that resends it (about 20 s at most), as the CRT client's 6 tries and the fetcher's 3 rounds of them did |
| ``CRT`` | 0.5 | 20 | 5 | full | CRT S3 client (``S3ARCH_GET_PATH=crt``) | awscrt's own retries: its defaults, a bucket never drained |
| ``FETCH`` | 0.2 | 0.4 | 2 | none | fetcher | only what the connection could not resend (a body cut after bytes were handed on, a stalled request, a checksum mismatch); a fault the connection gave up on is not sent again (``ArchiverError.retries_spent``) |
| ``BODY_READ`` | 0.3 | 5 | 4 | 40 % | boto3 body reads | a read cut short resumes from its last byte: about as long as botocore's retries |
| ``EXTRACT_PUT`` | 0.5 | 8 | 4 | full | extract's PUTs, a body cut (400), a stalled PUT | a loaded server refusing a few of many PUTs; the body is in memory; not what the connection resent already |
| ``SEGMENT_RESTART`` | 0 | 0 | 2 | none | segment worker processes | a new process is the pause; its own requests retried already |
| ``LEASE_RACE`` | 0.1 | 1 | 4 | full | taking a lease | not a fault: the lease changed hands between its read and the conditional write; runs racing for it part at random |
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """Resends after the first try, and the pause before each (see the module's table)."""

    base: float  # seconds: the ceiling of the first pause
    cap: float  # seconds: no ceiling above this
    retries: int | None  # resends after the first try; None: until a budget of seconds is spent
    jitter: float = 1.0  # the top share of the ceiling a pause is drawn from

    @property
    def tries(self) -> int:
        """The first try and every resend (a policy with a budget instead has none to count)."""
        if self.retries is None:
            raise ValueError("a budgeted policy has no count of tries")
        return 1 + self.retries

    def allows(self, resend: int) -> bool:
        """Whether the ``resend``-th resend (1 for the first) may be made."""
        return self.retries is None or resend <= self.retries

    def ceiling(self, resend: int) -> float:
        return min(self.cap, self.base * 2 ** min(max(resend, 1) - 1, 30))

    def pause(self, resend: int) -> float:
        """Seconds to wait before the ``resend``-th resend."""
        ceiling = self.ceiling(resend)
        return ceiling * random.uniform(1.0 - self.jitter, 1.0) if self.jitter else ceiling


BOTOCORE = Backoff(base=1.0, cap=20.0, retries=7)
EXPIRED_TOKEN = Backoff(base=0.25, cap=2.0, retries=4, jitter=0.0)
THROTTLED = Backoff(base=1.0, cap=20.0, retries=None)
CONNECTION = Backoff(base=0.2, cap=5.0, retries=8)
CRT = Backoff(base=0.5, cap=20.0, retries=5)
FETCH = Backoff(base=0.2, cap=0.4, retries=2, jitter=0.0)
BODY_READ = Backoff(base=0.3, cap=5.0, retries=4, jitter=0.4)
EXTRACT_PUT = Backoff(base=0.5, cap=8.0, retries=4)
SEGMENT_RESTART = Backoff(base=0.0, cap=0.0, retries=2, jitter=0.0)
LEASE_RACE = Backoff(base=0.1, cap=1.0, retries=4)


class Throttling:
    """One request's throttled answers, waited out with ``THROTTLED``'s pauses until it has
    been throttled for a budget of seconds (``--throttle-budget``)."""

    __slots__ = ("since", "throttles")

    def __init__(self) -> None:
        self.since: float | None = None
        self.throttles = 0

    def next_pause(self, budget: float) -> float | None:
        """The pause before sending again after one more throttled answer, or None once the
        request has been throttled for ``budget`` seconds."""
        now = time.monotonic()
        if self.since is None:
            self.since = now
        left = budget - (now - self.since)
        if left <= 0:
            return None
        self.throttles += 1
        return min(left, THROTTLED.pause(self.throttles))

    def lasted(self) -> float:
        """Seconds since the first throttled answer."""
        return 0.0 if self.since is None else time.monotonic() - self.since
