"""The listing's own page parser (tasks/listing.py) against botocore's, on a real MinIO: the
same keys, sizes, ETags and times for keys that need escaping, and botocore's answer whenever
a page is not in the shape the parser knows."""

from __future__ import annotations

from helpers import engine_clients, put_exact_key, seed

ODD_KEYS = ["odd/plain.log", "odd/space and+plus.log", "odd/amp&lt;<>\"'.log", "odd/percent%2F%25.log",
            "odd/ünïcødé/日本語.log", "odd/tab\there.log", "odd/newline\nhere.log", "odd/ctrl\x01\x1f.log",
            "odd/emoji-\U0001F600.log", "odd/trailing-space .log", "odd/dir/"]  # MinIO refuses "a//b"


def test_page_parser_reads_what_botocore_reads_for_keys_that_need_escaping(minio, s3, buckets):
    from s3arch.listing import PAGE_KEY, iter_pages

    src, _ = buckets
    for i, key in enumerate(ODD_KEYS):
        put_exact_key(minio, src, key, b"x" * i)
    seed(s3, src, {f"odd/many/{i:05d}.log": b"y" * (i % 7) for i in range(2500)})  # three pages
    clients = engine_clients(minio)
    raw = clients.control.list_objects_v2(Bucket=src, Prefix="odd/")
    assert PAGE_KEY in raw, "MinIO's pages were left to botocore: the fast path is not what is tested"

    ours = [(o.key, o.size, o.etag, o.last_modified) for page in iter_pages(clients.control, src, "odd/") for o in page]
    theirs = [(o["Key"], o["Size"], o["ETag"], o["LastModified"]) for page in
              s3.get_paginator("list_objects_v2").paginate(Bucket=src, Prefix="odd/") for o in page.get("Contents", [])]
    assert len(ours) == len(ODD_KEYS) + 2500
    assert [o[:3] for o in ours] == [t[:3] for t in theirs]
    assert [o[3] for o in ours] == [t[3] for t in theirs]  # both timezone-aware datetimes


def test_pages_ending_inside_a_range_stop_at_its_last_key():
    """A segment's range ends inside a page: the page is cut there and listing stops."""
    from s3arch.listing import ListedObject, iter_pages
    from datetime import datetime, timezone

    when = datetime(2026, 11, 21, tzinfo=timezone.utc)

    class Pages:
        def get_paginator(self, name):
            return self

        def paginate(self, **_):
            yield {"S3archListed": [ListedObject(f"p/{i:03d}", 1, '"e"', when) for i in range(0, 5)]}
            yield {"S3archListed": [ListedObject(f"p/{i:03d}", 1, '"e"', when) for i in range(5, 10)]}
            raise AssertionError("listed past the range's last key")

    keys = [o.key for page in iter_pages(Pages(), "b", "p/", start_after="p/001", last_key="p/006") for o in page]
    assert keys[-1] == "p/006" and "p/007" not in keys


def test_a_page_in_another_shape_is_left_to_botocore():
    from s3arch.listing import parse_listing_page

    usual = (b'<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Key>'
             b'<LastModified>2026-11-21T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag><Size>3</Size>'
             b'<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>')
    listed, rest = parse_listing_page(usual)
    assert [(o.key, o.size, o.etag) for o in listed] == [("a", 3, '"e"')] and b"<Contents>" not in rest
    reordered = usual.replace(b"<Key>a</Key><LastModified>2026-11-21T00:00:00.000Z</LastModified>",
                              b"<LastModified>2026-11-21T00:00:00.000Z</LastModified><Key>a</Key>")
    assert parse_listing_page(reordered) is None


# -- parallel key ranges (tasks/listing.py, RangeListing) ------------------------------------

def _listed_keys(control, bucket, prefix, **kwargs) -> list[str]:
    from s3arch.listing import RangeListing

    listing = RangeListing(control, bucket, prefix, **kwargs)
    try:
        keys = [o.key for page in listing for o in page]
    finally:
        listing.close()
    return keys, listing.ranges


def test_parallel_ranges_list_every_odd_key_once_in_s3_order(minio, s3, buckets):
    """Keys that need escaping, of every length and script, in hourly and flat layouts: cut
    into many ranges (pages of 40 keys), listed in order and out of order, each is listed once,
    as one LIST after another lists them."""
    from s3arch.listing import iter_pages, key_order

    src, _ = buckets
    for i, key in enumerate(ODD_KEYS):
        put_exact_key(minio, src, key, b"x" * i)
    seed(s3, src, {f"odd/{h:02d}/{i:04x}-{'é' if i % 7 == 0 else 'e'}.log": b"y" for h in range(8) for i in range(150)})
    seed(s3, src, {f"odd/z{i}": b"z" for i in range(300)})  # unpadded numbers: an uneven key space
    clients = engine_clients(minio)
    sequential = [o.key for page in iter_pages(clients.control, src, "odd/") for o in page]
    assert sequential == sorted(sequential, key=key_order) and len(sequential) == len(ODD_KEYS) + 1500

    ordered, ranges = _listed_keys(clients.control, src, "odd/", workers=8, page_size=40)
    assert ordered == sequential
    assert ranges >= 4, "the listing was never cut: nothing ran in parallel"
    unordered, _ = _listed_keys(clients.control, src, "odd/", workers=8, page_size=40, ordered=False)
    assert sorted(unordered, key=key_order) == sequential

    # A segment's range, in parallel: exactly the keys after the one and up to the other.
    after, last = sequential[100], sequential[1200]
    ranged, _ = _listed_keys(clients.control, src, "odd/", start_after=after, last_key=last, workers=8, page_size=40)
    assert ranged == sequential[101:1201]


