"""The listing's own page parser (tasks/listing.py) against botocore's, on a real MinIO: the
same keys, sizes, ETags and times for keys that need escaping, and botocore's answer whenever
a page is not in the shape the parser knows."""

from __future__ import annotations

from helpers import engine_clients, put_exact_key, seed

ODD_KEYS = ["odd/plain.log", "odd/space and+plus.log", "odd/amp&lt;<>\"'.log", "odd/percent%2F%25.log",
            "odd/ünïcødé/日本語.log", "odd/tab\there.log", "odd/newline\nhere.log", "odd/ctrl\x01\x1f.log",
            "odd/emoji-\U0001F600.log", "odd/trailing-space .log", "odd/dir/"]  # MinIO refuses "a//b"


def test_page_parser_reads_what_botocore_reads_for_keys_that_need_escaping(minio, s3, buckets):
    from tasks.listing import PAGE_KEY, iter_pages

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
    from tasks.listing import ListedObject, iter_pages
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
    from tasks.listing import parse_listing_page

    usual = (b'<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>a</Key>'
             b'<LastModified>2026-11-21T00:00:00.000Z</LastModified><ETag>&quot;e&quot;</ETag><Size>3</Size>'
             b'<StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>')
    listed, rest = parse_listing_page(usual)
    assert [(o.key, o.size, o.etag) for o in listed] == [("a", 3, '"e"')] and b"<Contents>" not in rest
    reordered = usual.replace(b"<Key>a</Key><LastModified>2026-11-21T00:00:00.000Z</LastModified>",
                              b"<LastModified>2026-11-21T00:00:00.000Z</LastModified><Key>a</Key>")
    assert parse_listing_page(reordered) is None
