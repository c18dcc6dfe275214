"""AWS's own log layouts as job presets, against a real MinIO: for each preset the bucket is
seeded with keys named, padded and foldered as AWS documents them (digest folders beside data
folders, the neighbouring days, a non-padded Config day beside its look-alike), a job is read
from the YAML docs/JOBS.md shows, and one day is archived, restored (extracted to another
bucket) and scrubbed, and the catalog shows it archived."""

from __future__ import annotations

from datetime import date

import pytest
import yaml

from helpers import keys_in, read_archive, seed

from s3arch.archive import archive_prefix
from s3arch.core.config import S3Url
from s3arch.format.manifest import layout_for
from s3arch.ops.catalog.job_catalog import Catalog
from s3arch.ops.catalog.view import ARCHIVED
from s3arch.ops.jobs import job_from_dict
from s3arch.ops.scrub import scrub
from s3arch.restore.extract import extract_to_s3

DAY = date(2026, 1, 5)
OTHER_DAYS = (date(2026, 1, 4), date(2026, 1, 15))
ACCOUNTS = ("111122223333", "444455556666")
REGIONS = ("us-east-1", "eu-west-1")


def _stamp(day: date) -> str:
    return day.strftime("%Y%m%dT0005Z")


def cloudtrail(day):
    out = {}
    for a in ACCOUNTS:
        for r in REGIONS:
            out[f"AWSLogs/o-exampleorg/{a}/CloudTrail/{r}/{day:%Y/%m/%d}/{a}_CloudTrail_{r}_{_stamp(day)}_k2Xa.json.gz"] = 1
            out[f"AWSLogs/o-exampleorg/{a}/CloudTrail-Digest/{r}/{day:%Y/%m/%d}/"
                f"{a}_CloudTrail-Digest_{r}_org-trail_{r}_{day:%Y%m%d}T000000Z.json.gz"] = 0
    return out


def alb(day):
    return {f"AWSLogs/{a}/elasticloadbalancing/{r}/{day:%Y/%m/%d}/{a}_elasticloadbalancing_{r}_app.web.50dc6c495c0c9188"
            f"_{_stamp(day)}_10.0.0.1_2z8b.log.gz": 1 for a in ACCOUNTS for r in REGIONS}


def vpc_plain(day):
    out = {f"AWSLogs/{a}/vpcflowlogs/{r}/{day:%Y/%m/%d}/{a}_vpcflowlogs_{r}_fl-1234abcd_{_stamp(day)}_fe12.log.gz": 1
           for a in ACCOUNTS for r in REGIONS}
    out[f"AWSLogs/{ACCOUNTS[0]}/vpcflowlogs/us-east-1/{day:%Y/%m/%d}/13/"  # hourly partitions
        f"{ACCOUNTS[0]}_vpcflowlogs_us-east-1_fl-1234abcd_{day:%Y%m%d}T1305Z_ab12.log.gz"] = 1
    return out


def vpc_hive(day):
    return {f"AWSLogs/aws-account-id={a}/aws-service=vpcflowlogs/aws-region={r}/year={day:%Y}/month={day:%m}/"
            f"day={day:%d}/{a}_vpcflowlogs_{r}_fl-1234abcd_{_stamp(day)}_fe12.log.gz": 1
            for a in ACCOUNTS for r in REGIONS}


def s3_simple(day):
    return {f"access/{day:%Y-%m-%d}-{h:02d}-05-12-5A5B7C8D9E0F1A2B": 1 for h in (0, 13, 23)}


def s3_partitioned(day):
    return {f"access/{a}/{r}/my-bucket/{day:%Y/%m/%d}/{day:%Y-%m-%d}-00-05-12-5A5B7C8D9E0F1A2B": 1
            for a in ACCOUNTS for r in REGIONS}


def cloudfront(day):
    return {f"cf/{d}.{day:%Y-%m-%d}-{h:02d}.a1b2c3d4.gz": 1 for d in ("E2EXAMPLE1", "E3EXAMPLE2") for h in (0, 23)}


