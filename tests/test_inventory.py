"""Planning a backfill from S3 Inventory, against MinIO: reports written exactly as S3 writes
them (devtools/inventory_reports.py: manifest.json, manifest.checksum, data files), read
without listing the source; bad, damaged and stale reports refused with what to change."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta, timezone

import pytest

from devtools.inventory_reports import write_report
from helpers import ROOT, keys_in, read_archive, run_cli, seed
from s3arch.core.config import S3Url
from s3arch.core.errors import BadArgument, IntegrityError
from s3arch.ops.inventory.days import inventory_days
from s3arch.ops.inventory.planning import plan_from_inventory
from s3arch.ops.inventory.reports import latest_report
from s3arch.ops.jobs import job_from_dict

NOW = datetime(2026, 11, 22, 6, 0, tzinfo=timezone.utc)
LOCATION = "inventories/{src}/daily-all/"
# Keys S3's CSV encoding has to carry: a space, a plus, a percent sign, non-ASCII.
ODD_NAMES = ("with space.log", "a+b.log", "100%.log", "ünïcødé.log")


def day_rows() -> list[tuple[str, int]]:
    rows = [(f"logs/2026/11/{d:02d}/{h:02d}/app-{i}.log", 1000 + i) for d in (19, 20, 21) for h in range(3)
            for i in range(10)]
    rows += [(f"logs/2026/11/20/{name}", 7) for name in ODD_NAMES]
    rows += [("logs/2026/11/notaday/x.log", 5), ("logs/2026/13/01/x.log", 5), ("other/2026/11/20/x.log", 5)]
    return sorted(rows)


def expected_days(rows) -> dict[str, tuple[int, int]]:
    out: dict[str, tuple[int, int]] = {}
    for key, size in rows:
        if key.startswith("logs/2026/11/") and key[13:15].isdigit() and key[15] == "/":
            objects, total = out.get(key[:16], (0, 0))
            out[key[:16]] = (objects + 1, total + size)
    return out


def make_job(src: str, dst: str, inv: str, **extra):
    return job_from_dict("logs", {"source": f"s3://{src}/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                  "destination": f"s3://{dst}/archive/", "storage_class": "STANDARD",
                                  "inventory": f"s3://{inv}/{LOCATION.format(src=src)}", **extra})


@pytest.fixture
def inv(s3):
    import uuid

    name = f"inv-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=name)
    return name


def sizes_of(days) -> dict[str, tuple[int, int]]:
    return {d.prefix: (d.objects, d.bytes) for d in days.days.values()}


@pytest.mark.parametrize("fmt,compress", [("CSV", True), ("CSV", False), ("Parquet", False)])
def test_days_and_sizes_come_from_the_report_with_the_source_never_listed(s3, buckets, inv, clients, fmt, compress):
    """The source bucket is empty: every day and size the plan shows came from the report (CSV
    with URL-encoded keys, gzipped or not, and Parquet), over three data files."""
    src, dst = buckets
    rows = day_rows()
    write_report(s3, inv, LOCATION.format(src=src), src, rows, created=NOW, fmt=fmt, compress=compress,
                 rows_per_file=40)
    job = make_job(src, dst, inv)
    report = latest_report(clients.store, job.inventory, src, now=NOW)
    assert report.file_format == fmt and len(report.files) == 3
    days = inventory_days(job, clients.store, report)
    assert sizes_of(days) == expected_days(rows)
    assert sizes_of(days)["logs/2026/11/20/"] == (30 + len(ODD_NAMES), sum(1000 + i for i in range(10)) * 3 + 28)
    assert days.rows == len(rows) and days.elsewhere == 3
    assert keys_in(s3, src) == []


def test_a_versioned_report_counts_current_objects_only(s3, buckets, inv, clients):
    src, dst = buckets
    rows = [("logs/2026/11/20/a.log", 10, True, False), ("logs/2026/11/20/a.log", 99, False, False),
            ("logs/2026/11/20/b.log", 0, True, True), ("logs/2026/11/20/b.log", 50, False, False),
            ("logs/2026/11/21/c.log", 20, True, False)]
    write_report(s3, inv, LOCATION.format(src=src), src, rows, created=NOW, versioned=True)
    job = make_job(src, dst, inv)
    days = inventory_days(job, clients.store, latest_report(clients.store, job.inventory, src, now=NOW))
    assert sizes_of(days) == {"logs/2026/11/20/": (1, 10), "logs/2026/11/21/": (1, 20)}


def test_the_newest_complete_report_is_read_and_one_still_being_written_is_passed_over(s3, buckets, inv, clients):
    src, dst = buckets
    location = LOCATION.format(src=src)
    write_report(s3, inv, location, src, [("logs/2026/11/20/old.log", 1)], created=NOW - timedelta(days=1))
    write_report(s3, inv, location, src, [("logs/2026/11/20/new.log", 2), ("logs/2026/11/21/n.log", 3)], created=NOW)
    s3.put_object(Bucket=inv, Key=f"{location}{NOW + timedelta(hours=1):%Y-%m-%dT%H-%MZ}/manifest.checksum", Body=b"x")
    s3.put_object(Bucket=inv, Key=f"{location}hive/dt={NOW:%Y-%m-%d-%H-%M}/symlink.txt", Body=b"x")
    job = make_job(src, dst, inv)
    report = latest_report(clients.store, job.inventory, src, now=NOW)
    assert report.created == NOW
    assert sizes_of(inventory_days(job, clients.store, report)) == {"logs/2026/11/20/": (1, 2),
                                                                     "logs/2026/11/21/": (1, 3)}


def test_a_report_older_than_the_bound_is_refused_naming_the_setting(s3, buckets, inv, clients):
    src, dst = buckets
    write_report(s3, inv, LOCATION.format(src=src), src, [("logs/2026/11/20/a.log", 1)],
                 created=NOW - timedelta(days=3))
    job = make_job(src, dst, inv)
    with pytest.raises(BadArgument, match=r"3\.0 days ago: older than 2 day\(s\)") as caught:
        latest_report(clients.store, job.inventory, src, job.inventory_max_age_days, now=NOW)
    assert "inventory_max_age_days" in caught.value.hint
    assert latest_report(clients.store, job.inventory, src, 8, now=NOW).created == NOW - timedelta(days=3)


def test_a_data_file_that_differs_from_its_md5_fails_the_plan_retryably(s3, buckets, inv, clients):
    src, dst = buckets
    write_report(s3, inv, LOCATION.format(src=src), src, day_rows(), created=NOW, rows_per_file=40)
    job = make_job(src, dst, inv)
    report = latest_report(clients.store, job.inventory, src, now=NOW)
    damaged = report.files[1].key
    body = s3.get_object(Bucket=inv, Key=damaged)["Body"].read()
    s3.put_object(Bucket=inv, Key=damaged, Body=body.replace(b"app-1", b"app-7") if b"app-1" in body
                  else body[:-1] + bytes([body[-1] ^ 1]))
    with pytest.raises(IntegrityError, match=f"{damaged} does not match its manifest") as caught:
        inventory_days(job, clients.store, report)
    assert caught.value.exit_code == 3


def test_a_manifest_that_differs_from_its_checksum_is_refused(s3, buckets, inv, clients):
    src, dst = buckets
    key = write_report(s3, inv, LOCATION.format(src=src), src, [("logs/2026/11/20/a.log", 1)], created=NOW)
    s3.put_object(Bucket=inv, Key=key.replace("manifest.json", "manifest.checksum"), Body=b"0" * 32)
    with pytest.raises(IntegrityError, match="does not match its manifest.checksum"):
        latest_report(clients.store, make_job(src, dst, inv).inventory, src, now=NOW)


def test_an_orc_report_and_a_report_of_another_bucket_are_refused_clearly(s3, buckets, inv, clients):
    src, dst = buckets
    location = LOCATION.format(src=src)
    key = write_report(s3, inv, location, src, [("logs/2026/11/20/a.log", 1)], created=NOW)
    manifest = json.loads(s3.get_object(Bucket=inv, Key=key)["Body"].read())
    job = make_job(src, dst, inv)
    for change, message in (({"fileFormat": "ORC"}, "is an ORC report, which is not read: CSV and Parquet are"),
                            ({"sourceBucket": "another"}, "is of bucket 'another'")):
        body = json.dumps({**manifest, **change}).encode()
        s3.put_object(Bucket=inv, Key=key, Body=body)
        s3.put_object(Bucket=inv, Key=key.replace("manifest.json", "manifest.checksum"),
                      Body=__import__("hashlib").md5(body).hexdigest().encode())
        with pytest.raises(BadArgument, match=message):
            latest_report(clients.store, job.inventory, src, now=NOW)


def test_a_job_naming_an_inventory_that_is_not_a_configurations_destination_fails_to_load():
    with pytest.raises(BadArgument, match="is not an inventory configuration's destination"):
        job_from_dict("j", {"source": "s3://src/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                            "destination": "s3://dst/", "inventory": "s3://inv/manifest.json"})
    with pytest.raises(BadArgument, match="inventory_max_age_days must be a number of days > 0"):
        job_from_dict("j", {"source": "s3://src/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                            "destination": "s3://dst/", "inventory": "s3://inv/p/src/c/", "inventory_max_age_days": 0})


def test_the_plan_keeps_days_after_the_report_and_drops_days_it_knows_empty(s3, buckets, inv, clients):
    """Made 2026-11-22 06:00: the 19th-21st are known (the 18th: known empty, left out); the
    22nd and 23rd ended after the report, so they are planned unsized, to be listed."""
    src, dst = buckets
    write_report(s3, inv, LOCATION.format(src=src), src, day_rows(), created=NOW)
    job = make_job(src, dst, inv, min_age_days=0)
    planned = plan_from_inventory(job, clients.store, date_from="2026-11-18", date_to="2026-11-23", now=NOW)
    assert [(d["day"], d["objects"]) for d in planned["days"]] == [
        ("2026-11-19", 30), ("2026-11-20", 34), ("2026-11-21", 30), ("2026-11-22", None), ("2026-11-23", None)]
    assert planned["objects"] == 94 and planned["inventory"]["rows"] == len(day_rows())


def test_cli_plan_prints_the_days_from_the_jobs_inventory_and_exits_2_on_a_stale_one(s3, buckets, inv, cli_env,
                                                                                     tmp_path):
    import yaml

    src, dst = buckets
    created = datetime.now(timezone.utc).replace(second=0, microsecond=0)
    write_report(s3, inv, LOCATION.format(src=src), src, day_rows(), created=created)
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"jobs": {"logs": {
        "source": f"s3://{src}/", "prefix_template": "logs/{date:%Y/%m/%d}/", "destination": f"s3://{dst}/",
        "storage_class": "STANDARD", "inventory": f"s3://{inv}/{LOCATION.format(src=src)}"}}}))
    out = json.loads(run_cli(cli_env, "plan", "logs", "--jobs-file", str(jobs), "--from", "2026-11-19",
                             "--to", "2026-11-21", "--json").stdout)
    assert [(d["prefix"], d["objects"]) for d in out["days"]] == [
        ("logs/2026/11/19/", 30), ("logs/2026/11/20/", 34), ("logs/2026/11/21/", 30)]
    text = run_cli(cli_env, "plan", "logs", "--jobs-file", str(jobs), "--from", "2026-11-20", "--to", "2026-11-20")
    assert "2026-11-20  logs/2026/11/20/" in text.stdout.decode() and "1 day(s), 34 objects" in text.stdout.decode()
    stale = run_cli(cli_env, "plan", "logs", "--jobs-file", str(jobs), "--inventory-max-age-days", "0.0000001",
                    check=False)
    assert stale.returncode == 2 and "older than" in stale.stderr.decode()


def test_a_day_planned_from_the_inventory_is_archived_from_its_listing(s3, buckets, inv, cli_env, clients):
    """The report knows 3 objects of the day; one more arrived after it and one it names is
    gone: the archive holds what the listing shows, and nothing is deleted on the report's word."""
    src, dst = buckets
    objects = {f"logs/2026/11/20/{i}.log": b"x" * i for i in range(1, 4)}
    seed(s3, src, objects)
    write_report(s3, inv, LOCATION.format(src=src), src, [(k, len(v)) for k, v in objects.items()], created=NOW)
    job = make_job(src, dst, inv)
    planned = plan_from_inventory(job, clients.store, date_from="2026-11-20", date_to="2026-11-20", now=NOW)
    assert [(d["prefix"], d["objects"]) for d in planned["days"]] == [("logs/2026/11/20/", 3)]
    s3.delete_object(Bucket=src, Key="logs/2026/11/20/1.log")
    seed(s3, src, {"logs/2026/11/20/late.log": b"late"})
    run_cli(cli_env, "archive", f"s3://{src}/logs/2026/11/20/", f"s3://{dst}/archive/", "--storage-class", "STANDARD")
    archived = read_archive(s3, dst, f"archive/{src}/logs/2026/11/20.tar.gz")
    assert sorted(archived) == ["logs/2026/11/20/2.log", "logs/2026/11/20/3.log", "logs/2026/11/20/late.log"]
    assert len(keys_in(s3, src, "logs/")) == 3  # nothing deleted


