"""Parallel key ranges (tasks/io/ranges.py) against a fake S3 with latency: a parallel listing
returns exactly the keys of a serial one, in order (or, unordered, the same set), for layouts
whose cuts fall in folder gaps, inside a page, past the last key; keys with odd characters; and
each cut costs about one LIST, not a page listed twice (the page that crosses a cut hands its
keys over), and pages go by StartAfter, not by continuation token (MinIO walks to the
prefix's end for a token)."""

from __future__ import annotations

import bisect
import threading
import time
from datetime import datetime, timezone

import pytest

from s3arch.io.keys import key_order
from s3arch.io.listed import ListedObject
from s3arch.io.ranges import RangeListing
from s3arch.io.store import Store

WHEN = datetime(2026, 11, 21, tzinfo=timezone.utc)

LAYOUTS = {
    "hourly": [f"d/{h:02d}/app-{i:05d}.log" for h in range(24) for i in range(250)],
    "flat": [f"d/app-{i:07d}.log" for i in range(6000)],
    "hosts": [f"d/host-{i // 700:03d}/app-{i:07d}.log" for i in range(6000)],
    "odd": sorted({f"d/{c}{i}{s}" for i in range(900) for c, s in (("a", ".log"), ("ü/", ""), ("日本", " x"),
                                                                 ("\U0001F600", "+%2F&<>"), ("-.", "/."))},
                  key=key_order),
}


class FakeS3:
    """ListObjectsV2 over a sorted key list, with a little latency: pages by StartAfter or by
    continuation token, as S3 answers them; counts requests and those by token."""

    def __init__(self, keys: list[str], latency: float = 0.002):
        self.keys, self.latency = keys, latency
        self.order = [key_order(k) for k in keys]
        self.requests = self.by_token = 0
        self.lock = threading.Lock()

    def list_objects_v2(self, Bucket, Prefix, MaxKeys, StartAfter=None, ContinuationToken=None, **_):
        with self.lock:
            self.requests += 1
            self.by_token += ContinuationToken is not None
        time.sleep(self.latency)
        start = int(ContinuationToken) if ContinuationToken else (
            bisect.bisect_right(self.order, key_order(StartAfter)) if StartAfter else 0)
        end = min(len(self.keys), start + MaxKeys)
        page = {"S3archListed": [ListedObject(k, 1, '"e"', WHEN) for k in self.keys[start:end]],
                "IsTruncated": end < len(self.keys)}
        if end < len(self.keys):
            page["NextContinuationToken"] = str(end)
        return page


def _listed(s3, **kwargs) -> tuple[list[str], RangeListing]:
    listing = RangeListing(Store(s3), "b", "d/", page_size=100, workers=8, **kwargs)
    try:
        return [o.key for page in listing for o in page], listing
    finally:
        listing.close()


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_parallel_listing_is_the_serial_one_and_each_cut_costs_about_one_list(layout):
    keys = LAYOUTS[layout]
    assert keys == sorted(keys, key=key_order)
    pages = -(-len(keys) // 100)
    for ordered in (True, False):
        s3 = FakeS3(keys)
        listed, listing = _listed(s3, ordered=ordered)
        assert len(listed) == len(set(listed)), f"{layout}: a key listed twice"
        assert (listed if ordered else sorted(listed, key=key_order)) == keys, f"{layout}, ordered={ordered}"
        assert listing.ranges >= 3, f"{layout}: hardly cut ({listing.ranges} ranges)"
        # Each range costs a page cut short and, at most, a probe; never a page listed again.
        assert s3.requests <= pages + 2 * listing.ranges + 2, (layout, s3.requests, pages, listing.ranges)
        assert s3.by_token == 0, f"{layout}: {s3.by_token} pages by continuation token"


def test_a_segment_range_in_parallel_is_exactly_its_keys():
    keys = LAYOUTS["hosts"]
    after, last = keys[123], keys[4567]
    s3 = FakeS3(keys)
    listed, _ = _listed(s3, start_after=after, last_key=last)
    assert listed == keys[124:4568]


def test_a_cut_inside_a_page_under_way_hands_its_keys_to_the_range_after_it():
    """Slow pages, so that every cut lands while its range's page is under way: the keys that
    page answered past the cut are the next range's first keys, and no LIST asks for them again."""
    keys = LAYOUTS["flat"]
    s3 = FakeS3(keys, latency=0.02)
    asked: list[str | None] = []
    list_objects = s3.list_objects_v2

    def recording(**kwargs):
        page = list_objects(**kwargs)
        if page["S3archListed"]:
            with s3.lock:
                asked.extend(o.key for o in page["S3archListed"])
        return page

    s3.list_objects_v2 = recording
    listed, listing = _listed(s3, ordered=False)
    assert sorted(listed, key=key_order) == keys
    twice = len(asked) - len(set(asked))
    # Keys answered twice: only those of a page that crossed a cut its range did not wait for.
    assert twice <= 100 * listing.ranges, (twice, listing.ranges)
    assert listing.ranges >= 3
