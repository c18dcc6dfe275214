"""A segmented run's plan and its segments see one listing: the plan is cut from the listing it
recorded, never from the source listed again. A source that changed since the plan so that a
segment cannot be produced as planned is its own error (PlanOutdated): it says a new plan is
needed, is not retried per segment, and the next prepare plans again. And a CLI segmented
run aborts the records uploads its killed workers left."""

from __future__ import annotations

import pytest

from helpers import keys_in, open_uploads, read_archive, run_one_segment_inline, seed
from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import Cancelled


pytestmark = pytest.mark.slow  # segmented CLI runs whose plan goes stale


PREFIX = "events/2026/11/21/"


def spec(src, dst, **kw):
    from s3arch.core.config import ArchiveSpec, S3Url

    return ArchiveSpec(S3Url(src, PREFIX), S3Url(dst, "v/"), storage_class="STANDARD", processes=1, **kw)


def test_a_key_added_and_one_removed_during_planning(monkeypatch, s3, buckets, clients):
    """Between the plan's listing and its cuts, one key is written into the first segment's
    range and one is deleted from the last's. Today's main listed the cut pages again, saw
    both, and placed every later segment where the recorded listing does not put it: each
    failed check_produced ("IntegrityError", retryable: three tries per worker, then Airflow's).
    Now the plan is the recording: the added key is left for the next run; the segment that
    lost a key fails once with PlanOutdated (exit 2 for the segment task, a new plan needed);
    the other segments are produced; the next prepare plans again and the day archives."""
    import s3arch.produce.segments.plan as plan_module
    from s3arch.archive import archive_segment, assemble_segments, prepare_segments
    from s3arch.produce.segments import PlanOutdated

    src, dst = buckets
    objects = {f"{PREFIX}{h:02d}/event-{i:03d}.log": b"id=%d\n" % i * (i % 30 + 1) for h in range(3) for i in range(200)}
    seed(s3, src, objects)
    keys = sorted(objects)
    added, removed = f"{PREFIX}00/event-050-late.log", keys[-7]
    recorder_close = plan_module.ListingRecorder.close

    def close_then_change(self):
        recorded = recorder_close(self)
        s3.put_object(Bucket=src, Key=added, Body=b"written during planning\n")
        s3.delete_object(Bucket=src, Key=removed)
        return recorded

    monkeypatch.setattr(plan_module.ListingRecorder, "close", close_then_change)
    planned = prepare_segments(spec(src, dst), 3, clients)
    monkeypatch.setattr(plan_module.ListingRecorder, "close", recorder_close)
    assert planned.status == "planned" and planned.objects == len(objects)
    for k in (0, 1):
        assert archive_segment(spec(src, dst), k, clients)["status"] == "produced"
    with pytest.raises(PlanOutdated, match="the source changed since the plan.*a new plan is needed") as outdated:
        archive_segment(spec(src, dst), 2, clients)
    assert not outdated.value.retryable and outdated.value.exit_code == 2
    assert "prepare task" in str(outdated.value)
    # The next prepare makes a new plan from the source as it is now.
    assert prepare_segments(spec(src, dst), 3, clients).objects == len(objects)  # one added, one removed
    for k in (2, 0, 1):
        archive_segment(spec(src, dst), k, clients)
    result = assemble_segments(spec(src, dst), clients)
    assert result.status == "archived" and result.objects == len(objects)
    expected = {k: v for k, v in objects.items() if k != removed}
    expected[added] = b"written during planning\n"
    assert read_archive(s3, dst, f"v/{src}/{PREFIX.rstrip('/')}.tar.gz") == expected
    assert open_uploads(s3, dst) == [] and [k for k in keys_in(s3, dst) if ".segments/" in k] == []