def config(day):
    return {f"AWSLogs/{a}/Config/{r}/{day.year}/{day.month}/{day.day}/{kind}/{a}_Config_{r}_{kind}_"
            f"AWS::EC2::Instance_{day:%Y%m%d}T000512Z_{day:%Y%m%d}T061512Z_1.json.gz": 1
            for a in ACCOUNTS for r in REGIONS for kind in ("ConfigHistory", "ConfigSnapshot")}


def waf(day):
    return {f"AWSLogs/{a}/WAFLogs/{r}/my-web-acl/{day:%Y/%m/%d}/00/05/{a}_waflogs_{r}_my-web-acl_{_stamp(day)}"
            f"_9f8e.log.gz": 1 for a in ACCOUNTS for r in ("us-east-1", "cloudfront")}


def firehose(day):
    return {f"stream/{day:%Y/%m/%d}/{h:02d}/my-stream-1-{day:%Y-%m-%d}-{h:02d}-05-12-0b1c2d3e-4f5a-6b7c-8d9e-"
            "0f1a2b3c4d5e": 1 for h in (0, 23)}


# preset -> (YAML a user copies from docs/JOBS.md, with SRC and DST for the buckets; the day's keys)
CASES = {
    "cloudtrail": ("preset: cloudtrail\nsource: s3://SRC/\nfilters: {organization: o-exampleorg}\n", cloudtrail),
    "alb": ("preset: alb\nsource: s3://SRC/\n", alb),
    "vpc-flow-logs": ("preset: vpc-flow-logs\nsource: s3://SRC/\n", vpc_plain),
    "vpc-flow-logs-hive": ("preset: vpc-flow-logs\nlayout: hive\nsource: s3://SRC/\n", vpc_hive),
    "s3-access-logs": ("preset: s3-access-logs\nsource: s3://SRC/access/\n", s3_simple),
    "s3-access-logs-partitioned": ("preset: s3-access-logs\nlayout: partitioned\nsource: s3://SRC/access/\n",
                                   s3_partitioned),
    "cloudfront": ("preset: cloudfront\nsource: s3://SRC/cf/\n", cloudfront),
    "config": ("preset: config\nsource: s3://SRC/\n", config),
    "waf": ("preset: waf\nsource: s3://SRC/\n", waf),
    "firehose": ("preset: firehose\nsource: s3://SRC/stream/\n", firehose),
}


def _body(key: str) -> bytes:
    return f"{key}\n".encode() * 20


@pytest.mark.parametrize("case", list(CASES))
def test_a_preset_archives_restores_and_scrubs_one_day_of_its_aws_layout(case, s3, buckets, clients):
    src, dst = buckets
    text, layout_keys = CASES[case]
    body = yaml.safe_load(text.replace("SRC", src))
    job = job_from_dict(case, {**body, "destination": f"s3://{dst}/archive/", "storage_class": "STANDARD",
                               "start_date": "2026-01-01"})
    seeded = [k for d in (DAY, *OTHER_DAYS) for k in layout_keys(d)]
    day = {k for k, wanted in layout_keys(DAY).items() if wanted}
    seed(s3, src, {k: _body(k) for k in seeded})

    result = archive_prefix(job.spec_for(job.prefix_for(DAY)), clients)
    assert result.status.value == "archived" and result.objects == len(day), (job.prefix_for(DAY), result)
    layout = layout_for(S3Url(src, job.prefix_for(DAY)), job.destination)
    assert set(read_archive(s3, dst, layout.archive_key(".tar.gz"))) == day
    assert not layout.stem.endswith(("-", ".", "_"))

    s3.create_bucket(Bucket=f"{src}-back")
    extract_to_s3(clients, layout, S3Url(f"{src}-back", "restored/"), original_keys=True)
    back = keys_in(s3, f"{src}-back")
    assert sorted(back) == sorted(f"restored/{k}" for k in day)
    assert all(s3.get_object(Bucket=f"{src}-back", Key=f"restored/{k}")["Body"].read() == _body(k) for k in day)

    checked = scrub(job, clients.store, DAY, DAY, sample=2, seed=1)
    assert checked.ok and checked.checked == 1, checked.table()
    view = Catalog(job, clients.store).view(DAY, DAY, today=date(2026, 2, 1))
    assert [(d.state, d.objects) for d in view.days] == [(ARCHIVED, len(day))]


