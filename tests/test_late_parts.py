"""Late arrivals against a real MinIO: a re-run of an archived day archives what landed (or
was rewritten) since as the day's next part, readers see the day whole, --delete-source
deletes exactly what the parts hold, and a re-run with nothing new is one listing."""

from __future__ import annotations

import gzip
import json
import threading
from collections import Counter

import pytest

from helpers import keys_in, read_archive, run_cli, run_json, seed

from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import ConcurrentRun

PREFIX = "logs/2026/11/21/"
STEM = "vault/{src}/logs/2026/11/21"


def _day(n: int, start: int = 0) -> dict[str, bytes]:
    return {f"{PREFIX}{i:04d}.log": f"line {i}\n".encode() * 50 for i in range(start, start + n)}


def _spec(src: str, dst: str, **kw) -> ArchiveSpec:
    return ArchiveSpec(source=S3Url(src, PREFIX), destination=S3Url(dst, "vault/"), storage_class="STANDARD", **kw)


def _requests(clients) -> Counter:
    """Every request the control client sends, by (method, what): a LIST, a GET of a key."""
    seen: Counter = Counter()

    def count(request, **_):
        method, url = request.method, request.url.split("?")[0]
        what = "LIST" if method == "GET" and url.rstrip("/").count("/") == 3 else url.rsplit("/", 1)[-1]
        seen[(method, what)] += 1

    clients.control.meta.events.register("before-send.s3", count)
    return seen


@pytest.fixture
def archived_day(s3, buckets, clients):
    src, dst = buckets
    seed(s3, src, _day(30))
    first = archive_prefix(_spec(src, dst), clients)
    assert first.status == "archived" and first.objects == 30
    return src, dst


def test_late_and_rewritten_objects_become_the_days_second_part(s3, archived_day, clients):
    src, dst = archived_day
    seed(s3, src, _day(2, start=100))  # landed after the day was archived
    s3.put_object(Bucket=src, Key=f"{PREFIX}0003.log", Body=b"rewritten\n")
    result = archive_prefix(_spec(src, dst), clients)
    stem = STEM.format(src=src)
    assert (result.status, result.part, result.late) == ("archived", 2, 3)
    assert result.manifest == f"s3://{dst}/{stem}.part-0002.manifest.jsonl.gz"
    members = read_archive(s3, dst, f"{stem}.part-0002.tar.gz")
    assert sorted(members) == [f"{PREFIX}0003.log", f"{PREFIX}0100.log", f"{PREFIX}0101.log"]
    assert members[f"{PREFIX}0003.log"] == b"rewritten\n"
    index = json.loads(s3.get_object(Bucket=dst, Key=f"{stem}.parts.json")["Body"].read())
    assert [p["part"] for p in index["parts"]] == [1, 2] and index["current"]["objects"] == 32
    header = json.loads(gzip.decompress(
        s3.get_object(Bucket=dst, Key=f"{stem}.part-0002.manifest.jsonl.gz")["Body"].read()).split(b"\n")[0])
    assert (header["part"], header["day"]) == (2, f"{stem}.manifest.jsonl.gz")


def test_rerun_with_nothing_new_is_one_listing_and_reads_no_manifest(s3, archived_day, clients):
    src, dst = archived_day
    seed(s3, src, _day(1, start=100))
    assert archive_prefix(_spec(src, dst), clients).part == 2  # writes the day index
    seen = _requests(clients)
    again = archive_prefix(_spec(src, dst), clients)
    assert (again.status, again.part, again.objects) == ("skipped", 2, 31)
    assert not [what for (method, what) in seen if method == "GET" and "manifest.jsonl" in what]
    lists = sum(n for (method, what), n in seen.items() if what == "LIST")
    assert 1 <= lists <= 4, seen  # the source once, the parts, the uploads of dead runs