def test_an_object_rewritten_after_the_plan_fails_its_segment_once_and_the_next_prepare_archives_it(
        s3, buckets, minio, start_proxy):
    """The plan recorded an object's ETag; the object is then overwritten. Today's main sent the
    segment's GET pinned to the recorded ETag, got 412 on every retry of the segment (three per
    worker, then Airflow's), though only a new plan helps. Now the segment that holds it fails
    with PlanOutdated on its first attempt: permanent for the segment task (exit 2), the message
    says the source changed and a new plan is needed, the object was asked for once; the other
    segments are produced. The next prepare plans again and the archive holds the new content."""
    from faultproxy import Fault

    from helpers import engine_clients
    from s3arch.archive import archive_segment, assemble_segments, prepare_segments
    from s3arch.produce.segments import PlanOutdated

    src, dst = buckets
    objects = {f"{PREFIX}{h:02d}/event-{i:03d}.log": b"id=%d\n" % i * (i % 30 + 1) for h in range(3) for i in range(200)}
    seed(s3, src, objects)
    rewritten = f"{PREFIX}01/event-100.log"  # the middle of the prefix: segment 2 of 3
    proxy = start_proxy(minio.endpoint_url, seed=30)
    clients = engine_clients(minio, proxy.endpoint_url)
    planned = prepare_segments(spec(src, dst), 3, clients)
    assert planned.status == "planned" and planned.objects == len(objects)
    s3.put_object(Bucket=src, Key=rewritten, Body=b"rewritten after the plan\n")
    gets = proxy.add(Fault("status", rate=0.0, match=lambda r: r.method == "GET" and r.key == f"{src}/{rewritten}"))
    produced = [k for k in (0, 2) if archive_segment(spec(src, dst), k, clients)["status"] == "produced"]
    assert produced == [0, 2]
    with pytest.raises(PlanOutdated, match="the source changed since the plan.*a new plan is needed") as outdated:
        archive_segment(spec(src, dst), 1, clients)
    assert gets.seen == 1  # one GET, answered 412: not tried again within the segment
    print(f"\nsegment 2/3: exit {outdated.value.exit_code}, retryable {outdated.value.retryable}: {outdated.value}")
    assert not outdated.value.retryable and outdated.value.exit_code == 2
    assert "changed" in str(outdated.value) and "prepare task" in str(outdated.value)
    # The next prepare makes a new plan from the source as it is now, and the day archives.
    assert prepare_segments(spec(src, dst), 3, clients := engine_clients(minio)).objects == len(objects)
    for k in range(3):
        assert archive_segment(spec(src, dst), k, clients)["status"] == "produced"
    result = assemble_segments(spec(src, dst), clients)
    assert result.status == "archived" and result.objects == len(objects)
    assert read_archive(s3, dst, f"v/{src}/{PREFIX.rstrip('/')}.tar.gz") == {
        **objects, rewritten: b"rewritten after the plan\n"}
    assert open_uploads(s3, dst) == [] and [k for k in keys_in(s3, dst) if ".segments/" in k] == []


def test_a_cli_segmented_run_whose_object_is_rewritten_after_the_plan_exits_3_and_the_next_run_archives_it(
        s3, buckets, minio, cli_env, start_proxy):
    """As a user runs it: `s3arch archive --segments 3`, one object overwritten once the plan is
    made (when the run opens the archive's upload, which follows the plan). The segment holding
    it fails with PlanOutdated at its first attempt and the run ends (exit 3: the next run plans
    again) without retrying it in its workers; the next run archives the new content."""
    import time

    from faultproxy import Fault

    from helpers import run_cli

    src, dst = buckets
    objects = {f"{PREFIX}{h:02d}/event-{i:03d}.log": b"id=%d\n" % i * (i % 30 + 1) for h in range(3) for i in range(200)}
    seed(s3, src, objects)
    rewritten = f"{PREFIX}01/event-100.log"
    args = ["archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/v/", "--storage-class", "STANDARD", "--segments", "3",
            "--processes", "2", "--segment-min-objects", "1", "--quiet"]
    proxy = start_proxy(minio.endpoint_url, seed=30)
    planned = proxy.add(Fault(
        "header", count=1, on_inject=lambda r: s3.put_object(Bucket=src, Key=rewritten, Body=b"rewritten\n"),
        match=lambda r: r.method == "POST" and "uploads" in r.query and r.key.endswith(".tar.gz")))
    gets = proxy.add(Fault("status", rate=0.0, match=lambda r: r.method == "GET" and r.key == f"{src}/{rewritten}"))
    started = time.monotonic()
    proc = run_cli(cli_env, "--endpoint-url", proxy.endpoint_url, *args, check=False)
    took = time.monotonic() - started
    stderr = proc.stderr.decode(errors="replace")
    print(f"\nexit {proc.returncode} in {took:.1f} s: {stderr.strip().splitlines()[-1]}")
    assert planned.injected == 1
    assert "Traceback" not in stderr, stderr
    assert proc.returncode == 3, stderr
    assert "the source changed since the plan" in stderr and "a new plan is needed" in stderr, stderr
    assert gets.seen == 1  # the segment was not run again: its GET would be asked again
    assert open_uploads(s3, dst) == []
    run_cli(cli_env, *args)
    assert read_archive(s3, dst, f"v/{src}/{PREFIX.rstrip('/')}.tar.gz") == {**objects, rewritten: b"rewritten\n"}


