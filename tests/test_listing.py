"""The listing's own page parser (tasks/io/listed.py) against botocore's, on a real MinIO: the
same keys, sizes, ETags and times for keys that need escaping, and botocore's answer whenever
a page is not in the shape the parser knows."""

from __future__ import annotations

import pytest

from helpers import engine_clients, put_exact_key, seed
from s3arch.io.store import Store

ODD_KEYS = ["odd/plain.log", "odd/space and+plus.log", "odd/amp&lt;<>\"'.log", "odd/percent%2F%25.log",
            "odd/ünïcødé/日本語.log", "odd/tab\there.log", "odd/newline\nhere.log", "odd/ctrl\x01\x1f.log",
            "odd/emoji-\U0001F600.log", "odd/trailing-space .log", "odd/dir/"]  # MinIO refuses "a//b"


@pytest.mark.slow
def test_page_parser_reads_what_botocore_reads_for_keys_that_need_escaping(minio, s3, buckets):
    from s3arch.io.listed import PAGE_KEY
    from s3arch.io.listing import iter_pages

    src, _ = buckets
    for i, key in enumerate(ODD_KEYS):
        put_exact_key(minio, src, key, b"x" * i)
    seed(s3, src, {f"odd/many/{i:05d}.log": b"y" * (i % 7) for i in range(2500)})  # three pages
    clients = engine_clients(minio)
    raw = clients.control.list_objects_v2(Bucket=src, Prefix="odd/")
    assert PAGE_KEY in raw, "MinIO's pages were left to botocore: the fast path is not what is tested"

    ours = [(o.key, o.size, o.etag, o.last_modified) for page in iter_pages(clients.store, src, "odd/") for o in page]
    theirs = [(o["Key"], o["Size"], o["ETag"], o["LastModified"]) for page in
              s3.get_paginator("list_objects_v2").paginate(Bucket=src, Prefix="odd/") for o in page.get("Contents", [])]
    assert len(ours) == len(ODD_KEYS) + 2500
    assert [o[:3] for o in ours] == [t[:3] for t in theirs]
    assert [o[3] for o in ours] == [t[3] for t in theirs]  # both timezone-aware datetimes


def test_pages_ending_inside_a_range_stop_at_its_last_key():
    """A segment's range ends inside a page: the page is cut there and listing stops."""
    from s3arch.io.listed import ListedObject
    from s3arch.io.listing import iter_pages
    from datetime import datetime, timezone

    when = datetime(2026, 11, 21, tzinfo=timezone.utc)

    class Pages:
        def get_paginator(self, name):
            return self

        def paginate(self, **_):
            yield {"S3archListed": [ListedObject(f"p/{i:03d}", 1, '"e"', when) for i in range(0, 5)]}
            yield {"S3archListed": [ListedObject(f"p/{i:03d}", 1, '"e"', when) for i in range(5, 10)]}
            raise AssertionError("listed past the range's last key")

    keys = [o.key for page in iter_pages(Store(Pages()), "b", "p/", start_after="p/001", last_key="p/006") for o in page]
    assert keys[-1] == "p/006" and "p/007" not in keys


def test_a_page_in_another_shape_is_left_to_botocore():
    from s3arch.io.listed import parse_listing_page

    usual = (b'<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Key>'
             b'<LastModified>2026-11-21T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag><Size>3</Size>'
             b'<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>')
    listed, rest = parse_listing_page(usual)
    assert [(o.key, o.size, o.etag) for o in listed] == [("a", 3, '"e"')] and b"<Contents>" not in rest
    reordered = usual.replace(b"<Key>a</Key><LastModified>2026-11-21T00:00:00.000Z</LastModified>",
                              b"<LastModified>2026-11-21T00:00:00.000Z</LastModified><Key>a</Key>")
    assert parse_listing_page(reordered) is None


# -- parallel key ranges (tasks/io/ranges.py, RangeListing) ------------------------------------

def _listed_keys(client, bucket, prefix, **kwargs) -> list[str]:
    from s3arch.io.ranges import RangeListing

    listing = RangeListing(Store(client), bucket, prefix, **kwargs)
    try:
        keys = [o.key for page in listing for o in page]
    finally:
        listing.close()
    return keys, listing.ranges


