"""The S3 boundary (tasks/io/store.py) against MinIO: what a caller above it sees of S3's
answers is the engine's typed errors, with S3's status and code; a stopped store sends
nothing; every request is counted. The lost-answer recognition of conditional writes is
tests/test_own_writes.py's; the rule that nothing above tasks/io speaks boto3 is
tests/test_structure.py's."""

from __future__ import annotations

import pytest

from helpers import keys_in, seed
from s3arch.core.errors import AccessDenied, ArchiverError, BucketMissing, Cancelled, ObjectMissing
from s3arch.core.stops import Cancel
from s3arch.io.listed import listed_objects
from s3arch.io.store import Store


def test_a_failed_request_reaches_the_caller_as_a_typed_error_with_s3s_status_and_code(clients, buckets):
    src, _ = buckets
    store = clients.store
    with pytest.raises(ObjectMissing) as missing:
        store.call("get_object", "read s3://src/nothing", Bucket=src, Key="nothing")
    assert (missing.value.status, missing.value.code) == (404, "NoSuchKey")
    assert str(missing.value).startswith("read s3://src/nothing: not found")
    with pytest.raises(ObjectMissing) as headed:  # a HEAD's answer has a status and no body
        store.call("head_object", "check nothing", Bucket=src, Key="nothing")
    assert (headed.value.status, headed.value.code) == (404, None)
    with pytest.raises(BucketMissing) as bucket:
        store.call("head_object", "check the bucket", "bucket", Bucket="no-such-bucket-here", Key="k")
    assert bucket.value.status == 404 and not bucket.value.retryable


def test_a_key_that_may_not_be_there_is_none_not_an_error(clients, buckets, s3):
    src, _ = buckets
    seed(s3, src, {"there": b"x"})
    store = clients.store
    assert store.maybe("head_object", "check", Bucket=src, Key="absent") is None
    assert store.head(src, "absent", "check") is None
    assert store.head(src, "there", "check")["ContentLength"] == 1
    assert store.read(src, "absent", "read", missing_ok=True) is None
    assert store.read(src, "there", "read")["Body"] == b"x"


def test_a_missing_key_a_caller_may_not_list_is_told_apart_from_a_denied_one(minio, buckets, s3):
    """S3 answers 403 for a missing key to a caller without s3:ListBucket: the store's ``head``
    lists the key to tell "not there" from "may not read it"."""
    from helpers import role_clients

    src, _ = buckets
    seed(s3, src, {"day/there": b"x"})
    store = role_clients(minio, [{"Effect": "Allow", "Action": ["s3:ListBucket"],
                                  "Resource": [f"arn:aws:s3:::{src}"]}]).store
    assert store.head(src, "day/absent", "check") is None
    with pytest.raises(AccessDenied) as denied:
        store.head(src, "day/there", "check")
    assert "which exists" in str(denied.value)


def test_a_stopped_store_sends_nothing_and_says_what_it_was_doing(clients, buckets, s3):
    _, dst = buckets
    cancel = Cancel()
    stopped = clients.store.bound(cancel)
    cancel.set("marked failed in the Airflow UI")
    with pytest.raises(Cancelled) as raised:
        stopped.call("put_object", f"write s3://{dst}/k", Bucket=dst, Key="k", Body=b"x")
    assert str(raised.value).startswith(f"marked failed in the Airflow UI while write s3://{dst}/k")
    assert keys_in(s3, dst) == []
    assert clients.store.call("put_object", "write", Bucket=dst, Key="k", Body=b"x")  # the unbound store still sends


def test_a_listing_stops_between_pages_once_cancelled(clients, buckets, s3):
    src, _ = buckets
    seed(s3, src, {f"day/{i:04d}": b"" for i in range(30)})
    cancel = Cancel()
    store = clients.store.bound(cancel)
    pages = store.pages("list_objects_v2", f"list s3://{src}/day/", Bucket=src, Prefix="day/",
                        PaginationConfig={"PageSize": 10})
    assert len(listed_objects(next(pages))) == 10
    cancel.set("stopped")
    with pytest.raises(Cancelled):
        next(pages)
    assert store.sent.counts() == {"list_objects_v2": 1}


def test_every_request_is_counted_by_operation_across_bound_stores(clients, buckets, s3):
    src, _ = buckets
    seed(s3, src, {f"day/{i:04d}": b"" for i in range(25)})
    store = Store(clients.control)
    listed = sum(len(listed_objects(p)) for p in store.pages("list_objects_v2", "list", Bucket=src, Prefix="day/",
                                                           PaginationConfig={"PageSize": 10}))
    store.bound(Cancel()).maybe("head_object", "check", Bucket=src, Key="absent")
    assert listed == 25
    assert store.sent.counts() == {"list_objects_v2": 3, "head_object": 1} and store.sent.total() == 4


def test_a_request_built_wrong_is_a_bug_not_a_fault_to_retry(clients, buckets):
    """botocore refuses a malformed request before sending it: that is this code's bug, which
    must not read as "try again" (exit 3) and loop Airflow's retries."""
    src, _ = buckets
    with pytest.raises(Exception) as raised:
        clients.store.call("head_object", "check", Bucket=src, Kye="typo")
    assert not isinstance(raised.value, ArchiverError)
    assert type(raised.value).__name__ == "ParamValidationError"
