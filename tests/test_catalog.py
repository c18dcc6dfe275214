"""The catalog's day states and the scrub's drift, against MinIO (docs/CATALOG.md)."""

from __future__ import annotations

import time
import uuid
from datetime import date, datetime, timedelta, timezone

import pytest

from helpers import engine_clients, seed

from s3arch.archive import archive_prefix
from s3arch.ops.catalog.job_catalog import Catalog
from s3arch.ops.catalog.prefixes import archive_prefix as job_archive_prefix
from s3arch.ops.catalog.scrub_result import read_scrub_result
from s3arch.ops.catalog.view import (ARCHIVED, BEFORE_START, EMPTY, INCOMPLETE, LOST, MISSING, PENDING, RUNNING,
                                     SOURCES_DELETED, apply_runs)
from s3arch.ops.jobs import job_from_dict
from s3arch.format.manifest import layout_for
from s3arch.core.config import S3Url
from s3arch.ops.scrub import scrub

TODAY = date(2026, 3, 20)


def _job(src, dst, **extra):
    return job_from_dict("cat", {"source": f"s3://{src}/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                 "destination": f"s3://{dst}/archive/", "storage_class": "STANDARD",
                                 "start_date": "2026-03-01", "min_age_days": 2, **extra})


def _seed_day(s3, job, day, n=5):
    prefix = job.prefix_for(day)
    seed(s3, job.source.bucket, {f"{prefix}{i:02d}/app-{i}.log": (f"{day} line {i}\n" * 40).encode()
                                 for i in range(n)})
    return prefix


def _archive(job, clients, day):
    result = archive_prefix(job.spec_for(job.prefix_for(day)), clients)
    assert result.status.value == "archived", result
    return result


def _layout(job, day):
    return layout_for(S3Url(job.source.bucket, job.prefix_for(day)), job.destination)


def test_catalog_states_for_seeded_days(s3, buckets, clients):
    src, dst = buckets
    job = _job(src, dst)
    d = [date(2026, 3, k) for k in range(1, 8)]
    for day in (d[0], d[1], d[2]):
        _seed_day(s3, job, day)
    _archive(job, clients, d[0])
    _archive(job, clients, d[1])
    for key in [o["Key"] for o in s3.list_objects_v2(Bucket=src, Prefix=job.prefix_for(d[1]))["Contents"]]:
        s3.delete_object(Bucket=src, Key=key)  # day 2: sources deleted after archiving
    s3.put_object(Bucket=dst, Key=_layout(job, d[4]).archive_key(".tar.gz"), Body=b"half")  # a dead run's archive
    s3.put_object(Bucket=dst, Key=_layout(job, d[5]).lease_key, Body=b"{}")  # a run at work
    _seed_day(s3, job, TODAY - timedelta(days=1))  # too recent

    catalog = Catalog(job, clients.store)
    started = time.monotonic()
    view = catalog.view(date(2026, 2, 27), TODAY, today=TODAY)
    first_read = time.monotonic() - started
    states = {x.day: x.state for x in view.days}
    assert states["2026-02-27"] == BEFORE_START
    assert states["2026-03-01"] == ARCHIVED
    assert states["2026-03-02"] == SOURCES_DELETED
    assert states["2026-03-03"] == MISSING
    assert states["2026-03-04"] == EMPTY
    assert states["2026-03-05"] == INCOMPLETE
    assert states["2026-03-06"] == RUNNING
    assert states[(TODAY - timedelta(days=1)).isoformat()] == PENDING
    day1 = view.days[2].to_dict()
    assert day1["objects"] == 5 and day1["bytes_in"] > day1["bytes_out"] > 0 and day1["ratio"] > 1
    assert day1["archive_url"] == f"s3://{dst}/archive/{src}/logs/2026/03/01.tar.gz"
    assert day1["separate_monthly_usd"] >= 0 and "archive_monthly_usd" in day1
    # Cheap: one listing of the archives, one delimiter listing per month, one GET per
    # committed day (its index), one GET of the scrub result; no HEAD.
    assert view.requests == {"LIST": 1 + 2, "GET": 2 + 1, "HEAD": 0}, view.requests
    totals = view.to_dict()["totals"]
    assert totals["archived"] == 2 and totals["oldest"] == "2026-03-01" and totals["newest"] == "2026-03-02"
    assert "2026-03-03" in totals["gaps"] and totals["monthly_saving_usd"] >= 0

    # Cached until refreshed; a refresh GETs no index it has already read.
    assert catalog.view(date(2026, 2, 27), TODAY, today=TODAY) is view
    again = catalog.view(date(2026, 2, 27), TODAY, today=TODAY, refresh=True)
    assert again.requests["GET"] == 1 and again.as_of >= view.as_of

    runs = {"2026-03-03": {"state": "failed", "run_id": "r1"}, "2026-03-01": {"state": "failed"},
            "2026-03-02": {"state": "success", "task_id": "assemble"}}
    applied = apply_runs(again, runs)
    states = {x.day: x.state for x in applied.days}
    assert states["2026-03-03"] == "failed" and states["2026-03-01"] == ARCHIVED
    assert states["2026-03-02"] == SOURCES_DELETED  # sources deleted wins over how it was made
    runs["2026-03-01"] = {"state": "success", "task_id": "assemble"}
    assert {x.day: x.state for x in apply_runs(again, runs).days}["2026-03-01"] == "segments"
    # The cached view is left as S3 shows it: the next request's runs apply to it afresh.
    assert catalog.view(date(2026, 2, 27), TODAY, today=TODAY) is again
    assert {x.day: x.state for x in again.days}["2026-03-03"] == MISSING and again.days[4].airflow is None
    print(f"\n[catalog] {len(view.days)} days: first read {first_read * 1000:.0f} ms, {view.requests}")