@pytest.mark.slow
def test_parallel_ranges_list_every_odd_key_once_in_s3_order(minio, s3, buckets):
    """Keys that need escaping, of every length and script, in hourly and flat layouts: cut
    into many ranges (pages of 40 keys), listed in order and out of order, each is listed once,
    as one LIST after another lists them."""
    from s3arch.io.keys import key_order
    from s3arch.io.listing import iter_pages

    src, _ = buckets
    for i, key in enumerate(ODD_KEYS):
        put_exact_key(minio, src, key, b"x" * i)
    seed(s3, src, {f"odd/{h:02d}/{i:04x}-{'é' if i % 7 == 0 else 'e'}.log": b"y" for h in range(8) for i in range(150)})
    seed(s3, src, {f"odd/z{i}": b"z" for i in range(300)})  # unpadded numbers: an uneven key space
    clients = engine_clients(minio)
    sequential = [o.key for page in iter_pages(clients.store, src, "odd/") for o in page]
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


class _InFlight(Store):
    """A store that notes each LIST's start and end, and which asked for folders."""

    def __init__(self, client):
        super().__init__(client)
        import threading

        self.lock, self.now, self.most, self.folder_lists = threading.Lock(), 0, 0, 0

    def call(self, operation, what, subject, /, **params):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.folder_lists += "Delimiter" in params
        try:
            return super().call(operation, what, subject, **params)
        finally:
            with self.lock:
                self.now -= 1


def test_a_day_of_hourly_folders_is_cut_at_its_folders_for_every_waiting_worker(minio, s3, buckets):
    """A day of 24 hourly folders, pages of 50 keys: at the first cut, one LIST for the folders
    after the keys listed so far gives every waiting worker a range at once (cut every two pages
    instead, most of the listing ran two or three LISTs at a time); each key is listed once, in
    order."""
    from s3arch.io.ranges import RangeListing

    src, _ = buckets
    keys = [f"day/{h:02d}/app-{i:06d}.log" for h in range(24) for i in range(125)]
    seed(s3, src, dict.fromkeys(keys, b"x"))
    store = _InFlight(engine_clients(minio).control)
    listing = RangeListing(store, src, "day/", workers=8, page_size=50)
    try:
        listed = [o.key for page in listing for o in page]
    finally:
        listing.close()
    assert listed == keys
    assert store.folder_lists == 1
    assert store.most >= 6, f"at most {store.most} LISTs at once: the folders did not cut the listing"
    assert listing.requests <= len(keys) // 50 + listing.ranges + 1  # a page each, a probe per range, the folders


@pytest.mark.slow
def test_keys_added_and_removed_while_listing_in_parallel_leave_the_others_listed_once(minio, s3, buckets):
    """While eight ranges are being listed, keys are deleted and added all over the prefix:
    every key there from start to end is listed exactly once, no key twice, all in order."""
    import random
    import threading
    import time

    from s3arch.io.keys import key_order
    from s3arch.io.ranges import RangeListing

    src, _ = buckets
    stable = {f"live/{i:05d}.log": b"s" for i in range(0, 2400, 2)}
    doomed = {f"live/{i:05d}.log": b"d" for i in range(1, 2400, 8)}
    seed(s3, src, {**stable, **doomed})
    added = [f"live/{i:05d}.log" for i in range(3, 2400, 8)]
    clients = engine_clients(minio)
    listing = RangeListing(clients.store, src, "live/", workers=8, page_size=30)
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

    from s3arch.io.listed import ListedObject
    from s3arch.io.keys import key_order

    when = datetime(2026, 11, 21, tzinfo=timezone.utc)
    rng = random.Random(7)
    keys = sorted({f"p/{rng.choice(['a', 'b', 'ü', '日', chr(0x1F600)])}{rng.randrange(10 ** rng.randrange(1, 7))}"
                   for _ in range(3000)}, key=key_order)
    order = [key_order(k) for k in keys]

    class FakeS3:
        def list_objects_v2(self, Bucket, Prefix, MaxKeys, StartAfter=None, ContinuationToken=None, **_):
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
        assert ranges >= 2  # cut (mostly into 4: a range takes the keys its neighbour's page passed it)
        assert (listed if run % 2 == 0 else sorted(listed, key=key_order)) == keys, f"run {run}"


def test_a_cut_falls_strictly_inside_its_range():
    import random

    from s3arch.io.keys import key_order
    from s3arch.io.keyspace import KeySpace

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


# -- cut keys are valid object names (issue 30: MinIO refuses a StartAfter with a "." segment) ----

_SPACES = b" \t\n\v\f\r\x85\xa0"  # what MinIO trims from a path segment (Go's unicode.IsSpace per byte)


