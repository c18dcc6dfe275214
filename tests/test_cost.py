"""The cost figures: the worked example of docs/COST.md, checked to the cent, and the figures
a user sees from a dry run and a real run against MinIO."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import run_json, seed
from s3arch.core.cost import GiB, KiB, PRICES, estimate, prices_with
from s3arch.core.errors import BadArgument

ROOT = Path(__file__).resolve().parent.parent


def test_ten_million_8_kib_objects_in_deep_archive():
    objects, size = 10_000_000, 8 * KiB
    # The archive at the ratio the default codec measured on the sample logs (bench/ratio.py's
    # committed output), as docs/COST.md quotes it.
    ratio = json.loads((ROOT / "bench" / "results" / "ratio.json").read_text())["default"]["ratio"]
    assert ratio == 4.24
    archive_bytes = round(objects * size / ratio)
    assert round(archive_bytes / GiB, 2) == 17.99
    cost = estimate("DEEP_ARCHIVE", objects=objects, bytes_in=objects * size, short_of_minimum=0,
                    archive_bytes=archive_bytes)
    # One by one: 76.29 GiB of data + 305.18 GiB of metadata at $0.00099, 76.29 GiB at $0.023.
    data_gib, class_meta_gib, std_meta_gib = objects * size / GiB, objects * 32 * KiB / GiB, objects * 8 * KiB / GiB
    assert (round(data_gib, 2), round(class_meta_gib, 2), round(std_meta_gib, 2)) == (76.29, 305.18, 76.29)
    assert round(cost.separate_monthly, 2) == 2.13  # 0.0755 + 0.3021 + 1.7547
    assert round(cost.archive_monthly, 4) == 0.0178  # 17.99 GiB + one object's 40 KiB
    assert cost.separate_requests == pytest.approx(500.0)  # 10,000 x $0.05
    assert round(cost.archive_requests, 4) == 0.1153  # 2,304 parts + create + complete
    assert cost.min_days == 180 and round(cost.monthly_saving, 2) == 2.11


def test_small_objects_are_billed_as_128_kib_where_the_class_says_so():
    ir = estimate("GLACIER_IR", objects=1000, bytes_in=1000 * KiB, short_of_minimum=1000 * 127 * KiB,
                  archive_bytes=200 * KiB)
    assert ir.separate_monthly == pytest.approx(1000 * 128 * KiB / GiB * 0.004)
    glacier = estimate("GLACIER", objects=1000, bytes_in=1000 * KiB, short_of_minimum=1000 * 127 * KiB,
                       archive_bytes=200 * KiB)
    assert glacier.separate_monthly == pytest.approx(1000 * 33 * KiB / GiB * 0.0036 + 1000 * 8 * KiB / GiB * 0.023)


def test_a_job_can_override_the_price_table_and_mistakes_are_named():
    table = prices_with({"DEEP_ARCHIVE": {"storage_gb_month": 0.0018}})
    assert table["DEEP_ARCHIVE"].storage_gb_month == 0.0018 and PRICES["DEEP_ARCHIVE"].storage_gb_month == 0.00099
    with pytest.raises(BadArgument, match="unknown storage class 'COLD'"):
        prices_with({"COLD": {}})
    with pytest.raises(BadArgument, match="unknown field"):
        prices_with({"GLACIER": {"price": 1}})


@pytest.mark.slow
def test_dry_run_and_real_run_show_what_the_archive_saves(s3, buckets, cli_env):
    src, dst = buckets
    seed(s3, src, {f"day/{i:04d}.log": b"GET /x 200\n" * 40 for i in range(500)})
    dry = run_json(cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/", "--storage-class", "STANDARD",
                   "--dry-run")
    done = run_json(cli_env, "archive", f"s3://{src}/day/", f"s3://{dst}/", "--storage-class", "STANDARD")
    for result in (dry, done):
        cost = result["cost"]
        assert cost["storage_class"] == "STANDARD" and cost["objects"] == 500
        assert cost["separate_requests"] == pytest.approx(500 * 0.005 / 1000)
        assert cost["archive_monthly"] < cost["separate_monthly"]
    assert done["cost"]["archive_monthly"] == pytest.approx(done["bytes_out"] / GiB * 0.023)


def test_a_dry_run_of_gzipped_aws_logs_estimates_the_archive_they_make(s3, buckets, cli_env):
    """AWS delivers CloudTrail (ALB, VPC Flow, WAF, Config) logs gzipped, a few KiB each, under
    keys longer than a tar header's name: the dry run's archive is within 10% of the one the run
    makes. It said twice that when the sample's data ratio (1:1) was applied to the tar headers
    and padding as well, which compress to almost nothing."""
    import gzip
    import random

    src, dst = buckets
    rnd = random.Random(5)
    day = "AWSLogs/o-exampleorg/111122223333/CloudTrail/us-east-1/2026/11/21/"
    objects = {f"{day}111122223333_CloudTrail_us-east-1_20261121T{i // 12:02d}{i % 12 * 5:02d}Z_{rnd.getrandbits(64):016x}"
               ".json.gz": gzip.compress(b"".join(b'{"eventID": "%032x", "sourceIPAddress": "10.%d.%d.%d"},' % (
                   rnd.getrandbits(128), rnd.randrange(256), rnd.randrange(256), rnd.randrange(256))
                   for _ in range(rnd.randrange(20, 60))))
               for i in range(288)}
    assert all(len(k) > 100 for k in objects)  # each member takes a pax header, as CloudTrail's do
    seed(s3, src, objects)
    args = ("archive", f"s3://{src}/{day}", f"s3://{dst}/", "--storage-class", "STANDARD")
    dry = run_json(cli_env, *args, "--dry-run")
    done = run_json(cli_env, *args)
    assert done["bytes_out"] > done["bytes_in"] * 0.95  # gzipped logs do not shrink again
    assert abs(dry["estimated_bytes_out"] / done["bytes_out"] - 1) < 0.1, (dry["estimated_bytes_out"], done["bytes_out"])


def test_ten_million_gzipped_8_kib_objects_in_deep_archive():
    """docs/COST.md, "Logs AWS delivers gzipped": the archive is the data's size (ratio 1.0)."""
    objects, size = 10_000_000, 8 * KiB
    cost = estimate("DEEP_ARCHIVE", objects=objects, bytes_in=objects * size, short_of_minimum=0,
                    archive_bytes=objects * size)
    assert round(objects * size / GiB, 2) == 76.29
    assert round(cost.separate_monthly, 2) == 2.13 and round(cost.archive_monthly, 4) == 0.0755
    assert cost.separate_requests == pytest.approx(500.0)
    assert round(cost.archive_requests, 2) == 0.49 and cost.archive_requests == pytest.approx(9_768 * 0.05 / 1000)
    assert round(cost.separate_monthly / cost.archive_monthly) == 28
    assert round(cost.separate_requests / cost.archive_requests, -2) == 1000