def test_the_catalog_shows_the_days_the_inventory_knows_that_are_not_archived(s3, buckets, inv, cli_env, clients):
    from s3arch.ops.catalog.job_catalog import Catalog

    src, dst = buckets
    seed(s3, src, {"logs/2026/11/20/a.log": b"a"})
    run_cli(cli_env, "archive", f"s3://{src}/logs/2026/11/20/", f"s3://{dst}/archive/", "--storage-class", "STANDARD")
    created = datetime.now(timezone.utc)
    write_report(s3, inv, LOCATION.format(src=src), src,
                 [("logs/2026/11/20/a.log", 1), ("logs/2026/10/02/b.log", 5), ("logs/2026/11/21/c.log", 7)],
                 created=created)
    job = make_job(src, dst, inv)
    catalog = Catalog(job, clients.store)
    view = catalog.view(date(2026, 11, 20), date(2026, 11, 21), today=date(2026, 11, 25))
    shown = view.to_dict()["inventory"]
    assert [(d["day"], d["objects"], d["bytes"]) for d in shown["unarchived"]] == [
        ("2026-10-02", 1, 5), ("2026-11-21", 1, 7)]  # the 2nd of October too: outside the viewed range
    by_day = {d.day: d for d in view.days}
    assert by_day["2026-11-21"].inventory == {"objects": 1, "bytes": 7} and by_day["2026-11-20"].inventory is None
    again = catalog.view(date(2026, 11, 20), date(2026, 11, 21), today=date(2026, 11, 25), refresh=True)
    assert again.requests["GET"] < view.requests["GET"]  # the same report is not read again