def minio_name_problem(key: str) -> str | None:
    """Why MinIO (or S3's 1,024-byte limit) would refuse ``key`` as an object name, else None.
    Written from MinIO's hasBadPathComponent / IsValidObjectName, independently of the engine,
    and stricter where S3 and MinIO differ: no empty segment (``//``, a trailing ``/``)."""
    try:
        raw = key.encode("utf-8")
    except UnicodeEncodeError:
        return "not UTF-8"
    if not raw or len(raw) > 1024:
        return f"{len(raw)} bytes"
    if b"\0" in raw:
        return "NUL"
    for segment in raw.replace(b"\\", b"/").split(b"/"):
        if segment.strip(_SPACES) in (b"", b".", b".."):
            return f"segment {segment!r}"
    return None


def test_minio_name_rules_match_what_minio_refuses_as_start_after(minio, s3, buckets):
    """The test's own rules, checked against the server: each key it calls bad is refused as a
    StartAfter, each it calls good is accepted (MinIO accepts '//' and a trailing '/' as a
    StartAfter; the rules refuse them as object names, which is stricter)."""
    import botocore.exceptions
    import pytest

    src, _ = buckets
    for key in ("p/./x", "p/..", "p/1-/.", "p/ ./x", "p/a\\.\\b", "p/.", "p/\t.\t/x"):
        assert minio_name_problem(key), key
        with pytest.raises(botocore.exceptions.ClientError, match="XMinioInvalidResourceName"):
            s3.list_objects_v2(Bucket=src, Prefix="p/", StartAfter=key)
    for key in ("p/1./x", "p/.a", "p/..a", "p/-/-.-", "p/a\\b", "p/日.."):
        assert minio_name_problem(key) is None, key
        s3.list_objects_v2(Bucket=src, Prefix="p/", StartAfter=key)


def _dotted_keys(rng, prefix: str, n: int) -> list[str]:
    """Keys made mostly of '.', '-' and '/' (each one a valid name itself: MinIO holds it)."""
    pieces = [".", "-", "..", ".-", "-.", "1.", "0-", "a", "z", "9", "..a", ".log", "-1", "é", "-.-", "~"]
    keys = set()
    while len(keys) < n:
        segments = ["".join(rng.choice(pieces) for _ in range(rng.randrange(1, 4))) for _ in range(rng.randrange(1, 5))]
        key = prefix + "/".join(segments)
        if minio_name_problem(key) is None:
            keys.add(key)
    # MinIO keeps objects as files: a key that is another's folder ("a/b" beside "a/b/c") is lost.
    folders = {k[:i] for k in keys for i, c in enumerate(k) if c == "/"}
    return [k for k in keys if k not in folders]


def test_every_cut_key_is_a_valid_object_name_over_many_dotted_key_sets():
    """A property test, seeded: over 300 key sets full of '.', '-' and '/', every key the
    listing synthesizes to cut a range is a valid object name on MinIO and S3 alike and falls
    strictly inside its range; and cuts are still found (the listing stays parallel)."""
    import random

    from s3arch.io.keys import key_order
    from s3arch.io.keyspace import KeySpace

    rng = random.Random(30)
    asked = found = 0
    for case in range(300):
        prefix = rng.choice(["p/", "logs/2026/11/21/", "d.", "x/-/", ""])
        keys = sorted(_dotted_keys(rng, prefix, rng.randrange(20, 120)), key=key_order)
        space = KeySpace(prefix, rng.sample(keys, min(len(keys), 40)))
        for _ in range(60):
            a, b = sorted(rng.sample(keys, 2), key=key_order)
            for upto in (b, None):
                asked += 1
                cut = space.cut(a, upto)
                if cut is None:
                    continue
                found += 1
                assert minio_name_problem(cut) is None, (case, a, upto, cut, minio_name_problem(cut))
                assert key_order(a) < key_order(cut) and (upto is None or key_order(cut) < key_order(upto))
                assert cut.startswith(prefix)
    assert found > 0.6 * asked, f"only {found} of {asked} ranges could be cut"