def test_config_days_are_not_padded_and_day_5_is_not_day_15(s3, buckets):
    src, dst = buckets
    job = job_from_dict("config", {"preset": "config", "source": f"s3://{src}/", "destination": f"s3://{dst}/"})
    assert job.prefix_for(DAY) == "AWSLogs/*/Config/*/2026/1/5/"
    assert job.date_of("AWSLogs/*/Config/*/2026/1/5/") == DAY
    with pytest.raises(Exception, match="is not one that job"):
        job.date_of("AWSLogs/*/Config/*/2026/01/05/")


def test_a_cloudtrail_job_split_by_account_makes_one_archive_per_account(s3, buckets, clients):
    src, dst = buckets
    job = job_from_dict("trail", {"preset": "cloudtrail", "source": f"s3://{src}/",
                                  "filters": {"organization": "o-exampleorg", "region": "us-east-1"},
                                  "split_by": "account", "destination": f"s3://{dst}/archive/",
                                  "storage_class": "STANDARD"})
    seed(s3, src, {k: _body(k) for d in (DAY, *OTHER_DAYS) for k in cloudtrail(d)})
    names = job.split(clients.store, [job.prefix_for(DAY)])
    assert names == [f"AWSLogs/o-exampleorg/{a}/CloudTrail/us-east-1/2026/01/05/" for a in ACCOUNTS]
    assert [job.date_of(n) for n in names] == [DAY, DAY]
    for name in names:
        assert archive_prefix(job.spec_for(name), clients).objects == 1
    assert sorted(k for k in keys_in(s3, dst) if k.endswith(".tar.gz")) == sorted(
        f"archive/{src}/{n.rstrip('/')}.tar.gz" for n in names)
    clean = scrub(job, clients.store, DAY, DAY, sample=1, seed=1)
    assert clean.ok and clean.checked == len(ACCOUNTS) and clean.verified == [DAY.isoformat()], clean.table()
    s3.delete_object(Bucket=dst, Key=f"archive/{src}/{names[1].rstrip('/')}.tar.gz")
    damaged = scrub(job, clients.store, DAY, DAY, sample=1, seed=1)
    assert [(d.day, d.kind) for d in damaged.drift] == [(DAY.isoformat(), "archive missing")]
    assert damaged.verified == []


def test_a_split_jobs_restore_plan_finds_each_accounts_archive_after_the_sources_are_deleted(s3, buckets, clients):
    """The restore DAG plans a split job's day from its archives: the sources may be gone
    (delete_source) and the restore role may not list them."""
    src, dst = buckets
    job = job_from_dict("trail", {"preset": "cloudtrail", "source": f"s3://{src}/",
                                  "filters": {"organization": "o-exampleorg", "region": "us-east-1"},
                                  "split_by": "account", "destination": f"s3://{dst}/archive/",
                                  "storage_class": "STANDARD", "delete_source": True})
    seed(s3, src, {k: _body(k) for d in (DAY, *OTHER_DAYS) for k in cloudtrail(d)})
    names = job.split(clients.store, [job.prefix_for(DAY)])
    for name in names:
        assert archive_prefix(job.spec_for(name), clients).deleted == 1
    assert job.split_archived(clients.store, [job.prefix_for(DAY)]) == names
    assert job.split_archived(clients.store, names[:1]) == names[:1]  # an on-call name of one account
