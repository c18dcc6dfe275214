"""The CLI on call (issue 47, Deliver 4), against MinIO: `s3arch scrub` runs what the scrub
DAG runs over a job's days (its lines; exit 0 clean, 2 drift with what to do, 3 when only S3
faults past the retries stopped it) or checks one archive alone; `s3arch plan` of a job
without an inventory lists each day and says what that cost; `--processes` defaults to what
its help and docs/JOBS.md say."""

from __future__ import annotations

import json
from datetime import date, timedelta

import pytest
import yaml

from faultproxy import Fault
from helpers import keys_in, run_cli, seed

from s3arch.archive import archive_prefix
from s3arch.core.config import S3Url
from s3arch.format.manifest import ArchiveLayout, layout_for
from s3arch.ops.catalog.scrub_result import scrub_result_key
from s3arch.ops.jobs import job_from_dict, load_jobs

DAYS = (date(2026, 3, 1), date(2026, 3, 2))
TEMPLATE = "logs/{date:%Y/%m/%d}/"


def write_jobs(path, src: str, dst: str, **jobs) -> None:
    """A jobs file: each job of ``jobs`` (name: overrides) archives ``src`` into ``dst``."""
    base = {"source": f"s3://{src}/", "prefix_template": TEMPLATE, "destination": f"s3://{dst}/archive/",
            "storage_class": "STANDARD", "start_date": "2026-03-01", "min_age_days": 2}
    path.write_text(yaml.safe_dump({"jobs": {name: {**base, **extra} for name, extra in jobs.items()}}))


def seed_day(s3, src: str, day: date, n: int = 6, name: str = "app") -> dict[str, bytes]:
    objects = {f"{day:logs/%Y/%m/%d}/{name}-{i}.log": (f"{day} line {i}\n" * 50).encode() for i in range(n)}
    seed(s3, src, objects)
    return objects


@pytest.fixture
def archived(s3, buckets, clients, tmp_path):
    """Two days of job ``logs`` archived as its DAG would: (jobs file, job)."""
    src, dst = buckets
    jobs_file = tmp_path / "jobs.yaml"
    write_jobs(jobs_file, src, dst, logs={})
    job = load_jobs(jobs_file)["logs"]
    for day in DAYS:
        seed_day(s3, src, day)
        assert archive_prefix(job.spec_for(job.prefix_for(day)), clients).status.value == "archived"
    return jobs_file, job


def _layout(job, day: date) -> ArchiveLayout:
    return layout_for(S3Url(job.source.bucket, job.prefix_for(day)), job.destination)


def scrub_cli(env, jobs_file, *args):
    proc = run_cli(env, "scrub", "--jobs-file", str(jobs_file), *args, check=False)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def test_scrub_of_a_jobs_days_prints_the_dags_lines_and_exits_2_on_drift_saying_what_to_do(s3, buckets, archived,
                                                                                          cli_env):
    src, dst = buckets
    jobs_file, job = archived
    code, out, err = scrub_cli(cli_env, jobs_file, "--job", "logs", "--date-from", "2026-03-01",
                               "--date-to", "2026-03-02", "--sample", "2")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("2 archive(s) from 2026-03-01 to 2026-03-02: 2 verified, 4 member(s) sampled; "
                               f"result s3://{dst}/archive/{src}/logs/_s3arch-scrub/logs/"), lines
    assert lines[1].startswith("scrub cost: ") and " PUT, " in lines[1] and "us-east-1 list prices" in lines[1]
    assert lines[2] == "2 archive(s) of logs from 2026-03-01 to 2026-03-02: no drift"
    assert scrub_result_key(job) in keys_in(s3, dst)  # written as the DAG writes it; the catalog shows it

    # Day 1's archive replaced by other bytes; a log lands in day 2 after it was archived.
    s3.put_object(Bucket=dst, Key=_layout(job, DAYS[0]).archive_key(".tar.gz"), Body=b"not the archive")
    seed(s3, src, {"logs/2026/03/02/late.log": b"late\n"})
    code, out, err = scrub_cli(cli_env, jobs_file, "--job", "logs", "--date-from", "2026-03-01",
                               "--date-to", "2026-03-02")
    assert code == 2, err
    assert "0 verified" in out and "2026-03-01  archive changed" in out and "2026-03-02  newer than archive" in out
    assert "recover the committed archive from a bucket version or replica" in out  # the table's what to do
    assert ("error: scrub of job logs found drift in 2 day(s): 2026-03-01 archive changed; "
            "2026-03-02 newer than archive (what to do: archive changed: recover") in err, err
    assert "newer than archive: re-run the day" in err

    got = json.loads(run_cli(cli_env, "scrub", "--jobs-file", str(jobs_file), "--job", "logs", "--date-from",
                             "2026-03-01", "--date-to", "2026-03-02", "--json", check=False).stdout)
    assert got["status"] == "drift" and not got["ok"] and not got["retryable"]
    assert [(d["day"], d["kind"]) for d in got["drift"]] == [("2026-03-01", "archive changed"),
                                                             ("2026-03-02", "newer than archive")]


