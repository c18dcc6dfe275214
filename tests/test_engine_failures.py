"""What happens when the source moves under the archiver, or a run is left half done."""

from __future__ import annotations

import pytest

import s3arch.protocol.commit
import s3arch.io.listing
import s3arch.io.sources
import s3arch.produce.segments.plan
from s3arch.archive import archive_prefix
from s3arch.core.config import ArchiveSpec, S3Url
from s3arch.core.errors import SourceChanged

from helpers import keys_in, open_uploads, seed


def _spec(src, dst, **kw):
    return ArchiveSpec(S3Url(src, "day/"), S3Url(dst, "a/"), storage_class="STANDARD", **kw)


def _after_listing(monkeypatch, action):
    """Run ``action`` once the first page is listed, before any object of it is fetched."""
    real = s3arch.io.listing.iter_pages

    def pages(*args, **kwargs):
        for i, page in enumerate(real(*args, **kwargs)):
            if i == 0:
                action()
            yield page

    monkeypatch.setattr(s3arch.io.listing, "iter_pages", pages)
    # Every listing of a source goes through its prefixes' iter_pages: the stream's, and the
    # one that decides on segments.
    monkeypatch.setattr(s3arch.io.sources, "iter_pages", pages)


@pytest.mark.parametrize("change", ["rewritten", "deleted"])
@pytest.mark.slow
def test_object_changed_or_deleted_after_listing_fails_prefix(s3, buckets, clients, monkeypatch, change):
    src, dst = buckets
    seed(s3, src, {f"day/{i:04d}.log": b"x" * 100 for i in range(1500)})
    victim = "day/0042.log"
    if change == "rewritten":
        _after_listing(monkeypatch, lambda: s3.put_object(Bucket=src, Key=victim, Body=b"new"))
    else:
        _after_listing(monkeypatch, lambda: s3.delete_object(Bucket=src, Key=victim))
    with pytest.raises(SourceChanged) as err:
        archive_prefix(_spec(src, dst), clients)
    assert victim in str(err.value)
    assert ("changed" if change == "rewritten" else "vanished") in str(err.value)
    assert err.value.retryable
    assert keys_in(s3, dst) == [], "nothing may be committed"
    assert open_uploads(s3, dst) == [], "the multipart uploads must be aborted"


def test_upload_left_by_a_killed_run_is_aborted_by_the_rerun(s3, buckets, clients):
    src, dst = buckets
    seed(s3, src, {f"day/{i}.log": b"y" * 10 for i in range(20)})
    stale = s3.create_multipart_upload(Bucket=dst, Key=f"a/{src}/day.tar.gz")["UploadId"]
    s3.upload_part(Bucket=dst, Key=f"a/{src}/day.tar.gz", UploadId=stale, PartNumber=1, Body=b"z" * 100)
    result = archive_prefix(_spec(src, dst), clients)
    assert result.status == "archived" and result.stale_uploads_aborted == 1
    assert open_uploads(s3, dst) == []


@pytest.mark.slow
def test_half_done_prefix_without_manifest_starts_clean(s3, buckets, clients):
    src, dst = buckets
    seed(s3, src, {f"day/{i}.log": b"y" * 10 for i in range(20)})
    s3.put_object(Bucket=dst, Key=f"a/{src}/day.tar.gz", Body=b"partial garbage")
    result = archive_prefix(_spec(src, dst), clients)
    assert result.status == "archived" and result.objects == 20
    assert s3.head_object(Bucket=dst, Key=f"a/{src}/day.tar.gz")["ContentLength"] == result.bytes_out


@pytest.mark.slow
def test_delete_source_deletes_only_unchanged_archived_objects(s3, buckets, clients, monkeypatch):
    src, dst = buckets
    seed(s3, src, {f"day/{i:03d}.log": b"z" * 50 for i in range(1200)})
    real = s3arch.protocol.commit.delete_archived_sources

    def writers_still_busy(control, source, layout, **kwargs):
        s3.put_object(Bucket=src, Key="day/007.log", Body=b"rewritten after archiving")
        s3.put_object(Bucket=src, Key="day/late.log", Body=b"arrived after listing")
        return real(control, source, layout, **kwargs)

    monkeypatch.setattr(s3arch.protocol.commit, "delete_archived_sources", writers_still_busy)
    result = archive_prefix(_spec(src, dst, delete_source=True), clients)
    assert result.deleted == 1199
    assert sorted(keys_in(s3, src)) == ["day/007.log", "day/late.log"]


def test_overwrite_refuses_to_replace_an_archive_with_fewer_objects(s3, buckets, clients):
    from s3arch.core.errors import DestinationConflict

    src, dst = buckets
    seed(s3, src, {f"day/{i}.log": b"y" for i in range(10)})
    first = archive_prefix(_spec(src, dst), clients)
    s3.delete_object(Bucket=src, Key="day/3.log")
    with pytest.raises(DestinationConflict, match="would lose archived data"):
        archive_prefix(_spec(src, dst, overwrite=True), clients)
    head = s3.head_object(Bucket=dst, Key=f"a/{src}/day.tar.gz")
    assert head["ContentLength"] == first.bytes_out
    assert open_uploads(s3, dst) == []