def test_a_recheck_with_nothing_new_takes_no_lease_and_writes_nothing(s3, archived_day, clients):
    src, dst = archived_day
    assert archive_prefix(_spec(src, dst), clients).status == "skipped"  # records the day index
    seen = _requests(clients)
    again = archive_prefix(_spec(src, dst), clients, recheck=True)
    assert (again.status, again.part, again.objects) == ("skipped", 1, 30)
    assert sorted(m for (m, _), n in seen.items() for _ in range(n)) == ["GET", "GET", "GET", "GET", "HEAD", "HEAD"], seen
    assert (seen[("GET", "LIST")], seen[("GET", "21.parts.json")]) == (2, 1)  # the source's page, the parts


def test_a_recheck_that_finds_late_objects_archives_them_under_the_lease(s3, archived_day, clients):
    src, dst = archived_day
    seed(s3, src, _day(1, start=100))
    seen = _requests(clients)
    result = archive_prefix(_spec(src, dst), clients, recheck=True)
    assert (result.status, result.part, result.late) == ("archived", 2, 1)
    assert seen[("PUT", "21.lease.json")] == 1 and seen[("DELETE", "21.lease.json")] == 1


def test_first_recheck_of_an_old_day_reads_its_manifest_once_then_never(s3, archived_day, clients):
    src, dst = archived_day
    assert archive_prefix(_spec(src, dst), clients).status == "skipped"  # records the day index
    assert f"{STEM.format(src=src)}.parts.json" in keys_in(s3, dst)
    seen = _requests(clients)
    assert archive_prefix(_spec(src, dst), clients).status == "skipped"
    assert not [what for (method, what) in seen if method == "GET" and "manifest.jsonl" in what]


def test_dry_run_reports_the_late_objects_and_writes_nothing(s3, archived_day, clients):
    src, dst = archived_day
    seed(s3, src, _day(2, start=100))
    before = keys_in(s3, dst)
    result = archive_prefix(_spec(src, dst, dry_run=True), clients)
    assert (result.status, result.part, result.late) == ("dry_run", 2, 2)
    assert f"{PREFIX}0100.log" in result.notes[-1]
    assert keys_in(s3, dst) == before


def test_delete_source_deletes_only_what_a_committed_part_holds(s3, archived_day, clients, cli_env):
    src, dst = archived_day
    seed(s3, src, _day(1, start=100))
    manifest = f"s3://{dst}/{STEM.format(src=src)}.manifest.jsonl.gz"
    run_cli(cli_env, "delete-sources", manifest)
    assert keys_in(s3, src) == [f"{PREFIX}0100.log"]  # the late one stays until a part holds it
    result = archive_prefix(_spec(src, dst, delete_source=True), clients)
    assert (result.status, result.part, result.deleted) == ("archived", 2, 1)
    assert keys_in(s3, src) == []


def test_two_runs_at_once_archive_the_late_objects_once(s3, archived_day, clients):
    src, dst = archived_day
    seed(s3, src, _day(20, start=100))
    outcomes: list = []
    start = threading.Barrier(2)

    def run():
        start.wait()
        try:
            outcomes.append(archive_prefix(_spec(src, dst), clients).status)
        except ConcurrentRun:
            outcomes.append("concurrent")

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) in (["archived", "concurrent"], ["archived", "skipped"])
    stem = STEM.format(src=src)
    assert not [k for k in keys_in(s3, dst) if ".part-0003" in k]
    assert len(read_archive(s3, dst, f"{stem}.part-0002.tar.gz")) == 20


@pytest.fixture
def day_in_two_parts(s3, archived_day, clients):
    src, dst = archived_day
    seed(s3, src, _day(2, start=100))
    s3.put_object(Bucket=src, Key=f"{PREFIX}0003.log", Body=b"rewritten\n")
    assert archive_prefix(_spec(src, dst), clients).part == 2
    expected = {**_day(30), **_day(2, start=100), f"{PREFIX}0003.log": b"rewritten\n"}
    return src, dst, f"s3://{dst}/{STEM.format(src=src)}.manifest.jsonl.gz", expected