def test_scrub_defaults_to_the_jobs_start_to_its_newest_day_as_the_dag_does(archived, cli_env):
    jobs_file, job = archived
    got = json.loads(run_cli(cli_env, "scrub", "--jobs-file", str(jobs_file), "--job", "logs", "--json").stdout)
    assert (got["first"], got["last"]) == ("2026-03-01", (date.today() - timedelta(days=2)).isoformat())
    assert got["status"] == "clean" and got["checked"] == 2 and got["verified"] == ["2026-03-01", "2026-03-02"]


def test_scrub_of_one_archive_finds_its_job_checks_it_alone_and_writes_no_result(s3, buckets, archived, clients,
                                                                                cli_env):
    """Day 2 gets a late part; its part 2 is damaged. Each archive is checked alone: part 2
    drifts, part 1 of the same day and day 1 do not; the job is found from the archive's key
    among the jobs of the file (another job archives the same source elsewhere)."""
    src, dst = buckets
    jobs_file, job = archived
    write_jobs(jobs_file, src, dst, logs={}, elsewhere={"destination": f"s3://{dst}/other/"})
    seed(s3, src, {"logs/2026/03/02/late.log": b"late\n"})
    assert archive_prefix(job.spec_for(job.prefix_for(DAYS[1])), clients).part == 2
    day2 = _layout(job, DAYS[1])
    part2 = f"s3://{dst}/{day2.stem}.part-0002.tar.gz"

    code, out, err = scrub_cli(cli_env, jobs_file, part2, "--sample", "1")
    assert code == 0, err
    assert out.splitlines()[0] == "1 archive(s) from 2026-03-02 to 2026-03-02: 1 verified, 1 member(s) sampled; " \
                                  "no result written"
    assert scrub_result_key(job) not in keys_in(s3, dst)

    s3.put_object(Bucket=dst, Key=f"{day2.stem}.part-0002.tar.gz", Body=b"damaged")
    code, out, err = scrub_cli(cli_env, jobs_file, part2)
    assert code == 2 and "2026-03-02  archive changed" in out, (out, err)
    assert "found drift in 1 day(s): 2026-03-02 archive changed" in err
    for clean in (day2.manifest_url, f"s3://{dst}/{_layout(job, DAYS[0]).archive_key('.tar.gz')}"):
        code, out, err = scrub_cli(cli_env, jobs_file, clean, "--job", "logs")
        assert code == 0 and "no drift" in out, (clean, out, err)


def test_scrub_of_one_archive_refuses_what_is_no_jobs_archive_and_reports_one_without_manifest(s3, buckets, archived,
                                                                                              cli_env):
    src, dst = buckets
    jobs_file, job = archived
    code, _, err = scrub_cli(cli_env, jobs_file, f"s3://{dst}/elsewhere/{src}/logs/2026/03/01.tar.gz")
    assert code == 2 and "is an archive of no job in" in err and "--job NAME" in err, err
    code, _, err = scrub_cli(cli_env, jobs_file, f"s3://{dst}/{_layout(job, date(2026, 3, 9)).archive_key('.tar.gz')}")
    assert code == 2 and "nothing is archived at" in err and "--date-from 2026-03-09 --date-to 2026-03-09" in err, err
    code, _, err = scrub_cli(cli_env, jobs_file, f"s3://{dst}/x.tar.gz", "--date-from", "2026-03-01")
    assert code == 2 and "not one archive" in err
    code, _, err = scrub_cli(cli_env, jobs_file)
    assert code == 2 and "--job NAME" in err

    orphan = _layout(job, date(2026, 3, 5)).archive_key(".tar.gz")  # a run died before committing
    s3.put_object(Bucket=dst, Key=orphan, Body=b"half")
    code, out, err = scrub_cli(cli_env, jobs_file, f"s3://{dst}/{orphan}")
    assert code == 2 and "2026-03-05  archive without manifest" in out and "re-run the day" in err, (out, err)