def test_a_plan_outdated_segment_is_not_run_again_by_the_cli_workers(monkeypatch):
    """The CLI's workers run a failed segment again up to three times; a plan that no longer
    matches the source fails the same way each time, so PlanOutdated ends the run at once,
    retryable for the run (its next run plans again)."""
    from s3arch.produce.segments import PlanOutdated

    attempts = []

    def worker(spec, connection, layout, plan, k, send):
        attempts.append(k)
        send.send({"error": "PlanOutdated", "message": "the source changed since the plan; a new plan is needed"})
        send.close()

    with pytest.raises(PlanOutdated, match="segment 1/1: the source changed since the plan") as outdated:
        run_one_segment_inline(monkeypatch, worker)
    assert attempts == [0]
    assert outdated.value.retryable and outdated.value.exit_code == 3


def test_a_plan_outdated_segment_tells_the_cli_user_what_to_do_once(monkeypatch):
    """What the user reads after a worker's PlanOutdated: the cause and the hint, the hint once."""
    from s3arch.produce.segments import PlanOutdated

    hint = "run the prefix again: a new plan is made"

    def worker(spec, connection, layout, plan, k, send):
        error = PlanOutdated("segment 1/1 of s3://b/p/: the source changed since the plan; a new plan is needed")
        send.send(error.to_dict())  # as segment_worker sends it
        send.close()

    with pytest.raises(PlanOutdated) as outdated:
        run_one_segment_inline(monkeypatch, worker)
    assert str(outdated.value).count(hint) == 1, str(outdated.value)
    assert str(outdated.value).count("segment 1/1") == 1, str(outdated.value)


def test_a_cli_segmented_run_aborts_the_records_uploads_its_killed_workers_left(monkeypatch, s3, buckets, clients):
    """A worker killed mid-segment leaves its records upload open (a large segment's records
    are a multipart upload); the CLI path writes no plan.json, so no later cleanup could find
    it. The run aborts them itself once its workers are over."""
    import s3arch.produce.segments.workers as workers
    from s3arch.core.errors import TransientError
    from s3arch.format.manifest import MANIFEST_SUFFIX, layout_for

    src, dst = buckets
    seed(s3, src, {f"{PREFIX}{i:02d}.log": b"x" * i for i in range(30)})
    the_spec = spec(src, dst, segments=2, segment_min_objects=1)
    layout = layout_for(the_spec.source, the_spec.destination)

    def killed(spec, clients_, layout_, plan, processes, coordinator):
        for k in range(plan.count):  # each worker had opened its records upload, then was killed
            s3.create_multipart_upload(Bucket=dst, Key=plan.temp_key(layout_, k, MANIFEST_SUFFIX))
        raise TransientError("segment 2/2: its process ended with exit code -9 before it finished")

    monkeypatch.setattr(workers, "run_workers", killed)
    with pytest.raises(TransientError, match="exit code -9"):
        workers.stream_segmented(the_spec, clients, layout, layout.archive_key(the_spec.extension),
                                 StreamCoordinator("the segments"))
    assert open_uploads(s3, dst) == []


def test_a_cli_segmented_plan_stops_when_its_run_is_stopped(s3, buckets, clients):
    """The CLI's plan runs inside the archive run, under its lease: a lost lease or a cancel
    (the run's coordinator cancelled) stops the plan between pages, before the archive's
    upload is opened, and the run raises the cancel's reason."""
    import s3arch.produce.segments.workers as workers
    from s3arch.format.manifest import layout_for

    src, dst = buckets
    seed(s3, src, {f"{PREFIX}{i:02d}.log": b"x" * i for i in range(30)})
    the_spec = spec(src, dst, segments=2, segment_min_objects=1)
    layout = layout_for(the_spec.source, the_spec.destination)
    stopped = StreamCoordinator("the segments")
    stopped.cancel("cancelled while planning the segments")
    with pytest.raises(Cancelled, match="cancelled while planning"):
        workers.stream_segmented(the_spec, clients, layout, layout.archive_key(the_spec.extension), stopped)
    assert open_uploads(s3, dst) == []