def test_the_dags_sizing_takes_the_days_the_report_covers_from_it_and_lists_only_the_rest(s3, buckets, inv, clients):
    """The archive DAG's size task: two days the report covers are sized from its rows (the
    source holds nothing of them: a listing would find them empty), the day that had not ended
    when the report was made is listed; the large ones go to segment tasks."""
    from s3arch.ops.sizing import split_by_size

    src, dst = buckets
    created = datetime.now(timezone.utc) - timedelta(hours=1)
    big, small, fresh = (created.date() - timedelta(days=back) for back in (2, 1, 0))
    job = make_job(src, dst, inv, segments=2, segment_min_objects=5)
    write_report(s3, inv, LOCATION.format(src=src), src,
                 [(f"{job.prefix_for(big)}{i}.log", 10) for i in range(6)] + [(f"{job.prefix_for(small)}0.log", 10)],
                 created=created)
    seed(s3, src, {f"{job.prefix_for(fresh)}{i}.log": b"x" for i in range(5)})
    split = split_by_size(job, [[job.prefix_for(big)], [job.prefix_for(small)], [job.prefix_for(fresh)]],
                          clients.store)
    assert split["large"] == [job.prefix_for(big), job.prefix_for(fresh)]
    assert [(s["objects"], s["bytes"], s["source"]) for s in split["sizes"]] == [
        (6, 60, "inventory"), (1, 10, "inventory"), (5, 5, "listing")]
    assert [s["requests"] for s in split["sizes"]][:2] == [0, 0]
    assert split["inventory"]["days"] == 2


def test_the_dags_sizing_refuses_a_stale_report_naming_the_setting(s3, buckets, inv, clients):
    from s3arch.ops.sizing import split_by_size

    src, dst = buckets
    created = datetime.now(timezone.utc) - timedelta(days=3)
    job = make_job(src, dst, inv, segments=2, segment_min_objects=5)
    write_report(s3, inv, LOCATION.format(src=src), src, [(f"{job.prefix_for(created.date())}a.log", 1)],
                 created=created)
    with pytest.raises(BadArgument, match="older than 2 day") as caught:
        split_by_size(job, [[job.prefix_for(created.date() - timedelta(days=1))]], clients.store)
    assert "inventory_max_age_days" in caught.value.hint


def test_a_csv_key_is_decoded_as_unquote_plus_decodes_it():
    """The fast path (only ``%2F`` escapes) and the fallback agree with unquote_plus on every key."""
    from urllib.parse import quote_plus, unquote_plus

    from s3arch.ops.inventory.csv_files import _unquote

    keys = [quote_plus(k, safe="") for k, _ in day_rows()] + ["a%2fb", "a%2Fb%", "%2F%2F", "plain", "x+y%2Fz"]
    assert [_unquote(k) for k in keys] == [unquote_plus(k) for k in keys]
