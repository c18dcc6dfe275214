"""The two private corners of botocore the control client's speed rests on
(``botocore_hooks.keep_timestamps_as_text``: ``client._endpoint._response_parser_factory``;
``listed.install_page_parser``: ``botocore.handlers._handle_200_error``). Where botocore moves
either, the client still works, only slower, and says so in a warning: these tests fail
instead, on a real client against MinIO, so that an upgrade of botocore cannot slow the
listing down unnoticed."""

from __future__ import annotations

import logging

from helpers import engine_clients, seed


def test_botocore_still_has_the_private_hooks(minio):
    import botocore.handlers
    from botocore.parsers import ResponseParserFactory

    assert callable(getattr(botocore.handlers, "_handle_200_error", None)), \
        f"botocore {botocore.__version__} moved handlers._handle_200_error (listed.install_page_parser)"
    control = minio.client()
    assert isinstance(getattr(getattr(control, "_endpoint", None), "_response_parser_factory", None),
                      ResponseParserFactory), \
        f"botocore {botocore.__version__} moved client._endpoint._response_parser_factory (botocore_hooks.keep_timestamps_as_text)"


def test_a_listing_goes_through_the_fast_path_and_botocore_checks_only_what_is_left(minio, s3, buckets, monkeypatch):
    """The page parser's objects are what botocore would have parsed, its timestamps stay text,
    and botocore's 200-error check sees the page without its entries (its wrapped handler
    runs, the original is unregistered: else it would parse every page whole again)."""
    import botocore.handlers
    from s3arch.io.listed import PAGE_KEY, _listed

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
    ours = [(o.key, o.size, o.etag, o.last_modified) for page in pages for o in _listed(page)]
    theirs = [(o["Key"], o["Size"], o["ETag"], o["LastModified"]) for page in
              s3.get_paginator("list_objects_v2").paginate(Bucket=src, Prefix="day/") for o in page["Contents"]]
    assert ours == theirs
    assert isinstance(control.head_object(Bucket=src, Key="day/0001.log")["LastModified"], str)


def test_a_moved_hook_is_a_warning_not_a_silent_slowdown(minio, s3, buckets, monkeypatch, caplog):
    import botocore.handlers
    from s3arch.io.listing import iter_pages
    from s3arch.io.botocore_hooks import keep_timestamps_as_text

    src, _ = buckets
    seed(s3, src, {f"day/{i}.log": b"x" for i in range(3)})
    monkeypatch.delattr(botocore.handlers, "_handle_200_error")
    with caplog.at_level(logging.WARNING):
        clients = engine_clients(minio)
        keep_timestamps_as_text(object())
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("handlers._handle_200_error" in m for m in warned), warned
    assert any("_endpoint._response_parser_factory" in m for m in warned), warned
    listed = [o.key for page in iter_pages(clients.control, src, "day/") for o in page]
    assert listed == ["day/0.log", "day/1.log", "day/2.log"]  # still right, only slower
