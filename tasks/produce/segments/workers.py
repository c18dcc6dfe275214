"""A segmented run on one machine (``s3arch archive --processes N``): every segment produced
in a fresh worker process, at most N at once, then assembled by the parent."""

from __future__ import annotations

import multiprocessing
import time
from collections import Counter
from dataclasses import replace

from s3arch.core import backoff, errors
from s3arch.core.config import ArchiveSpec
from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import ArchiverError, BadArgument, CredentialsExpired
from s3arch.format.manifest import ArchiveLayout
from s3arch.core.progress import Progress
from s3arch.io.s3 import S3Clients
from s3arch.produce.streamed import StreamedArchive
from s3arch.io.upload import PartUploader, SharedUpload
from s3arch.produce.segments.assemble import assemble
from s3arch.produce.segments.cleanup import abort_records_uploads
from s3arch.io.credentials import CredentialServer, worker_session
from s3arch.produce.segments.plan import (LEAST_SEGMENTED_BUDGET, MIN_SHARE, WORKER_INTERPRETER, PlanOutdated, SegmentPlan,
                                           open_upload, plan_segments, processes_within, worker_share)
from s3arch.produce.segments.produce import produce_segment


def stream_segmented(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, archive_key: str,
                     coordinator: StreamCoordinator, progress: Progress | None = None,
                     listed: list[list] | None = None) -> StreamedArchive:
    """The commit protocol's step 5 on worker processes: plan ``spec.segments`` segments (one
    per process by default), produce each in its own process, at most ``spec.processes`` at
    once (a segment whose process fails or dies is run again, alone), assemble. A cancel of
    ``coordinator`` (a lost lease, a cancel from above) stops it with its reason. ``listed``:
    the prefix's first pages, as its sizing listed them (``plan_segments`` goes on after them)."""
    store = clients.store
    if spec.memory_budget < LEAST_SEGMENTED_BUDGET:
        raise BadArgument(f"--memory-budget {spec.memory_budget >> 20}MiB cannot hold a segment's worker process "
                          f"and the assembler ({MIN_SHARE >> 20} MiB each, and {WORKER_INTERPRETER >> 20} MiB for "
                          f"the worker's interpreter)",
                          hint=f"raise --memory-budget to at least {LEAST_SEGMENTED_BUDGET >> 20}MiB, "
                               f"or archive the prefix as one pipeline (--segments 1)")
    processes = min(spec.processes, processes_within(spec.memory_budget))
    plan = plan_segments(spec, store, archive_key, spec.segments or processes, listed=listed,
                         stop=coordinator.raise_cause_if_stopped)
    notes = []
    if processes < min(spec.processes, plan.count):
        notes.append(f"{plan.count} segments ran on {processes} process(es), not {min(spec.processes, plan.count)}: "
                     f"--memory-budget {spec.memory_budget >> 20}MiB holds {processes} worker(s) of "
                     f"{(MIN_SHARE + WORKER_INTERPRETER) >> 20} MiB (a {MIN_SHARE >> 20} MiB pipeline and "
                     f"its interpreter) besides the assembler's {MIN_SHARE >> 20} MiB")
    processes = min(processes, plan.count)
    worker_spec = _worker_spec(spec, processes)
    plan = open_upload(spec.write_options, store, layout, plan)
    try:
        try:
            durations = run_workers(worker_spec, clients, layout, plan, processes, coordinator)
        finally:
            # A worker killed (or stopped) mid-segment leaves its records upload open, and no
            # plan.json names it for the next run's cleanup: abort what is left, now.
            abort_records_uploads(store, layout, plan)
        streamed = assemble(spec, clients, layout, plan, coordinator)
        streamed.timings["segments_s"] = sum(d["seconds"] for d in durations.values())  # with process start-up
        # What the worker processes cost in CPU, by phase (issue 33 item 4): the interpreter and
        # imports before the segment's code runs, its clients and bucket check, the segment.
        for phase in ("startup", "clients", "segment"):
            streamed.timings[f"workers_{phase}_cpu_s"] = round(sum(d["cpu"].get(phase, 0.0)
                                                                   for d in durations.values()), 3)
        streamed.notes = notes
        # The bill: what the workers sent (every attempt that said so). Not the segments' records'
        # (``assemble``'s, the same requests once more), and no CPU: the workers are joined, so
        # their CPU is this process's children's, which the run's bill reads.
        workers_sent: Counter = Counter()
        for d in durations.values():
            workers_sent.update(d.get("requests", {}))
        streamed.elsewhere = {"requests": dict(sorted(workers_sent.items()))}
    except BaseException as exc:
        problem = PartUploader(store, layout.bucket, archive_key, shared=SharedUpload(plan.upload_id)).abort()
        if problem is not None:
            exc.add_note(f"cleanup also failed: {problem}")
        raise
    if progress is not None:
        progress.objects_done, progress.bytes_done = streamed.objects, streamed.bytes_in
    return streamed