def test_scrub_catches_each_drift(s3, buckets, clients):
    src, dst = buckets
    job = _job(src, dst)
    days = [date(2026, 3, k) for k in range(1, 6)]
    for day in days:
        _seed_day(s3, job, day, n=12)
        _archive(job, clients, day)
    clean = scrub(job, clients.store, days[0], days[-1], sample=3, seed=1)
    assert clean.ok and clean.checked == 5 and clean.sampled == 15, clean.table()
    assert "no drift" in clean.table() and "scrub cost" in clean.cost_line()

    lay = [_layout(job, d) for d in days]
    s3.delete_object(Bucket=dst, Key=lay[0].archive_key(".tar.gz"))                        # archive missing
    s3.put_object(Bucket=dst, Key=lay[1].archive_key(".tar.gz"), Body=b"not the archive")  # archive changed
    s3.delete_object(Bucket=dst, Key=lay[2].manifest_key)                                  # archive without manifest
    # A member damaged in place, same size: only the sampled SHA-256 can tell... but S3's ETag
    # changes with any rewrite, so this is "archive changed" too; what sampling alone catches
    # is shown by a manifest whose checksum no longer matches (below, via the index).
    result = scrub(job, clients.store, days[0], days[-1], sample=2, seed=2)
    kinds = {(d.day, d.kind) for d in result.drift}
    assert ("2026-03-01", "archive missing") in kinds
    assert ("2026-03-02", "archive changed") in kinds
    assert ("2026-03-03", "archive without manifest") in kinds
    assert not result.ok and set(result.verified) == {"2026-03-04", "2026-03-05"}
    table = result.table()
    assert "2026-03-01" in table and "overwrite" in table and "re-run the day" in table
    # A HEAD of archive and manifest per committed day, and of the manifest again by the check
    # for objects newer than the archive; the index's GET answers for its HEAD.
    assert result.requests["HEAD"] == 3 * 4 and result.cost_usd > 0

    # The catalog shows the scrub's verdicts.
    view = Catalog(job, clients.store).view(days[0], days[-1], today=TODAY)
    by_day = {x.day: x for x in view.days}
    assert by_day["2026-03-04"].scrub["verified"] == result.started[:10]
    assert by_day["2026-03-01"].scrub["drift"][0]["kind"] == "archive missing"
    assert view.to_dict()["totals"]["drift"] == ["2026-03-01", "2026-03-02", "2026-03-03"]


