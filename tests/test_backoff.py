"""The one retry policy type (tasks/core/backoff.py): pauses stay under a ceiling that doubles
up to the cap, resends stop at the count, a throttled request stops at its budget, and the
module's table says what the policies in code are. Pure logic."""

from __future__ import annotations

import re

import pytest

from s3arch.core import backoff
from s3arch.core.backoff import Backoff, Throttling


def test_full_jitter_pauses_stay_under_a_ceiling_that_doubles_up_to_the_cap():
    policy = Backoff(base=0.2, cap=1.0, retries=5)
    assert [policy.ceiling(n) for n in range(1, 6)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    pauses = [policy.pause(3) for _ in range(500)]
    assert all(0.0 <= p <= 0.8 for p in pauses) and min(pauses) < 0.2 and max(pauses) > 0.6


def test_a_policy_without_jitter_pauses_its_ceiling_and_partial_jitter_its_top_share():
    assert [Backoff(base=0.25, cap=2.0, retries=4, jitter=0.0).pause(n) for n in (1, 2, 3, 4)] == [0.25, 0.5, 1.0, 2.0]
    assert all(0.6 <= Backoff(base=1.0, cap=5.0, retries=4, jitter=0.4).pause(1) <= 1.0 for _ in range(200))


def test_resends_stop_at_the_count_and_a_budgeted_policy_has_no_count():
    policy = Backoff(base=0.1, cap=1.0, retries=2)
    assert [policy.allows(n) for n in (1, 2, 3)] == [True, True, False] and policy.tries == 3
    assert backoff.THROTTLED.allows(10_000)
    with pytest.raises(ValueError):
        _ = backoff.THROTTLED.tries


def test_a_throttled_request_is_sent_again_until_its_budget_is_spent(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(backoff.time, "monotonic", lambda: clock[0])
    throttling = Throttling()
    first = throttling.next_pause(30.0)
    assert first is not None and 0.0 <= first <= backoff.THROTTLED.base
    clock[0] += 29.5
    assert throttling.next_pause(30.0) <= 0.5  # never past what is left of the budget
    clock[0] += 1.0
    assert throttling.next_pause(30.0) is None and throttling.lasted() == 30.5


def test_the_modules_table_lists_every_policy_as_it_is_in_code():
    rows = re.findall(r"^\| ``(\w+)`` \| ([\d.]+) \| ([\d.]+) \| (\w+) \| ([^|]+) \|", backoff.__doc__ or "", re.M)
    policies = {name: value for name, value in vars(backoff).items() if isinstance(value, Backoff)}
    assert sorted(name for name, *_ in rows) == sorted(policies)
    jitters = {"full": 1.0, "none": 0.0}
    for name, base, cap, retries, jitter in rows:
        policy = policies[name]
        word = jitter.strip()
        share = jitters[word] if word in jitters else float(word.rstrip(" %")) / 100
        assert (policy.base, policy.cap, policy.retries, policy.jitter) == (
            float(base), float(cap), None if retries == "budget" else int(retries), share), name