def test_which_day_and_name_an_archive_key_is_for_a_dated_name_a_pattern_and_a_split_job():
    from s3arch.ops.scrub import archive_day

    dated = job_from_dict("d", {"source": "s3://src/in/", "prefix_template": "app-{date:%Y-%m-%d}-",
                                "destination": "s3://vault/a"})
    assert archive_day(dated, ArchiveLayout("vault", "a/src/in/app-2026-03-01")) == (date(2026, 3, 1),
                                                                                    "in/app-2026-03-01-")
    assert archive_day(dated, ArchiveLayout("vault", "a/src/in/app-2026-03-01.part-0003")) == (
        date(2026, 3, 1), "in/app-2026-03-01-")
    assert archive_day(dated, ArchiveLayout("other", "a/src/in/app-2026-03-01")) is None
    assert archive_day(dated, ArchiveLayout("vault", "a/src/in/app-2026-13-01")) is None
    trail = {"preset": "cloudtrail", "source": "s3://src/", "destination": "s3://vault/",
             "filters": {"organization": "o-x", "region": "us-east-1"}}
    whole, split = job_from_dict("t", trail), job_from_dict("s", {**trail, "split_by": "account"})
    name = "AWSLogs/o-x/*/CloudTrail/us-east-1/2026/03/01/"
    assert archive_day(whole, layout_for(S3Url("src", name), whole.destination)) == (date(2026, 3, 1), name)
    one = name.replace("*", "111122223333")
    assert archive_day(split, layout_for(S3Url("src", one), split.destination)) == (date(2026, 3, 1), one)
    assert archive_day(whole, layout_for(S3Url("src", one), whole.destination)) is None


def test_one_archive_of_a_split_job_is_checked_alone_with_its_own_sources(s3, buckets, clients):
    """A CloudTrail day split by account: one account's archive gone, a late log in the other's
    source; each archive's scrub reports its own drift, named by its account's prefix."""
    from test_aws_presets import ACCOUNTS, DAY, cloudtrail

    from s3arch.ops.scrub import scrub_archive

    src, dst = buckets
    job = job_from_dict("trail", {"preset": "cloudtrail", "source": f"s3://{src}/", "split_by": "account",
                                  "filters": {"organization": "o-exampleorg", "region": "us-east-1"},
                                  "destination": f"s3://{dst}/archive/", "storage_class": "STANDARD"})
    seed(s3, src, {k: k.encode() * 20 for k in cloudtrail(DAY)})
    names = job.split(clients.store, [job.prefix_for(DAY)])
    for name in names:
        assert archive_prefix(job.spec_for(name), clients).objects == 1
    kept, gone = (layout_for(S3Url(src, name), job.destination) for name in names)
    assert scrub_archive(job, clients.store, kept, sample=1).ok
    s3.delete_object(Bucket=dst, Key=gone.archive_key(".tar.gz"))
    late = f"{names[0]}{ACCOUNTS[0]}_CloudTrail_us-east-1_late.json.gz"
    seed(s3, src, {late: b"late"})
    first = scrub_archive(job, clients.store, kept, sample=1)
    second = scrub_archive(job, clients.store, gone, sample=1)
    assert [(d.day, d.prefix, d.kind) for d in first.drift] == [(DAY.isoformat(), names[0], "newer than archive")]
    assert [(d.day, d.prefix, d.kind) for d in second.drift] == [(DAY.isoformat(), names[1], "archive missing")]
    assert first.result_url is second.result_url is None


