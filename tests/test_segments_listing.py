"""A prefix that proves large while it is sized is planned from the pages its sizing listed:
the plan lists only what comes after them, so no key of a segmented run is listed twice."""

from __future__ import annotations

import pytest
from helpers import open_uploads, read_archive, seed

import s3arch.produce.segments.plan
from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url


# The sizing lists whole LIST pages from the start until 1,000 keys are in: one page of 1,000
# keys of the prefix; two pages of 900 of the pattern (a page per hour's prefix).
@pytest.mark.parametrize("source_key, sized", [("day/", 1_000), ("day/*/", 1_800)], ids=["prefix", "pattern"])
def test_the_plan_goes_on_after_the_pages_the_sizing_listed(s3, buckets, clients, monkeypatch, source_key, sized):
    src, dst = buckets
    objects = {f"day/{h:02d}/{i:05d}.log": f"line {h} {i}\n".encode() * (i % 5 + 1)
               for h in range(3) for i in range(900)}  # 2,700 keys: the sizing stops after 1,000
    seed(s3, src, objects)
    real_listing = s3arch.produce.segments.plan.source_listing
    started_after = []

    def recording_listing(*args, **kwargs):
        started_after.append(kwargs.get("start_after"))
        return real_listing(*args, **kwargs)

    monkeypatch.setattr(s3arch.produce.segments.plan, "source_listing", recording_listing)
    spec = ArchiveSpec(S3Url(src, source_key), S3Url(dst, "a/"), storage_class="STANDARD", processes=2,
                       segment_min_objects=1_000, memory_budget=320 << 20)
    result = archive_prefix(spec, clients)
    assert (result.status, result.segments, result.objects) == ("archived", 2, len(objects))
    assert started_after == [sorted(objects)[sized - 1]]  # never the start: once, after the sized pages
    archive = next(k["Key"] for k in s3.list_objects_v2(Bucket=dst)["Contents"] if k["Key"].endswith(".tar.gz"))
    assert read_archive(s3, dst, archive) == objects
    assert open_uploads(s3, dst) == []
