"""A prefix that proves large while it is sized is planned from the pages its sizing listed,
in one process or handed from the task that sized it to the task that plans it: the plan
lists only what comes after them, so no key of a segmented run is listed twice."""

from __future__ import annotations

import pytest
from helpers import keys_in, open_uploads, planned_listing_starts, read_archive, seed

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
    started_after = planned_listing_starts(monkeypatch)
    spec = ArchiveSpec(S3Url(src, source_key), S3Url(dst, "a/"), storage_class="STANDARD", processes=2,
                       segment_min_objects=1_000, memory_budget=320 << 20)
    result = archive_prefix(spec, clients)
    assert (result.status, result.segments, result.objects) == ("archived", 2, len(objects))
    assert started_after == [sorted(objects)[sized - 1]]  # never the start: once, after the sized pages
    archive = next(k["Key"] for k in s3.list_objects_v2(Bucket=dst)["Contents"] if k["Key"].endswith(".tar.gz"))
    assert read_archive(s3, dst, archive) == objects
    assert open_uploads(s3, dst) == []


def _handed_off_day(s3, src, clients, spec) -> tuple[dict, dict]:
    """1,500 keys of ``day/``, sized by a task as the archive DAG's plan task sizes a day: the
    1,000 keys it listed (one page) are written for the prepare step (its hand-off)."""
    from s3arch.produce.segments import size_prefix
    from s3arch.produce.segments.sized import hand_off_for

    objects = {f"day/{h:02d}/{i:05d}.log": f"line {h} {i}\n".encode() * (i % 5 + 1)
               for h in range(3) for i in range(500)}
    seed(s3, src, objects)
    size = size_prefix(clients.store, src, "day/", 1_000, 1 << 40, hand_off_for(lambda prefix: spec, clients.store))
    assert size.large(1_000, 1 << 40) and size.handoff["objects"] == 1_000
    return objects, size.handoff


def _tasks_spec(src, dst):
    return ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD", segments=2,
                       segment_min_objects=1_000)


def test_a_prepare_step_goes_on_after_the_pages_its_sizing_task_handed_off(s3, buckets, clients, monkeypatch):
    from s3arch.archive import archive_segment, assemble_segments, prepare_segments

    src, dst = buckets
    spec = _tasks_spec(src, dst)
    objects, handoff = _handed_off_day(s3, src, clients, spec)
    assert [k for k in keys_in(s3, dst) if "/sized-" in k] == [handoff["key"]]
    started_after = planned_listing_starts(monkeypatch)

    planned = prepare_segments(spec, 2, clients, sized=handoff)
    assert (planned.status, planned.objects) == ("planned", len(objects))
    assert started_after == [sorted(objects)[999]]  # the sized keys are not listed again
    assert any("the first 1,000 objects as the sizing listed them" in note for note in planned.notes)
    assert not [k for k in keys_in(s3, dst) if "/sized-" in k]  # taken over: the plan's cleanup removed it
    assert [archive_segment(spec, k, clients)["status"] for k in range(2)] == ["produced", "produced"]
    assert assemble_segments(spec, clients, segments=2).status == "archived"
    archive = next(k for k in keys_in(s3, dst) if k.endswith(".tar.gz"))
    assert read_archive(s3, dst, archive) == objects
    assert not [k for k in keys_in(s3, dst) if ".segments/" in k] and open_uploads(s3, dst) == []


@pytest.mark.parametrize("why", ["too old", "cleaned up"])
def test_a_hand_off_too_old_or_cleaned_up_is_not_used_the_prefix_is_listed_from_its_start(
        s3, buckets, clients, monkeypatch, why):
    from s3arch.archive import prepare_segments
    from s3arch.produce.segments.sized import HANDOFF_MAX_AGE

    src, dst = buckets
    spec = _tasks_spec(src, dst)
    objects, handoff = _handed_off_day(s3, src, clients, spec)
    if why == "too old":  # a prepare task cleared and run again the next day
        handoff = {**handoff, "listed_at": handoff["listed_at"] - HANDOFF_MAX_AGE - 60}
    else:  # another run of the prefix planned meanwhile
        s3.delete_object(Bucket=dst, Key=handoff["key"])
    started_after = planned_listing_starts(monkeypatch)

    planned = prepare_segments(spec, 2, clients, sized=handoff)
    assert (planned.status, planned.objects) == ("planned", len(objects))
    assert started_after == [None]
    assert any("listed from its first key" in note for note in planned.notes)


def test_the_cli_segments_flag_plans_after_the_pages_it_sized(s3, buckets, cli_env, monkeypatch):
    """``--segments N`` sizes the prefix before the run (a small one is one pipeline): a large
    one's plan goes on after the pages that sizing listed."""
    from s3arch.cli import main

    src, dst = buckets
    objects = {f"day/{h:02d}/{i:05d}.log": f"line {h} {i}\n".encode() * (i % 5 + 1) for h in range(3) for i in range(500)}
    seed(s3, src, objects)
    for name, value in cli_env.items():
        monkeypatch.setenv(name, value)
    started_after = planned_listing_starts(monkeypatch)
    assert main(["archive", f"s3://{src}/day/", f"s3://{dst}/a/", "--segments", "2", "--segment-min-objects", "1000",
                 "--storage-class", "STANDARD", "--quiet"]) == 0
    assert started_after == [sorted(objects)[999]]
    archive = next(k for k in keys_in(s3, dst) if k.endswith(".tar.gz"))
    assert read_archive(s3, dst, archive) == objects