def test_drift_is_exit_2_saying_what_to_do_and_only_checks_stopped_by_s3_faults_are_exit_3(monkeypatch, capsys,
                                                                                            tmp_path):
    """The mapping alone (``ScrubResult.failure`` through ``outcome``), and the CLI's JSON of it."""
    import s3arch.cli as cli
    import s3arch.ops.scrub as scrub_module
    from s3arch.core.errors import outcome
    from s3arch.ops.scrub import Drift, ScrubResult

    def result(*drift):
        return ScrubResult("logs", "2026-03-01", "2026-03-07", "2026-03-20T00:00:00+00:00", checked=7,
                           drift=list(drift))

    fault = Drift("2026-03-02", "logs/2026/03/02/", "unreadable", "HeadObject ...: 503 SlowDown", retryable=True)
    changed = Drift("2026-03-01", "logs/2026/03/01/", "archive changed", "size 7 (manifest: 900)")
    late = [Drift(f"2026-03-0{d}", f"logs/2026/03/0{d}/", "newer than archive", "1 objects") for d in range(3, 8)]
    assert result().failure() is None
    assert outcome(result(fault).failure()).exit_code == 3 and "run the scrub again" in str(result(fault).failure())
    mixed = outcome(result(changed, fault, *late).failure())
    assert mixed.exit_code == 2 and not mixed.retryable
    assert mixed.message.startswith("scrub of job logs found drift in 6 day(s): 2026-03-01 archive changed; "
                                    "2026-03-03 newer than archive; "), mixed.message
    assert "; and 1 more (what to do: archive changed: recover the committed archive" in mixed.message
    assert mixed.message.count("newer than archive: re-run the day") == 1
    assert "1 other check(s) stopped on S3 faults: run the scrub again for those" in mixed.message

    monkeypatch.setattr(scrub_module, "scrub", lambda *args, **kwargs: result(fault))
    import s3arch.cli.clients

    monkeypatch.setattr(s3arch.cli.clients, "clients_for", lambda args: type("Clients", (), {"control": None, "store": None})())
    write_jobs(tmp_path / "jobs.yaml", "src", "dst", logs={})
    monkeypatch.setenv("S3ARCH_JOBS_FILE", str(tmp_path / "jobs.yaml"))  # the default of --jobs-file
    assert cli.main(["scrub", "--job", "logs", "--date-from", "2026-03-01", "--date-to", "2026-03-07", "--json"]) == 3
    out, err = capsys.readouterr()
    printed = json.loads(out)
    assert printed["status"] == "failed" and printed["retryable"] and "run the scrub again" in err


@pytest.mark.slow  # botocore's own 8 attempts of each throttled call come first: about 40 s
def test_scrub_exits_3_when_only_s3_faults_past_the_retries_stopped_it(s3, buckets, archived, proxy, cli_env):
    """Every HEAD of an archive throttled past a 1 s budget: the checks are "unreadable", which
    is no drift to act on but a scrub to run again (exit 3); a listing throttled the same way
    stops the scrub before any check (exit 3, the CLI's failure JSON)."""
    jobs_file, _ = archived
    heads = proxy.add(Fault("status", status=503, match=lambda r: r.method == "HEAD" and r.key.endswith(".tar.gz")))
    args = ("scrub", "--jobs-file", str(jobs_file), "--job", "logs", "--date-from", "2026-03-01", "--date-to",
            "2026-03-02", "--endpoint-url", proxy.endpoint_url, "--throttle-budget", "1")
    proc = run_cli(cli_env, *args, check=False)
    err = proc.stderr.decode()
    assert proc.returncode == 3 and heads.injected >= 2, err
    assert "2 check(s) stopped on S3 faults that outlasted the retries" in err and "run the scrub again" in err
    assert "unreadable" in proc.stdout.decode()
    heads.rate = 0
    lists = proxy.add(Fault("status", status=503, match=lambda r: r.method == "GET" and "list-type" in r.query))
    proc = run_cli(cli_env, *args, "--json", check=False)
    assert proc.returncode == 3 and lists.injected >= 1, proc.stderr.decode()
    failed = json.loads(proc.stdout.decode().splitlines()[-1])
    assert failed["status"] == "failed" and failed["retryable"] and "list the archives" in failed["message"]


# --- plan by listing --------------------------------------------------------------------------