def test_keys_added_and_removed_while_listing_in_parallel_leave_the_others_listed_once(minio, s3, buckets):
    """While eight ranges are being listed, keys are deleted and added all over the prefix:
    every key there from start to end is listed exactly once, no key twice, all in order."""
    import random
    import threading
    import time

    from s3arch.listing import RangeListing, key_order

    src, _ = buckets
    stable = {f"live/{i:05d}.log": b"s" for i in range(0, 2400, 2)}
    doomed = {f"live/{i:05d}.log": b"d" for i in range(1, 2400, 8)}
    seed(s3, src, {**stable, **doomed})
    added = [f"live/{i:05d}.log" for i in range(3, 2400, 8)]
    clients = engine_clients(minio)
    listing = RangeListing(clients.control, src, "live/", workers=8, page_size=30)
    done = threading.Event()

    def churn():
        rng = random.Random(3)
        for key in rng.sample(sorted(doomed), len(doomed)):
            s3.delete_object(Bucket=src, Key=key)
        for key in rng.sample(added, len(added)):
            s3.put_object(Bucket=src, Key=key, Body=b"a")
        done.set()

    threading.Thread(target=churn, daemon=True).start()
    keys = []
    for page in listing:
        keys += [o.key for o in page]
        time.sleep(0.05)  # a consumer slower than the listing: ranges wait for it
    assert done.wait(60)
    assert len(keys) == len(set(keys)), "a key was listed twice"
    assert keys == sorted(keys, key=key_order)
    assert set(stable) <= set(keys), f"{len(set(stable) - set(keys))} stable keys were not listed"
    assert set(keys) <= set(stable) | set(doomed) | set(added)
    assert listing.ranges >= 4


def test_cuts_racing_pages_under_way_lose_and_repeat_nothing():
    """A fake S3 answers after random delays, so cuts land while pages are in flight and pages
    come back trimmed: over many runs, every key once, in order, for ordered and unordered."""
    import bisect
    import random
    import time
    from datetime import datetime, timezone

    from s3arch.listing import ListedObject, key_order

    when = datetime(2026, 11, 21, tzinfo=timezone.utc)
    rng = random.Random(7)
    keys = sorted({f"p/{rng.choice(['a', 'b', 'ü', '日', chr(0x1F600)])}{rng.randrange(10 ** rng.randrange(1, 7))}"
                   for _ in range(3000)}, key=key_order)
    order = [key_order(k) for k in keys]

    class FakeS3:
        def list_objects_v2(self, Bucket, Prefix, MaxKeys, StartAfter=None, ContinuationToken=None):
            time.sleep(rng.random() * 0.003)
            start = int(ContinuationToken) if ContinuationToken else (
                bisect.bisect_right(order, key_order(StartAfter)) if StartAfter else 0)
            end = min(len(keys), start + MaxKeys)
            page = {"S3archListed": [ListedObject(k, 1, '"e"', when) for k in keys[start:end]],
                    "IsTruncated": end < len(keys)}
            if end < len(keys):
                page["NextContinuationToken"] = str(end)
            return page

    for run in range(12):
        listed, ranges = _listed_keys(FakeS3(), "b", "p/", workers=8, page_size=25, ordered=run % 2 == 0)
        assert ranges >= 4
        assert (listed if run % 2 == 0 else sorted(listed, key=key_order)) == keys, f"run {run}"


def test_a_cut_falls_strictly_inside_its_range():
    import random

    from s3arch.listing import KeySpace, key_order

    rng = random.Random(11)
    alphabet = "09az-./é日" + chr(0x1F600)
    sample = [f"q/{''.join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12)))}" for _ in range(400)]
    space = KeySpace("q/", sample[:50])
    for _ in range(2000):
        a, b = sorted(rng.sample(sample, 2), key=key_order)
        for upto in (b, None):
            cut = space.cut(a, upto)
            if cut is not None:
                assert key_order(a) < key_order(cut) and (upto is None or key_order(cut) < key_order(upto))
                assert cut.startswith("q/")
