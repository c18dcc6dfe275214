"""The private corner of botocore the listing's speed rests on (``listed.install_page_parser``:
``botocore.handlers._handle_200_error``), and the public one the timestamps as text rest on
(``botocore_hooks.engine_session``: the botocore session's ``response_parser_factory``
component). Where botocore moves either, these tests fail on a real client against MinIO, so
that an upgrade of botocore cannot slow the listing down unnoticed."""

from __future__ import annotations

import logging

from helpers import engine_clients, seed


def test_botocore_still_has_the_private_handler_the_page_parser_wraps():
    import botocore.handlers

    assert callable(getattr(botocore.handlers, "_handle_200_error", None)), \
        f"botocore {botocore.__version__} moved handlers._handle_200_error (listed.install_page_parser)"


def test_the_engine_clients_keep_timestamps_as_text_and_the_callers_session_is_unchanged(minio, s3, buckets):
    """The engine's clients come from a session of its own, over the caller's credentials:
    they sign with them, return text timestamps, and a client of the caller's session made
    afterwards still parses timestamps into datetimes."""
    import datetime

    import boto3

    from s3arch.io.s3 import S3Clients

    src, _ = buckets
    seed(s3, src, {"day/a.log": b"a"})
    caller = boto3.Session(aws_access_key_id=minio.access_key, aws_secret_access_key=minio.secret_key,
                           region_name=minio.region)
    clients = S3Clients.from_session(caller, minio.endpoint_url)
    for client in (clients.control, clients.single_attempt):
        assert isinstance(client.head_object(Bucket=src, Key="day/a.log")["LastModified"], str)
    assert clients.session.get_credentials().access_key == minio.access_key
    theirs = caller.client("s3", endpoint_url=minio.endpoint_url).head_object(Bucket=src, Key="day/a.log")
    assert isinstance(theirs["LastModified"], datetime.datetime)


def test_a_listing_goes_through_the_fast_path_and_botocore_checks_only_what_is_left(minio, s3, buckets, monkeypatch):
    """The page parser's objects are what botocore would have parsed, its timestamps stay text,
    and botocore's 200-error check sees the page without its entries (its wrapped handler
    runs, the original is unregistered: else it would parse every page whole again)."""
    import botocore.handlers
    from s3arch.io.listed import PAGE_KEY, listed_objects

    src, _ = buckets
    seed(s3, src, {f"day/{i:04d}.log": b"z" * i for i in range(1500)})  # two pages
    checked: list[bytes] = []
    looks_like_error = botocore.handlers._looks_like_special_case_error

    def seen(status_code, body):
        checked.append(body)
        return looks_like_error(status_code, body)

    monkeypatch.setattr(botocore.handlers, "_looks_like_special_case_error", seen)
    control = engine_clients(minio).control
    pages = list(control.get_paginator("list_objects_v2").paginate(Bucket=src, Prefix="day/"))
    assert all(PAGE_KEY in page and "Contents" not in page for page in pages), "a page was left to botocore"
    assert checked and not any(b"<Contents>" in body for body in checked), \
        "botocore's own 200-error check parsed a whole listing page"
    ours = [(o.key, o.size, o.etag, o.last_modified) for page in pages for o in listed_objects(page)]
    theirs = [(o["Key"], o["Size"], o["ETag"], o["LastModified"]) for page in
              s3.get_paginator("list_objects_v2").paginate(Bucket=src, Prefix="day/") for o in page["Contents"]]
    assert ours == theirs
    assert isinstance(control.head_object(Bucket=src, Key="day/0001.log")["LastModified"], str)


def test_a_moved_hook_is_a_warning_not_a_silent_slowdown(minio, s3, buckets, monkeypatch, caplog):
    import botocore.handlers
    from s3arch.io.listing import iter_pages

    src, _ = buckets
    seed(s3, src, {f"day/{i}.log": b"x" for i in range(3)})
    monkeypatch.delattr(botocore.handlers, "_handle_200_error")
    with caplog.at_level(logging.WARNING):
        clients = engine_clients(minio)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("handlers._handle_200_error" in m for m in warned), warned
    listed = [o.key for page in iter_pages(clients.store, src, "day/") for o in page]
    assert listed == ["day/0.log", "day/1.log", "day/2.log"]  # still right, only slower