def test_scrub_catches_a_shortened_lock(minio, s3, clients):
    suffix = uuid.uuid4().hex[:10]
    src, dst = f"src-{suffix}", f"dst-{suffix}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst, ObjectLockEnabledForBucket=True)
    job = _job(src, dst, object_lock="GOVERNANCE", retain_days=2)
    day = date(2026, 3, 1)
    _seed_day(s3, job, day)
    _archive(job, clients, day)
    assert scrub(job, clients.store, day, day, sample=1).ok
    lay = _layout(job, day)
    view = Catalog(job, clients.store).view(day, day, today=TODAY)
    assert view.days[0].locked_until >= (datetime.now(timezone.utc) + timedelta(days=1)).date().isoformat()
    # MinIO lets a GOVERNANCE retention be shortened with the bypass header.
    s3.put_object_retention(Bucket=dst, Key=lay.archive_key(".tar.gz"), BypassGovernanceRetention=True,
                            Retention={"Mode": "GOVERNANCE",
                                       "RetainUntilDate": datetime.now(timezone.utc) + timedelta(hours=1)})
    result = scrub(job, clients.store, day, day, sample=0)
    assert [d.kind for d in result.drift] == ["lock shorter"], result.table()
    assert "the archive is retained until" in result.drift[0].detail
    # The manifest's and the index's retention are checked against the job's too.
    for key in (lay.manifest_key, lay.index_key):
        s3.put_object_retention(Bucket=dst, Key=key, BypassGovernanceRetention=True,
                                Retention={"Mode": "GOVERNANCE",
                                           "RetainUntilDate": datetime.now(timezone.utc) + timedelta(hours=1)})
    details = [d.detail for d in scrub(job, clients.store, day, day, sample=0).drift if d.kind == "lock shorter"]
    assert any(d.startswith("the manifest is retained until") and "the job's 2 days" in d for d in details), details
    assert any(d.startswith("the index is retained until") for d in details), details


def _archived_days(s3, clients, buckets, n_days, objects=12):
    src, dst = buckets
    job = _job(src, dst)
    days = [date(2026, 3, k) for k in range(1, n_days + 1)]
    for day in days:
        _seed_day(s3, job, day, n=objects)
        _archive(job, clients, day)
    return job, days