@pytest.mark.slow
def test_a_dotted_prefix_lists_in_parallel_on_minio_with_every_start_after_accepted(minio, s3, buckets):
    """The 1,000,000-object day's failure in small: keys full of '.', '-' and '/', listed in
    parallel with cuts forced (pages of 10 keys): MinIO accepts every StartAfter (today's
    main: TransientError XMinioInvalidResourceName after 32 s of retries), and no key is
    listed twice or out of order.

    Not asserted: that every key is listed. The pinned MinIO itself answers some StartAfter
    LISTs of such a deep, dotted tree short (measured: a real key as StartAfter, MaxKeys 10,
    an empty page with IsTruncated false where 10 keys follow; 155 of 464 such probes wrong,
    at MaxKeys 1000 right), whatever key the cut is; continuation tokens page it whole.
    A range's probe from its last key (RangeListing._list) finds part of what such a short
    page left out (measured on this set, pages of 10: 91 and 32 keys missed before it, 56 and
    22 with it), but MinIO answers some probes empty the same way."""
    import random

    from s3arch.io.keys import key_order
    from s3arch.io.listing import iter_pages
    from s3arch.io.ranges import RangeListing

    src, _ = buckets
    keys = _dotted_keys(random.Random(1), "day/", 1800)
    seed(s3, src, {k: b"." for k in keys})
    clients = engine_clients(minio)
    sequential = [o.key for page in iter_pages(clients.store, src, "day/") for o in page]
    assert sorted(sequential, key=key_order) == sorted(keys, key=key_order)

    class Recording:
        def __init__(self, control):
            self.control, self.start_after = control, []

        def list_objects_v2(self, **kwargs):
            if "StartAfter" in kwargs:
                self.start_after.append(kwargs["StartAfter"])
            return self.control.list_objects_v2(**kwargs)

    for ordered in (True, False):
        recording = Recording(clients.control)
        listing = RangeListing(Store(recording), src, "day/", workers=8, page_size=10, ordered=ordered)
        try:
            listed = [o.key for page in listing for o in page]
        finally:
            listing.close()
        assert len(listed) == len(set(listed)) and set(listed) <= set(sequential)
        if ordered:
            assert listed == sorted(listed, key=key_order)
        assert len(recording.start_after) >= 8, "the listing was hardly cut"
        assert [k for k in recording.start_after if minio_name_problem(k)] == []


# -- a range whose listing ends short (MinIO's StartAfter LISTs of deep dotted trees do) ------

class AnswerShort:
    """Rewrites the first full, truncated ListObjectsV2 page it sees to its first ``keep``
    entries, saying it is the last page: what MinIO answers for some StartAfter LISTs (see the
    dotted-prefix test above). Pages of an empty or ending range pass unchanged, so the cut
    always hides keys."""

    def __init__(self, keep: int):
        self.keep, self.hidden = keep, []

    def __call__(self, body: bytes) -> bytes:
        import re

        entries = re.findall(rb"<Contents>.*?</Contents>", body, re.S)
        if self.hidden or b"<IsTruncated>true</IsTruncated>" not in body or len(entries) <= self.keep:
            return body
        self.hidden = [re.search(rb"<Key>([^<]*)</Key>", e).group(1).decode() for e in entries[self.keep:]]
        body = body.replace(b"".join(entries), b"".join(entries[:self.keep]))
        body = re.sub(rb"<NextContinuationToken>[^<]*</NextContinuationToken>", b"", body)
        return body.replace(b"<IsTruncated>true</IsTruncated>", b"<IsTruncated>false</IsTruncated>")


def test_a_range_whose_page_ends_short_still_lists_every_key(minio, s3, buckets, proxy):
    """The fault proxy answers one StartAfter LIST of a cut range with its first 3 keys and
    IsTruncated false, the rest of the range unlisted: every key of the prefix is listed anyway,
    once and in order, as boto3's listing (straight to MinIO) has them; in order and out of order."""
    from faultproxy import Fault, is_list

    from s3arch.io.keys import key_order

    src, _ = buckets
    seed(s3, src, {f"short/{h:02d}/{i:04d}.log": b"y" for h in range(6) for i in range(250)})
    truth = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=src, Prefix="short/")
             for o in page.get("Contents", [])]
    clients = engine_clients(minio, endpoint_url=proxy.endpoint_url)
    for ordered in (True, False):
        proxy.clear()
        short = AnswerShort(3)
        proxy.add(Fault("rewrite", rewrite=short, match=lambda r: is_list(r) and "start-after" in r.query))
        listed, ranges = _listed_keys(clients.control, src, "short/", workers=8, page_size=40, ordered=ordered)
        assert len(short.hidden) == 37 and ranges >= 4
        assert len(listed) == len(set(listed)), "a key was listed twice"
        missed = sorted(set(truth) - set(listed), key=key_order)
        assert not missed, f"ordered={ordered}: {len(missed)} keys missed, first {missed[:3]}"
        assert (listed if ordered else sorted(listed, key=key_order)) == truth