def test_plan_without_an_inventory_lists_each_day_and_says_what_that_cost(s3, buckets, cli_env, clients, tmp_path):
    """Day 1: 1,001 objects (two pages); day 2: none (left out, as a report leaves it out);
    day 3 under a pattern, two values: its expansion's LIST is counted."""
    src, dst = buckets
    jobs_file = tmp_path / "jobs.yaml"
    write_jobs(jobs_file, src, dst, logs={}, hosts={"prefix_template": "hosts/*/{date:%Y/%m/%d}/"})
    seed(s3, src, {f"logs/2026/03/01/{i:04d}.log": b"x" * (i % 7 + 1) for i in range(1001)})
    seed(s3, src, {"logs/2026/03/03/a.log": b"abc", "logs/2026/03/031.log": b"not the day",
                   "hosts/h1/2026/03/03/a.log": b"12", "hosts/h2/2026/03/03/b.log": b"345",
                   "hosts/h2/2026/03/04/c.log": b"other day"})
    out = json.loads(run_cli(cli_env, "plan", "logs", "--jobs-file", str(jobs_file), "--from", "2026-03-01",
                             "--to", "2026-03-03", "--json").stdout)
    assert out["source"] == "listing" and "inventory" not in out
    assert [(d["day"], d["prefix"], d["objects"], d["bytes"]) for d in out["days"]] == [
        ("2026-03-01", "logs/2026/03/01/", 1001, sum(i % 7 + 1 for i in range(1001))),
        ("2026-03-03", "logs/2026/03/03/", 1, 3)]
    listing = out["listing"]
    assert (listing["days"], listing["empty"], listing["requests"]) == (3, 1, 2 + 1 + 1), listing
    assert out["objects"] == 1002

    text = run_cli(cli_env, "plan", "logs", "--jobs-file", str(jobs_file), "--from", "2026-03-01", "--to",
                   "2026-03-03").stdout.decode().splitlines()
    assert text[0].startswith("2026-03-01  logs/2026/03/01/         1,001 objects")
    assert text[-1].startswith("2 day(s), 1,002 objects, ") and \
        f"from a listing of each day of s3://{src}/ (no inventory: 3 day(s) listed, 1 with no objects; " \
        "4 LIST requests in " in text[-1], text[-1]

    from s3arch.ops.sizing import plan_from_listing

    hosts = plan_from_listing(load_jobs(jobs_file)["hosts"], clients.store, date_from="2026-03-02",
                              date_to="2026-03-03")
    assert [(d["prefix"], d["objects"], d["bytes"]) for d in hosts["days"]] == [("hosts/*/2026/03/03/", 2, 5)]
    # hosts/ listed once (2 values), then each value's day: 03-02 holds nothing (2), 03-03 a page each (2)
    assert hosts["listing"]["requests"] == 1 + 2 + 2, hosts["listing"]


def test_plan_by_listing_defaults_to_the_jobs_start_and_exits_4_when_no_day_holds_objects(s3, buckets, cli_env,
                                                                                         tmp_path):
    src, dst = buckets
    start = date.today() - timedelta(days=10)
    jobs_file = tmp_path / "jobs.yaml"
    write_jobs(jobs_file, src, dst, logs={"start_date": start.isoformat()})
    empty = run_cli(cli_env, "plan", "logs", "--jobs-file", str(jobs_file), "--json", check=False)
    assert empty.returncode == 4
    assert json.loads(empty.stdout)["listing"]["days"] == 10 - 2 + 1  # start .. today - min_age_days
    seed_day(s3, src, start, n=2)
    out = json.loads(run_cli(cli_env, "plan", "logs", "--jobs-file", str(jobs_file), "--json").stdout)
    assert [(d["day"], d["objects"]) for d in out["days"]] == [(start.isoformat(), 2)]


# --- --processes ------------------------------------------------------------------------------