def test_ls_cat_and_extract_of_the_day_see_every_part_and_the_latest_content(s3, day_in_two_parts, cli_env, tmp_path):
    src, dst, manifest, expected = day_in_two_parts
    listed = [json.loads(line) for line in run_cli(cli_env, "ls", manifest, "--json").stdout.splitlines()]
    assert sorted(r["key"] for r in listed) == sorted(expected)
    assert {r["key"]: r["part"] for r in listed}[f"{PREFIX}0003.log"] == 2
    assert run_cli(cli_env, "cat", manifest, f"{PREFIX}0003.log").stdout == b"rewritten\n"
    assert run_cli(cli_env, "cat", manifest, f"{PREFIX}0004.log").stdout == expected[f"{PREFIX}0004.log"]
    run_cli(cli_env, "extract", manifest, "--to-dir", str(tmp_path / "all"))
    files = {str(p.relative_to(tmp_path / "all")): p.read_bytes() for p in (tmp_path / "all").rglob("*") if p.is_file()}
    assert files == {k[len(PREFIX):]: v for k, v in expected.items()}
    run_cli(cli_env, "extract", manifest, "--to-dir", str(tmp_path / "two"), "--keys", f"{PREFIX}0003.log",
            f"{PREFIX}0100.log")
    assert (tmp_path / "two" / "0003.log").read_bytes() == b"rewritten\n"
    assert sorted(p.name for p in (tmp_path / "two").rglob("*") if p.is_file()) == ["0003.log", "0100.log"]


def test_extract_to_s3_of_the_day_puts_back_every_object_with_its_latest_content(s3, day_in_two_parts, cli_env):
    src, dst, manifest, expected = day_in_two_parts
    run_json(cli_env, "extract", manifest, "--to", f"s3://{dst}/back/")
    back = {k: s3.get_object(Bucket=dst, Key=k)["Body"].read() for k in keys_in(s3, dst, "back/")}
    assert back == {f"back/{k[len(PREFIX):]}": v for k, v in expected.items()}