@pytest.mark.parametrize("damage", [
    pytest.param(lambda body: body[:len(body) // 2], id="truncated-gzip"),  # gzip raises EOFError
    pytest.param(lambda body: b"{not json", id="not-json"),
    pytest.param(lambda body: b'["s3arch-manifest-index"]', id="json-of-another-shape"),
])
def test_scrub_reports_a_damaged_index_and_samples_from_the_manifest(s3, buckets, clients, damage):
    job, days = _archived_days(s3, clients, buckets, 2)
    dst = buckets[1]
    lay = _layout(job, days[0])
    body = s3.get_object(Bucket=dst, Key=lay.index_key)["Body"].read()
    s3.put_object(Bucket=dst, Key=lay.index_key, Body=damage(body))
    result = scrub(job, clients.store, days[0], days[-1], sample=3, seed=1)
    assert [(d.day, d.kind) for d in result.drift] == [("2026-03-01", "index damaged")], result.table()
    assert "recover the index" in result.table() and result.result_url
    assert result.checked == 2 and result.sampled == 6  # the damaged day's sample came from its manifest
    assert read_scrub_result(clients.store, job)["days"]["2026-03-01"]["drift"][0]["kind"] == "index damaged"
    # The catalog still shows the day's figures (read from the manifest) and names the problem.
    day = Catalog(job, clients.store).view(days[0], days[0], today=TODAY).days[0]
    assert day.state == ARCHIVED and day.objects == 12 and "index" in day.problem


def test_scrub_reports_a_day_whose_archive_manifest_and_index_all_vanished(s3, buckets, clients):
    job, days = _archived_days(s3, clients, buckets, 2, objects=3)
    src, dst = buckets
    assert scrub(job, clients.store, days[0], days[-1], sample=1).ok
    lay = _layout(job, days[0])
    for key in (lay.archive_key(".tar.gz"), lay.manifest_key, lay.index_key):
        s3.delete_object(Bucket=dst, Key=key)
    for key in [o["Key"] for o in s3.list_objects_v2(Bucket=src, Prefix=job.prefix_for(days[0]))["Contents"]]:
        s3.delete_object(Bucket=src, Key=key)  # sources deleted after archiving, as a deleting job does
    result = scrub(job, clients.store, days[0], days[-1], sample=1)
    assert not result.ok and [(d.day, d.kind) for d in result.drift] == [("2026-03-01", "archive missing")]
    assert "all gone" in result.drift[0].detail and "replica" in result.drift[0].action
    view = Catalog(job, clients.store).view(days[0], days[-1], today=TODAY)
    gone = view.days[0]
    assert gone.state == LOST and gone.scrub["drift"][0]["kind"] == "archive missing"
    assert view.totals["gaps"] == ["2026-03-01"] and view.totals["drift"] == ["2026-03-01"]
    # The next scrub still reports it, with the day it was last verified.
    again = scrub(job, clients.store, days[0], days[-1], sample=1)
    assert [d.kind for d in again.drift] == ["archive missing"] and result.started[:10] in again.drift[0].detail


def test_a_damaged_scrub_result_is_replaced_by_the_next_scrub(s3, buckets, clients):
    job, days = _archived_days(s3, clients, buckets, 1, objects=2)
    from s3arch.ops.catalog.scrub_result import scrub_result_key

    s3.put_object(Bucket=buckets[1], Key=scrub_result_key(job), Body=b'{"days": ["not", "a", "dict"]}')
    assert Catalog(job, clients.store).view(days[0], days[0], today=TODAY).days[0].scrub is None
    assert scrub(job, clients.store, days[0], days[0], sample=1).ok
    assert read_scrub_result(clients.store, job)["days"]["2026-03-01"]["verified"]


def test_scrub_reports_a_missing_index_and_a_truncated_manifest(s3, buckets, clients):
    job, days = _archived_days(s3, clients, buckets, 3)
    dst = buckets[1]
    lay = [_layout(job, d) for d in days]
    s3.delete_object(Bucket=dst, Key=lay[0].index_key)  # index gone, manifest whole
    for layout in lay[1:]:  # manifest cut short: day 2 without its index, day 3 with it
        body = s3.get_object(Bucket=dst, Key=layout.manifest_key)["Body"].read()
        s3.put_object(Bucket=dst, Key=layout.manifest_key, Body=body[:len(body) * 2 // 3])
    s3.delete_object(Bucket=dst, Key=lay[1].index_key)
    result = scrub(job, clients.store, days[0], days[-1], sample=2, seed=3)
    kinds = {(d.day, d.kind) for d in result.drift}
    assert kinds == {("2026-03-01", "index missing"), ("2026-03-02", "manifest damaged"),
                     ("2026-03-03", "manifest changed")}, result.table()
    # Day 1 sampled from its manifest read through; day 3 not: its index describes another manifest.
    assert not result.verified and result.sampled == 2
    assert "02.manifest.jsonl.gz is" in next(d.detail for d in result.drift if d.kind == "manifest damaged")


def test_archive_prefix_of_a_job(buckets):
    src, dst = buckets
    assert job_archive_prefix(_job(src, dst)) == f"archive/{src}/logs/"
    job = job_from_dict("ev", {"source": f"s3://{src}/raw/", "prefix_template": "events/dt={date:%Y-%m-%d}/",
                               "destination": f"s3://{dst}/", "storage_class": "STANDARD"})
    assert job_archive_prefix(job) == f"{src}/raw/events/dt="


def test_a_glacier_jobs_restored_day_is_served_from_the_cache(moto_server):
    """A GLACIER job with a restore in the last 30 days passes those days as the restore hint on
    every request: the second request with the same hint makes no S3 request at all."""
    s3 = moto_server.client(max_pool_connections=16)
    suffix = uuid.uuid4().hex[:8]
    src, dst = f"src-{suffix}", f"dst-{suffix}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst)
    clients = engine_clients(moto_server)
    job = _job(src, dst, storage_class="GLACIER")
    day = date(2026, 3, 1)
    _seed_day(s3, job, day)
    _archive(job, clients, day)
    s3.restore_object(Bucket=dst, Key=_layout(job, day).archive_key(".tar.gz"), RestoreRequest={"Days": 7})
    sent = []
    clients.control.meta.events.register("before-send.s3", lambda request, **_: sent.append(request.url))
    catalog = Catalog(job, clients.store)
    view = catalog.view(day, day + timedelta(days=1), today=TODAY, restore_hint={day})
    assert view.days[0].restored_until and view.requests["HEAD"] == 1
    first = len(sent)
    assert first == sum(view.requests.values())
    again = catalog.view(day, day + timedelta(days=1), today=TODAY, restore_hint={day})
    assert again is view and len(sent) == first  # served from memory: no request
    # A restore that ended (no hint any more) is a new read, without the HEAD.
    ended = catalog.view(day, day + timedelta(days=1), today=TODAY)
    assert ended.days[0].restored_until is None and ended.requests["HEAD"] == 0 and len(sent) > first