def _worker_spec(spec: ArchiveSpec, processes: int) -> ArchiveSpec:
    """Each worker's share of ``--memory-budget`` (the parent keeps one share to assemble,
    each worker's interpreter is counted first)."""
    return replace(spec, memory_budget=worker_share(spec.memory_budget, processes),
                   compress_threads=max(1, spec.compress_threads // processes))


_EXPIRED_RESTARTS = 5  # of a segment whose credentials S3 called expired: not counted in its restarts


def run_workers(spec: ArchiveSpec, clients: S3Clients, layout: ArchiveLayout, plan: SegmentPlan,
                 processes: int, coordinator: StreamCoordinator) -> dict[int, dict]:
    """Run every segment in a fresh interpreter (spawn: the CRT client and threads do not
    survive fork), at most ``processes`` at once. A segment that fails retryably or whose
    process dies is run again, alone, up to three times; the others are not repeated. Workers
    sign with the parent's credentials as they refresh (``credentials.CredentialServer``); a
    segment that still ends in ExpiredToken is run again without counting as a failure.
    Returns each segment's seconds and its process's CPU by phase (its successful attempt), and
    the requests its attempts sent (each attempt's process counts its own: those of a process
    that died without an answer are not known)."""
    context = multiprocessing.get_context("spawn")
    todo = list(range(plan.count))
    attempts = dict.fromkeys(todo, 0)
    expired = dict.fromkeys(todo, 0)
    server = CredentialServer(clients.session, context) if clients is not None else None
    running: dict[int, tuple] = {}
    durations: dict[int, dict] = {}
    sent: dict[int, Counter] = {k: Counter() for k in todo}  # by every attempt of each segment
    try:
        while todo or running:
            while todo and len(running) < processes:
                k = todo.pop(0)
                attempts[k] += 1
                receive, send = context.Pipe(duplex=False)
                connection = worker_connection(clients, server)
                proc = context.Process(target=segment_worker, name=f"s3arch-segment-{k + 1}",
                                       args=(spec, connection, layout, plan.to_dict(), k, send), daemon=True)
                proc.start()
                send.close()
                if connection.get("credentials_pipe") is not None:
                    connection["credentials_pipe"].close()  # the worker's end, now in the worker
                running[k] = (proc, receive, time.monotonic())
            coordinator.raise_cause_if_stopped()
            for k, (proc, receive, began) in list(running.items()):
                if not receive.poll(0.05) and proc.is_alive():
                    continue
                outcome = _outcome(receive)
                proc.join()  # reaped: its CPU is this process's children's from now on
                del running[k]
                if outcome is not None:
                    sent[k].update(outcome.pop("requests", None) or {})
                if outcome is not None and "bug" in outcome:
                    raise RuntimeError(f"segment {k + 1}/{plan.count} failed with a bug in its worker process "
                                       f"(not retried):\n{outcome['bug']}")
                if outcome is not None and "error" not in outcome:
                    durations[k] = {"seconds": time.monotonic() - began, "cpu": outcome.get("cpu", {}),
                                    "requests": dict(sent[k])}
                    continue
                error = _error_of(outcome, k, plan, proc.exitcode)
                if isinstance(error, CredentialsExpired) and expired[k] < _EXPIRED_RESTARTS:
                    expired[k] += 1  # refreshed by the next start: not one of its attempts
                    attempts[k] -= 1
                # The source changed since the plan: this plan's segments would fail again. A
                # segment throttled past the budget has spent it: a restart would wait it out again.
                if not error.retryable or isinstance(error, (PlanOutdated, errors.Throttled)) \
                        or not backoff.SEGMENT_RESTART.allows(attempts[k]):
                    raise error
                todo.insert(0, k)  # this segment alone, again
    finally:
        for proc, receive, _ in running.values():
            proc.kill()
            proc.join()
            receive.close()
        if server is not None:
            server.close()
    return durations


def _outcome(receive) -> dict | None:
    try:
        return receive.recv() if receive.poll() else None
    except (EOFError, OSError):
        return None
    finally:
        receive.close()


def _error_of(outcome: dict | None, k: int, plan: SegmentPlan, exitcode: int | None) -> ArchiverError:
    where = f"segment {k + 1}/{plan.count}"
    error: ArchiverError
    if outcome is None:
        error = errors.TransientError(f"{where}: its process ended with exit code {exitcode} before it finished")
    else:
        # The worker's error as itself (``ArchiverError.to_dict``: the message and its hint
        # apart, so the copy carries the hint once). A segment's own errors say which it is.
        message = outcome["message"]
        error = ArchiverError.from_dict({**outcome, "message": message if message.startswith(f"{where} ")
                                         else f"{where}: {message}"})
    return error


def worker_connection(clients: S3Clients, server: CredentialServer | None) -> dict:
    """What a worker process needs to reach S3 as the parent does: the credentials as they are
    now and a pipe to ask for them again when they refresh (a segment may outlive a session
    token: never a frozen copy), region, endpoint, TLS, and the caller's botocore Config
    (proxies, FIPS or dual-stack endpoints, S3 addressing, user agent: a Config pickles)."""
    return {"credentials": server.first() if server else None,
            "credentials_pipe": server.connect() if server else None, "region": clients.region,
            "endpoint_url": clients.endpoint_url, "verify": clients.verify,
            "botocore_config": clients.botocore_config, "expected_owner": clients.expected_owner}


def segment_worker(spec: ArchiveSpec, connection: dict, layout: ArchiveLayout, plan: dict, k: int, send) -> None:
    """The entry point of segment ``k``'s worker process (``run_workers`` starts it): its clients from
    ``connection`` (``worker_connection``), the segment produced, and its outcome sent to the parent
    through ``send``: the result and CPU by phase, the error as ``ArchiverError.to_dict``, or a bug's
    traceback; with the result or the error, the requests the process sent (``Sent.counts``)."""
    started = time.process_time()  # the interpreter and the imports its arguments needed
    clients: S3Clients | None = None
    try:
        session = worker_session(connection["credentials"], connection["credentials_pipe"], connection["region"])
        clients = S3Clients.from_session(session, endpoint_url=connection["endpoint_url"],
                                         verify=connection["verify"], botocore_config=connection["botocore_config"],
                                         throttle_budget=spec.throttle_budget,
                                         expected_owner=connection["expected_owner"])
        clients.check_bucket(spec.source.bucket, "source", spec.source.key)
        ready = time.process_time()
        result = produce_segment(spec, clients, layout, SegmentPlan.from_dict(plan), k)
        send.send({**result, "requests": clients.store.sent.counts(),
                   "cpu": {"startup": round(started, 3), "clients": round(ready - started, 3),
                           "segment": round(time.process_time() - ready, 3)}})
    except ArchiverError as exc:
        send.send({**exc.to_dict(), "requests": clients.store.sent.counts() if clients is not None else {}})
    except Exception:  # noqa: BLE001 - a bug: its traceback goes to the parent, which stops
        import traceback

        send.send({"bug": traceback.format_exc()})
    finally:
        send.close()