def test_a_part_commit_killed_before_the_day_index_is_recorded_by_the_next_run(s3, archived_day, clients, monkeypatch):
    import s3arch.protocol.commit as commit

    src, dst = archived_day
    seed(s3, src, _day(2, start=100))
    record = commit.record_parts
    monkeypatch.setattr(commit, "record_parts", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        archive_prefix(_spec(src, dst), clients)
    monkeypatch.setattr(commit, "record_parts", record)
    again = archive_prefix(_spec(src, dst), clients)  # part 2 is committed: nothing is late
    assert (again.status, again.part, again.objects) == ("skipped", 2, 32)
    index = json.loads(s3.get_object(Bucket=dst, Key=f"{STEM.format(src=src)}.parts.json")["Body"].read())
    assert [p["part"] for p in index["parts"]] == [1, 2] and index["current"]["objects"] == 32


def test_a_part_commit_killed_before_its_manifest_is_made_again_by_the_next_run(s3, archived_day, clients, monkeypatch):
    from s3arch.stored.manifests import ManifestWriter

    src, dst = archived_day
    seed(s3, src, _day(2, start=100))
    complete = ManifestWriter.complete
    monkeypatch.setattr(ManifestWriter, "complete", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        archive_prefix(_spec(src, dst), clients)
    assert not [k for k in keys_in(s3, dst) if k.endswith(".part-0002.manifest.jsonl.gz")]
    monkeypatch.setattr(ManifestWriter, "complete", complete)
    again = archive_prefix(_spec(src, dst), clients)
    assert (again.status, again.part, again.late) == ("archived", 2, 2)
    assert not s3.list_multipart_uploads(Bucket=dst).get("Uploads")


def test_overwrite_rebuilds_the_day_as_one_part_from_the_source(s3, day_in_two_parts, clients):
    src, dst, manifest, expected = day_in_two_parts
    stem = STEM.format(src=src)
    result = archive_prefix(_spec(src, dst, overwrite=True), clients)
    assert (result.status, result.part, result.objects) == ("archived", 1, 32)
    assert read_archive(s3, dst, f"{stem}.tar.gz") == expected
    assert not [k for k in keys_in(s3, dst) if ".part-" in k or k.endswith(".parts.json")]


def test_overwrite_of_a_day_with_parts_is_refused_when_the_source_lost_objects(s3, day_in_two_parts, cli_env):
    src, dst, manifest, expected = day_in_two_parts
    s3.delete_object(Bucket=src, Key=f"{PREFIX}0100.log")  # held by part 2 only
    proc = run_cli(cli_env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD",
                   "--overwrite", check=False)
    assert proc.returncode == 2 and b"holds 32 objects, the source now only 31" in proc.stderr
    assert f"{STEM.format(src=src)}.part-0002.manifest.jsonl.gz" in keys_in(s3, dst)


def test_scrub_reports_and_the_catalog_marks_a_day_with_objects_newer_than_its_archive(s3, buckets, clients):
    from datetime import date

    from s3arch.ops.catalog.job_catalog import Catalog
    from s3arch.ops.jobs import job_from_dict
    from s3arch.ops.scrub import scrub

    src, dst = buckets
    job = job_from_dict("late", {"source": f"s3://{src}/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                 "destination": f"s3://{dst}/vault/", "storage_class": "STANDARD",
                                 "start_date": "2026-11-21", "min_age_days": 1})
    day = date(2026, 11, 21)
    seed(s3, src, _day(30))
    archive_prefix(job.spec_for(PREFIX), clients)
    assert scrub(job, clients.store, day, day, sample=1).ok
    seed(s3, src, _day(2, start=100))
    late = scrub(job, clients.store, day, day, sample=1)
    assert [(d.kind, d.detail.split(" (")[0]) for d in late.drift] == \
        [("newer than archive", "2 objects newer than its archive")]
    view = Catalog(job, clients.store).view(day, day, today=date(2026, 11, 27))
    assert view.days[0].late.startswith("2 objects newer") and view.totals["late"] == ["2026-11-21"]
    assert archive_prefix(job.spec_for(PREFIX), clients).part == 2
    assert scrub(job, clients.store, day, day, sample=1).ok
    view = Catalog(job, clients.store).view(day, day, today=date(2026, 11, 27), refresh=True)
    assert (view.days[0].state, view.days[0].parts, view.days[0].objects, view.days[0].late) == \
        ("archived", 2, 32, None)


def test_the_range_scrub_checks_every_part_of_a_day_and_finds_a_changed_late_part(s3, buckets, clients):
    """The monthly scrub proves each archive of a day: a late part's archive replaced after it
    was committed is drift, as the first part's would be."""
    from datetime import date

    from s3arch.ops.jobs import job_from_dict
    from s3arch.ops.scrub import scrub

    src, dst = buckets
    job = job_from_dict("late", {"source": f"s3://{src}/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                 "destination": f"s3://{dst}/vault/",
                                 "storage_class": "STANDARD", "start_date": "2026-11-21", "min_age_days": 1})
    day = date(2026, 11, 21)
    seed(s3, src, _day(30))
    archive_prefix(job.spec_for(PREFIX), clients)
    seed(s3, src, _day(2, start=100))
    assert archive_prefix(job.spec_for(PREFIX), clients).part == 2
    clean = scrub(job, clients.store, day, day, sample=1)
    assert clean.ok and clean.checked == 2, clean.table()
    part = f"vault/{src}/{PREFIX.rstrip('/')}.part-0002.tar.gz"
    s3.put_object(Bucket=dst, Key=part, Body=b"not the archive the manifest commits")
    damaged = scrub(job, clients.store, day, day, sample=1)
    assert [(d.day, d.kind) for d in damaged.drift] == [("2026-11-21", "archive changed")], damaged.table()


@pytest.mark.parametrize("window, days", [("2d", 3), ("36h", 3), (0, 1)])
def test_a_nightly_run_rechecks_the_days_within_the_late_window(window, days):
    from datetime import date

    from s3arch.ops.jobs import job_from_dict
    from s3arch.ops.planning import plan

    job = job_from_dict("late", {"source": "s3://src/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                                 "destination": "s3://dst/vault/", "min_age_days": 1, "late_window": window})
    planned = plan(job, logical_date=date(2026, 11, 27))
    assert planned == ["logs/2026/11/24/", "logs/2026/11/25/", "logs/2026/11/26/"][-days:]


def test_a_late_window_that_is_not_a_duration_is_refused_by_name():
    from s3arch.core.errors import BadArgument
    from s3arch.ops.jobs import job_from_dict

    with pytest.raises(BadArgument, match="late_window must be a number of days such as 2d"):
        job_from_dict("late", {"source": "s3://src/", "prefix_template": "logs/{date:%Y/%m/%d}/",
                               "destination": "s3://dst/vault/", "late_window": "two days"})


def test_the_assemble_task_of_a_segmented_job_archives_late_objects_without_a_plan(s3, archived_day, clients):
    from s3arch.archive import assemble_segments, prepare_segments

    src, dst = archived_day
    seed(s3, src, _day(2, start=100))
    spec = _spec(src, dst, segments=3)
    assert prepare_segments(spec, 3, clients).status == "skipped"  # the day is committed: no plan
    result = assemble_segments(spec, clients)
    assert (result.status, result.part, result.late) == ("archived", 2, 2)


def test_a_day_with_many_late_objects_is_checked_and_archived_a_page_at_a_time(monkeypatch):
    """12,000 late objects of 24,000 listed: the check counts them and the next part is fed
    them page by page (a second pass of the merge), so the memory traced stays a few pages'
    worth (0.7 MB, whatever the count), where a list of them all would hold every entry (2.7 MB
    here, 228 bytes each)."""
    import tracemalloc
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from s3arch.io.listed import ListedObject
    from s3arch.io.store import Store
    from s3arch.protocol import parts as late_parts

    listed, when = 24_000, datetime(2026, 11, 21, tzinfo=timezone.utc)

    def pages(control, source, *args, **kwargs):
        for start in range(0, listed, 1000):
            yield [ListedObject(f"{PREFIX}{i:07d}.log", 100, f'"{i}"', when) for i in range(start, start + 1000)]

    def archived(control, parts):  # the parts hold every even key, as listed
        return ({"key": f"{PREFIX}{i:07d}.log", "etag": f'"{i}"'} for i in range(0, listed, 2))

    monkeypatch.setattr(late_parts, "source_pages", pages)
    monkeypatch.setattr(late_parts, "day_records", archived)
    monkeypatch.setattr(late_parts, "read_day_index", lambda control, day: None)
    tracemalloc.start()
    try:
        check = late_parts.check_late(Store(None), S3Url("src", PREFIX), [SimpleNamespace(number=1, layout=None)])
        fed = sum(len(page) for page in check.pages())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (check.late, check.found.late_bytes, fed, check.produced.late) == (12_000, 1_200_000, 12_000, 12_000)
    assert check.found.first == [f"{PREFIX}{i:07d}.log" for i in (1, 3, 5, 7, 9)]
    assert peak < 2 << 20, f"{peak:,} bytes traced"


def test_archive_with_late_window_archives_a_late_object_of_an_earlier_day_as_its_next_part(s3, archived_day, cli_env):
    src, dst = archived_day
    seed(s3, src, {f"{PREFIX}0100.log": b"late\n", "logs/2026/11/23/0000.log": b"next day\n"})
    proc = run_cli(cli_env, "archive", f"s3://{src}/logs/2026/11/23/", f"s3://{dst}/vault/",
                   "--storage-class", "STANDARD", "--late-window", "2d", "--json")
    results = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    # 11/22 holds nothing (not re-checked, no error); 11/21's late object is its part 2; then 11/23.
    assert [(r["source"], r["status"], r["part"], r["late"]) for r in results] == [
        (f"s3://{src}/{PREFIX}", "archived", 2, 1), (f"s3://{src}/logs/2026/11/23/", "archived", 1, 0)]
    stem = STEM.format(src=src)
    assert {f"{stem}.part-0002.tar.gz", f"vault/{src}/logs/2026/11/23.tar.gz"} <= set(keys_in(s3, dst))


@pytest.mark.parametrize("value, says", [("two", "--late-window must be a number of days such as 2d"),
                                         ("2", "--late-window needs a date in the source's name")])
def test_archive_refuses_a_late_window_it_cannot_use_with_exit_2_naming_the_flag(s3, buckets, cli_env, value, says):
    src, dst = buckets
    source = f"s3://{src}/logs/2026/11/21/" if value == "two" else f"s3://{src}/logs/"
    proc = run_cli(cli_env, "archive", source, f"s3://{dst}/vault/", "--late-window", value, check=False)
    assert proc.returncode == 2 and says in proc.stderr.decode()
    assert keys_in(s3, dst) == []


@pytest.mark.parametrize("name, before", [
    ("logs/2026/03/01/", "logs/2026/02/28/"),
    ("AWSLogs/*/Config/*/2026/3/1/", "AWSLogs/*/Config/*/2026/2/28/"),
    ("logs/2026-03-01-", "logs/2026-02-28-"),
    ("*.2026-03-01-", "*.2026-02-28-"),
    ("aws-account-id=1/year=2026/month=03/day=01/", "aws-account-id=1/year=2026/month=02/day=28/"),
])
def test_late_window_counts_back_from_the_date_as_the_source_spells_it(name, before):
    from s3arch.ops.window import earlier_sources

    assert [s.key for s in earlier_sources(S3Url("b", name), 1)] == [before]


def test_archive_with_overwrite_and_late_window_overwrites_only_the_day_it_names(s3, archived_day, cli_env):
    src, dst = archived_day
    seed(s3, src, {f"{PREFIX}0100.log": b"late\n", "logs/2026/11/22/0000.log": b"next day\n"})
    proc = run_cli(cli_env, "archive", f"s3://{src}/logs/2026/11/22/", f"s3://{dst}/vault/", "--storage-class",
                   "STANDARD", "--late-window", "1", "--overwrite", "--json")
    results = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [(r["status"], r["part"], r["objects"]) for r in results] == [("archived", 2, 1), ("archived", 1, 1)]


def test_late_objects_gone_before_their_part_is_made_leave_the_day_as_it_was(s3, archived_day, clients, monkeypatch):
    from s3arch.core.errors import SourceChanged
    from s3arch.protocol import parts as late_parts

    src, dst = archived_day
    seed(s3, src, _day(1, start=100))
    listed_again = late_parts.LateCheck.pages

    def deleted_first(check):  # the late object is deleted between the check and the part's listing
        s3.delete_object(Bucket=src, Key=f"{PREFIX}0100.log")
        return listed_again(check)

    monkeypatch.setattr(late_parts.LateCheck, "pages", deleted_first)
    before = keys_in(s3, dst)
    with pytest.raises(SourceChanged, match="are gone from the source since they were found"):
        archive_prefix(_spec(src, dst), clients)
    assert keys_in(s3, dst) == before  # no part, no day index, no lease left
    monkeypatch.undo()
    again = archive_prefix(_spec(src, dst), clients)  # the retry finds the day as it was
    assert (again.status, again.part, again.objects) == ("skipped", 1, 30)
