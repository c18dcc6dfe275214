"""Stopping an extract to S3 (tasks/restore/extract.py; the ways a run stops: tasks/core/stops.py),
as the user sees it: a cancel from another thread, or the restore task's ``on_kill``, stops the
extract before its next object or part, and the multipart uploads it started are aborted before
it raises; another writer's upload of the same key is none of its business. Each stop is sent
while the extract's upload of a large object is open, and the extract reads on only once the stop
reached it (an event, not a sleep), as it would after a stop sent at that moment."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

import pytest

from helpers import TaskInstanceStub, day_spec, keys_in, open_uploads, seed
from test_stops import cancels_seen

PREFIX = "day/"  # day_spec's
LARGE = 12 << 20  # over one PUT (to_s3.SMALL_OBJECT): each object is written back by a multipart upload
OBJECTS = 4
STOP_AT = 3  # the stop is sent once the upload of this object (in key order) is open


@pytest.fixture
def archived(s3, buckets, clients):
    """``OBJECTS`` large objects of ``day/`` archived in STANDARD under ``a/`` of the second
    bucket: the archive's layout, its URL and the objects."""
    from s3arch.archive import archive_prefix
    from s3arch.format.manifest import layout_for

    src, dst = buckets
    objects = {f"{PREFIX}{i:02d}.bin": os.urandom(LARGE) for i in range(OBJECTS)}
    seed(s3, src, objects)
    spec = day_spec(src, dst)
    archive = archive_prefix(spec, clients).archive
    return layout_for(spec.source, spec.destination), archive, objects


def stop_while_uploading(monkeypatch, stop: Callable[[], None]) -> list[float]:
    """``stop()`` runs on another thread once the extract opened the upload of object
    ``STOP_AT``; the extract reads on once the stop reached its stream. The list gets the
    monotonic time of the stop."""
    import s3arch.io.upload as upload
    from s3arch.io.store import Store

    seen = cancels_seen(monkeypatch)
    opened, stopped_at, uploads = threading.Event(), [], []
    create_upload, stream = upload.create_upload, Store.stream

    def create_and_count(*args, **kwargs):
        uploads.append(create_upload(*args, **kwargs))
        if len(uploads) == STOP_AT:
            opened.set()
        return uploads[-1]

    def read_once_stopped(*args, **kwargs):  # the extract's reads of the archive: the store's streams
        for chunk in stream(*args, **kwargs):
            if opened.is_set():
                assert seen.wait(10), "the stop never reached the extract"
            yield chunk

    def stop_when_open():
        if opened.wait(60):
            stopped_at.append(time.monotonic())
            stop()

    monkeypatch.setattr(upload, "create_upload", create_and_count)
    monkeypatch.setattr(Store, "stream", read_once_stopped)
    threading.Thread(target=stop_when_open, name="test-stopper", daemon=True).start()
    return stopped_at


def written_before_the_stop(objects: dict[str, bytes], target: str) -> dict[str, bytes]:
    """The objects extracted before the stop, under ``target``: those before object ``STOP_AT``."""
    return {target + key: objects[key] for key in sorted(objects)[:STOP_AT - 1]}


def contents(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys_in(s3, bucket, prefix)}


def test_cancelled_extract_to_s3_stops_and_leaves_no_open_upload(s3, buckets, clients, archived, monkeypatch):
    from s3arch.core.config import S3Url
    from s3arch.core.errors import Cancelled
    from s3arch.core.stops import Cancel
    from s3arch.restore.days import extract_day_to_s3

    _, dst = buckets
    layout, archive, objects = archived
    cancel = Cancel()
    stopped_at = stop_while_uploading(monkeypatch, lambda: cancel.set("cancelled by a person"))
    with pytest.raises(Cancelled) as cancelled:
        extract_day_to_s3(clients, layout, S3Url(dst, "back/"), cancel=cancel)
    took = time.monotonic() - stopped_at[0]

    assert str(cancelled.value) == (
        f"cancelled by a person while extracting {archive} to s3://{dst}/back/: "
        f"nothing partial was left; {STOP_AT - 1} objects were written before it, and a re-run skips them")
    assert took < 5, f"{took:.1f} s from the cancel to the extract's end: Airflow's SIGKILL comes after 5 s"
    assert open_uploads(s3, dst) == []
    assert contents(s3, dst, "back/") == written_before_the_stop(
        {k.removeprefix(PREFIX): v for k, v in objects.items()}, "back/")


def test_extract_leaves_another_writers_upload_of_the_same_key_alone(s3, buckets, clients, archived):
    from s3arch.core.config import S3Url
    from s3arch.restore.days import extract_day_to_s3

    _, dst = buckets
    layout, _, objects = archived
    theirs = s3.create_multipart_upload(Bucket=dst, Key=f"back/{sorted(objects)[0].removeprefix(PREFIX)}")

    result = extract_day_to_s3(clients, layout, S3Url(dst, "back/"))

    assert result.objects == len(objects)
    assert [(u["Key"], u["UploadId"]) for u in open_uploads(s3, dst)] == [(theirs["Key"], theirs["UploadId"])]
    assert contents(s3, dst, "back/") == {f"back/{k.removeprefix(PREFIX)}": v for k, v in objects.items()}


def test_on_kill_of_the_restore_task_stops_its_extract_and_leaves_no_open_upload(s3, buckets, clients, archived,
                                                                                 monkeypatch):
    import s3arch_airflow.restore as restore
    from s3arch_airflow.task_stops import KILLED

    src, dst = buckets
    _, archive, objects = archived
    from s3arch_airflow.hooks import S3ArchHook

    monkeypatch.setattr(S3ArchHook, "engine_clients", lambda hook: clients)
    operator = restore.S3RestoreArchiveOperator(task_id="restore", source_bucket=src, prefix=PREFIX,
                                                destination=f"s3://{dst}/a/", options={"target": f"s3://{dst}/back/"})
    stopped_at = stop_while_uploading(monkeypatch, operator.on_kill)  # what Airflow's SIGTERM handler calls
    ti = TaskInstanceStub()
    with pytest.raises(Exception, match="cancelled by Airflow"):
        operator.execute({"ti": ti})
    took = time.monotonic() - stopped_at[0]

    [row] = ti.pushed[restore.RESTORE_ROWS_XCOM_KEY]
    assert row["status"] == "failed" and row["retryable"] is False
    assert row["error"].startswith(f"{KILLED} while extracting {archive} to s3://{dst}/back/: nothing partial was left")
    assert took < 5, f"{took:.1f} s from on_kill to the task's end: Airflow's SIGKILL comes after 5 s"
    assert open_uploads(s3, dst) == []
    assert contents(s3, dst, "back/") == written_before_the_stop(objects, "back/")  # the operator keeps original keys