def test_processes_defaults_to_what_the_memory_budget_holds_as_its_help_and_the_docs_say(monkeypatch):
    """On 8 CPUs, the CLI's default (``default_processes``, capped by the budget in the engine)
    starts no worker at the default 256MiB and 4 at 480MiB: the help and docs/JOBS.md say so,
    with the engine's own figures."""
    from dataclasses import replace

    from helpers import ROOT

    from s3arch.core import config
    from s3arch.core.config import ArchiveSpec, parse_size
    from s3arch.core.options import OPTIONS
    from s3arch.produce.segments.plan import MIN_SHARE, WORKER_INTERPRETER, could_use_segments, processes_within

    option = {o.name: o for o in OPTIONS}
    monkeypatch.setattr(config, "available_cpus", lambda: 8)
    cli_default = ArchiveSpec(S3Url("src", "day/"), S3Url("dst", ""), processes=config.default_processes(None))
    assert cli_default.processes == 8 and cli_default.memory_budget == parse_size(option["memory_budget"].default)
    assert processes_within(cli_default.memory_budget) == 1 and not could_use_segments(cli_default)
    larger = replace(cli_default, memory_budget=parse_size("480MiB"))
    assert processes_within(larger.memory_budget) == 4 and could_use_segments(larger)
    figures = f"at {(MIN_SHARE + WORKER_INTERPRETER) >> 20} MiB each beyond {MIN_SHARE >> 20} MiB"
    help_text = option["processes"].help
    assert figures in help_text and "1 at the default 256MiB, 4 at 480MiB" in help_text
    assert f"48 + {(MIN_SHARE + WORKER_INTERPRETER) >> 20} x N MiB" in " ".join((ROOT / "docs/JOBS.md").read_text()
                                                                             .split())
    assert "(1 at 256MiB)" in option["processes"].doc_default and "the CPUs on the CLI" not in \
        (ROOT / "docs/JOBS.md").read_text()


def test_archive_a_jobs_day_by_name_as_the_dag_does_and_a_rerun_skips(s3, buckets, cli_env, tmp_path):
    """On call, without Airflow: `s3arch archive --job NAME --date D` archives the job's day with
    the job's settings (its prefix template, destination and class), byte for byte; again, it skips."""
    from helpers import read_archive

    src, dst = buckets
    jobs_file = tmp_path / "jobs.yaml"
    write_jobs(jobs_file, src, dst, logs={})
    objects = seed_day(s3, src, DAYS[0])
    done = run_cli(cli_env, "archive", "--job", "logs", "--jobs-file", str(jobs_file), "--date", str(DAYS[0]),
                   "--json", check=False)
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout)["status"] == "archived"
    assert read_archive(s3, dst, f"archive/{src}/logs/2026/03/01.tar.gz") == objects
    again = run_cli(cli_env, "archive", "--job", "logs", "--jobs-file", str(jobs_file), "--date", str(DAYS[0]),
                    "--json")
    assert json.loads(again.stdout)["status"] == "skipped"


def test_archive_a_jobs_range_runs_every_day_and_exits_with_the_failure(s3, buckets, cli_env, tmp_path):
    """A range whose middle day is empty: the days around it are archived, the run exits 4
    (empty), naming how many failed, as the DAG's run fails while its other tasks succeed."""
    src, dst = buckets
    jobs_file = tmp_path / "jobs.yaml"
    write_jobs(jobs_file, src, dst, logs={})
    first, last = DAYS[0] - timedelta(days=1), DAYS[0] + timedelta(days=1)
    seed_day(s3, src, first)
    seed_day(s3, src, last)
    done = run_cli(cli_env, "archive", "--job", "logs", "--jobs-file", str(jobs_file), "--date", str(first),
                   "--date-to", str(last), "--quiet", check=False)
    assert done.returncode == 4, done.stderr.decode()
    assert "1 of 3 prefix(es) of job logs failed" in done.stderr.decode()
    assert sorted(k for k in keys_in(s3, dst) if k.endswith(".tar.gz")) == [
        f"archive/{src}/{first:logs/%Y/%m/%d}.tar.gz", f"archive/{src}/{last:logs/%Y/%m/%d}.tar.gz"]


def test_archive_job_refuses_settings_that_belong_in_the_jobs_file(buckets, cli_env, tmp_path):
    src, dst = buckets
    jobs_file = tmp_path / "jobs.yaml"
    write_jobs(jobs_file, src, dst, logs={})
    refused = run_cli(cli_env, "archive", "--job", "logs", "--jobs-file", str(jobs_file), "--date", str(DAYS[0]),
                      "--codec", "zstd", check=False)
    assert refused.returncode == 2
    assert "given: --codec" in refused.stderr.decode() and "change them there" in refused.stderr.decode()
