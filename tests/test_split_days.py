"""A split job's days (``split_by``: one archive per account of a CloudTrail organization trail)
in the catalog and the scrub, against a real MinIO: the day is archived only when every account
that logged that day has its archive, the catalog JSON lists each archive (and its parts), and
the scrub checks every archive and reports an unarchived account and late objects per account."""

from __future__ import annotations

import json
from datetime import date

import pytest

from helpers import seed

from s3arch.archive import archive_prefix
from s3arch.ops.catalog.job_catalog import Catalog
from s3arch.ops.jobs import job_from_dict
from s3arch.ops.scrub import scrub

DAY = date(2026, 11, 21)
TODAY = date(2026, 11, 27)
ORG = "o-exampleorg"
ACCOUNTS = ("111122223333", "444455556666", "777788889999")
IDLE = "999900001111"  # an account of the organization that logged nothing on DAY
REGIONS = ("eu-west-1", "us-east-1")


def trail_key(account: str, region: str, n: int, day: date = DAY) -> str:
    return (f"AWSLogs/{ORG}/{account}/CloudTrail/{region}/{day:%Y/%m/%d}/"
            f"{account}_CloudTrail_{region}_{day:%Y%m%d}T00{n:02d}Z_k2Xa.json.gz")


def account_day(account: str) -> str:
    """The source name of one account's day: the region wildcard stays."""
    return f"AWSLogs/{ORG}/{account}/CloudTrail/*/{DAY:%Y/%m/%d}/"


@pytest.fixture
def trail(s3, buckets, clients):
    """Three accounts logged on DAY (the third in its second region only), a fourth only the
    day after; the job splits by account; the first two accounts' archives are made."""
    src, dst = buckets
    seed(s3, src, {trail_key(a, r, n): f'{{"Records": [{n}]}}'.encode() for a in ACCOUNTS
                   for r in (REGIONS if a != ACCOUNTS[2] else REGIONS[1:]) for n in range(3)})
    seed(s3, src, {trail_key(a, REGIONS[0], 0, date(2026, 11, 22)): b"{}" for a in (ACCOUNTS[0], IDLE)})
    job = job_from_dict("trail", {"preset": "cloudtrail", "filters": {"organization": ORG}, "split_by": "account",
                                  "source": f"s3://{src}/", "destination": f"s3://{dst}/archive/",
                                  "storage_class": "STANDARD"})
    assert job.split(clients.store, [job.prefix_for(DAY)]) == [account_day(a) for a in (*ACCOUNTS, IDLE)]
    for account in ACCOUNTS[:2]:
        assert archive_prefix(job.spec_for(account_day(account)), clients).objects == 6
    return job, src


def _view(job, clients) -> dict:
    view = Catalog(job, clients.store).view(DAY, DAY, today=TODAY, refresh=True).to_dict()
    return json.loads(json.dumps(view))  # what the catalog's JSON answers


def test_a_day_with_one_accounts_archive_missing_is_not_archived_and_lists_each_archive(trail, clients):
    job, _ = trail
    view = _view(job, clients)
    day = view["days"][0]
    assert (day["state"], day["objects"]) == ("missing", 12)
    assert [(s["prefix"], s["state"], s.get("objects")) for s in day["splits"]] == [
        (account_day(ACCOUNTS[0]), "archived", 6), (account_day(ACCOUNTS[1]), "archived", 6),
        (account_day(ACCOUNTS[2]), "missing", None)]
    assert (view["totals"]["archived"], view["totals"]["gaps"]) == (0, [DAY.isoformat()])
    result = scrub(job, clients.store, DAY, DAY, sample=1, seed=1)
    assert result.checked == 2 and result.verified == []
    assert [(d.kind, d.prefix) for d in result.drift] == [("split not archived", account_day(ACCOUNTS[2]))]
    assert result.drift[0].detail.startswith(f"{account_day(ACCOUNTS[2])} holds objects and has no archive")


def test_a_day_is_archived_once_every_account_is_and_late_objects_are_reported_per_account(s3, trail, clients):
    job, src = trail
    assert archive_prefix(job.spec_for(account_day(ACCOUNTS[2])), clients).objects == 3
    day = _view(job, clients)["days"][0]
    assert (day["state"], day["objects"], [s["state"] for s in day["splits"]]) == ("archived", 15, ["archived"] * 3)
    assert scrub(job, clients.store, DAY, DAY, sample=1, seed=1).verified == [DAY.isoformat()]

    late = trail_key(ACCOUNTS[1], REGIONS[1], 59)
    seed(s3, src, {late: b'{"Records": ["late"]}'})
    result = scrub(job, clients.store, DAY, DAY, sample=1, seed=1)
    assert result.checked == 3
    assert [(d.kind, d.prefix) for d in result.drift] == [("newer than archive", account_day(ACCOUNTS[1]))]
    assert result.drift[0].detail == f"{account_day(ACCOUNTS[1])}: 1 objects newer than its archive (first: {late})"
    view = _view(job, clients)
    day = view["days"][0]
    assert view["totals"]["late"] == [DAY.isoformat()] and day["late"].startswith(account_day(ACCOUNTS[1]))
    assert [bool(s.get("late")) for s in day["splits"]] == [False, True, False]

    rerun = archive_prefix(job.spec_for(account_day(ACCOUNTS[1])), clients)
    assert (rerun.status, rerun.part, rerun.late) == ("archived", 2, 1)
    assert scrub(job, clients.store, DAY, DAY, sample=1, seed=1).ok
    day = _view(job, clients)["days"][0]
    assert (day["state"], day["objects"], day.get("late")) == ("archived", 16, None)
    assert [s.get("parts") for s in day["splits"]] == [None, 2, None]
