"""An extract's S3 target: each object under the target prefix, by its key relative to the
archived prefix's folder (or its full original key with ``original_keys``); small objects by one PUT,
many in flight while the archive is read on, large ones by multipart upload completed only
after the hash matched. Objects already there with the same content are skipped; different
ones are left alone unless ``overwrite``. A small object's PUT is conditional
(``If-None-Match: *``), so only a key that exists costs a HEAD to tell which; on a target that
ignores the condition (probed once per run, before the first write) every small object is
looked at with a HEAD before its PUT.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from s3arch.core import backoff
from s3arch.core.config import MiB, S3Url
from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import ArchiverError, Throttled, TransientError
from s3arch.io import attributes
from s3arch.io.flow import ByteBudget
from s3arch.io.store import Store
from s3arch.io.throttling import install
from s3arch.io.upload import PartSizer, PartUploader
from s3arch.restore.sinks import Discard, ExtractResult, relative_key

SMALL_OBJECT = 8 * MiB   # up to this size an object is PUT in one request
_EMPTY_SHA256 = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="  # base64 of SHA-256(b"")
_PUTS_IN_FLIGHT = 64
PUT_STALL_SECONDS = 120.0  # a PUT with no answer this long is cancelled and sent again (botocore's read timeout)
SHA256_METADATA = "s3arch-sha256"


class S3Writer:
    """Objects written back while the archive is read on. A small object's bytes are gathered
    as the archive is decoded, in order, then PUT on the plain connections (tasks/io/connections.py:
    awscrt's HTTP client and SigV4 signer; boto3's ``put_object`` cost about three times the
    client CPU per object, issue 33), up to ``inflight`` at once straight from the reading thread;
    the bodies waiting or in flight hold at most a quarter of the memory budget. The usual answer,
    written, is counted where it arrives; any other (a 412 for a key that exists, throttling, a
    cut body) is settled by one of a few threads, which may wait and look with a HEAD. Large
    objects stream through a multipart upload from the reading thread, as their parts already go
    in parallel. The first write that fails stops the run: nothing more is queued, the writes in
    flight are cancelled (each PUT is whole or absent), and the extract raises its error with what
    was written. A cancel from above (of ``stream``: tasks/core/stops.py) stops it the same way,
    and the multipart uploads this run started and did not complete are aborted at once; another
    writer's upload of the same key is not this run's, and stays."""

    def __init__(self, clients, target: S3Url, prefix: str, original_keys: bool, overwrite: bool,
                 memory_budget: int, result: ExtractResult):
        self.store: Store = clients.store
        self.bucket = target.bucket
        self.base = target.key if not target.key or target.key.endswith("/") else target.key + "/"
        self.prefix = prefix
        self.original_keys = original_keys
        self.overwrite = overwrite
        self.part_memory = max(5 * MiB, memory_budget // 4)
        self.conflicts: list[str] = []
        self.target = f"s3://{self.bucket}/{self.base}"
        self.result = result
        # Through 40 ms of latency the 32 of boto3's pool capped a restore at ~700 objects/s;
        # 64 reached ~840 and 128 no more, while costing the server more at no latency (issue
        # 33 item 8, bench/README). The bodies stay within their byte budget whatever the count.
        inflight = _PUTS_IN_FLIGHT
        self._plane = clients.writes_for(self.bucket, self.base, inflight)
        self._throttle_budget = install(self.store.client).budget  # the run's --throttle-budget
        self._settling = ThreadPoolExecutor(4, thread_name_prefix="s3arch-extract-put")
        # Queued beyond the connections: one more round, so a connection that finishes finds
        # its next body ready instead of waiting for the reader.
        self._slots = threading.Semaphore(2 * inflight)
        self._bodies = ByteBudget(max(SMALL_OBJECT, memory_budget // 4))
        # Its first exception stops the writes; its watchdog cancels a PUT with no answer.
        self.stream = StreamCoordinator(f"the extract to {self.target}", stall_timeout=PUT_STALL_SECONDS)
        self.stream.start_watchdog()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        self._pending = 0  # PUTs queued or in flight, until their outcome is counted
        self._conditional: bool | None = None  # does the target refuse a PUT If-None-Match: * over a key?
        self._uploading: set[_S3Object] = set()  # large objects whose upload is this run's, until it ends
        self._aborting = threading.Lock()  # held while those uploads are aborted, on whichever thread
        self.stream.add_failure_cleanup(self._abort_uploads)

    def key_of(self, record: dict) -> str:
        return self.base + relative_key(record["key"], self.prefix, self.original_keys)

    def begin(self, record: dict):
        key = self.key_of(record)
        if record["size"] <= SMALL_OBJECT:
            return _SmallObject(self, key, record)
        existing = self._existing(key)
        if existing is not None:
            if _same(existing, record):
                return None
            if not self.overwrite:
                self.conflicts.append(f"s3://{self.bucket}/{key}")
                return Discard()
        upload = _S3Object(self, key, record)  # its upload is created with its first part
        with self._lock:  # a cancel stops the stream before its cleanup takes this lock: none is missed
            self.stream.raise_if_stopped()
            self._uploading.add(upload)
        return upload

    def upload_ended(self, upload: "_S3Object") -> None:
        """``upload`` was completed or aborted: nothing of it is left to abort."""
        with self._lock:
            self._uploading.discard(upload)

    def _abort_uploads(self) -> ArchiverError | None:
        """Abort the multipart uploads this run started and did not complete, and only those;
        their parts stop. Run by a cancel (on the thread that cancels) and by a failing ``close``,
        under one lock, so that the extract does not return while the other still aborts. The error
        of an abort that failed is returned, so that it cannot hide why the extract stopped."""
        with self._aborting:
            with self._lock:
                uploading, self._uploading = self._uploading, set()
            problems = [problem for problem in (u.uploader.abort() for u in uploading) if problem is not None]
        return problems[0] if problems else None

    def _existing(self, key: str) -> dict | None:
        return self.store.head(self.bucket, key, f"check s3://{self.bucket}/{key}")

    def put_later(self, key: str, record: dict, body: bytes) -> None:
        """Write ``body`` (checked against the manifest) at ``key`` in the background; blocks
        while the queue or the byte budget is full."""
        if self._conditional is None:  # before the first write: none may replace what it must not
            self._conditional = _honours_if_none_match(self.store, self.bucket, self.base)
        self._slots.acquire()
        if self.stream.is_set() or not self._bodies.acquire(len(body), self.stream):
            self._slots.release()
            self.stream.raise_if_stopped()
        with self._lock:
            self._pending += 1
        try:
            if self._conditional:  # one conditional PUT settles the usual case, a fresh key
                self._put_once(key, record, body, True, lambda error: self._answered(key, record, body, error))
            else:
                self._settling.submit(self._settle, key, record, body, None)
        except BaseException as exc:  # not sent (a bug here): nothing will settle it, so it is settled now
            self._done(record, len(body), error=exc)
            raise

    def _answered(self, key: str, record: dict, body: bytes, error: ArchiverError | None) -> None:
        """The first PUT's answer, on the connections' thread: counted if written, else settled
        by a thread that may wait and look."""
        if error is None:
            self._done(record, len(body), "written")
        else:
            self._settling.submit(self._settle, key, record, body, error)

    def _settle(self, key: str, record: dict, body: bytes, first: ArchiverError | None) -> None:
        try:
            outcome = self._put(key, record, body, first)
        except BaseException as exc:  # noqa: BLE001 - recorded: the reading thread raises it
            self._done(record, len(body), error=exc)
        else:
            self._done(record, len(body), outcome)

    def _put(self, key: str, record: dict, body: bytes, first: ArchiverError | None) -> str:
        """Write ``body`` unless an object with this content is already there (``first``: the
        answer to a conditional PUT already sent); an object with other content is replaced only
        with ``overwrite``. A HEAD is made only when S3 says something is there, or on a target
        that ignores the condition."""
        conditional = bool(self._conditional)
        error = first
        for attempt in range(3):  # a key deleted between the 412 and the HEAD is tried again
            if attempt or conditional:
                error = self._send(key, record, body, conditional, error)
                if error is None:
                    return "written"
                if not conditional or error.status != 412:
                    raise error
                error = None
            existing = self._existing(key)
            if existing is None:
                continue
            if _same(existing, record):
                return "same"
            if not self.overwrite:
                return "conflict"
            conditional = False
        raise TransientError(f"write s3://{self.bucket}/{key}: the key was there at each conditional PUT and gone "
                             "at each HEAD after it", hint="another writer is creating and deleting it: run again later")

    def _send(self, key: str, record: dict, body: bytes, conditional: bool,
              first: ArchiverError | None = None) -> ArchiverError | None:
        """The PUT's final answer: None (written) or its typed error; ``first`` is the answer of
        one already sent. Sent again while S3 throttles, within the throttle budget
        (``backoff.THROTTLED``), and as ``backoff.EXTRACT_PUT`` says after a fault the
        connections do not resend themselves: a 400 saying the body did not arrive whole
        (IncompleteBody, RequestTimeout, BadDigest: a loaded MinIO answered IncompleteBody to a
        few of many PUTs in flight), and a PUT the watchdog cancelled. The body is in memory and
        a PUT replaces nothing it half wrote."""
        error = first if first is not None else self._wait(key, record, body, conditional)
        throttling, resends = backoff.Throttling(), 0
        while error is not None and not self.stream.is_set():
            pause: float | None = None
            if isinstance(error, Throttled):
                pause = throttling.next_pause(self._throttle_budget)
            elif (error.retryable and not error.retries_spent and error.status in (None, 400)
                  and backoff.EXTRACT_PUT.allows(resends + 1)):
                resends += 1
                pause = backoff.EXTRACT_PUT.pause(resends)
            if pause is None:
                break
            if self.stream.wait(pause):
                break
            error = self._wait(key, record, body, conditional)
        return error

    def _wait(self, key: str, record: dict, body: bytes, conditional: bool) -> ArchiverError | None:
        answered = threading.Event()
        answer: list[ArchiverError | None] = []

        def done(error: ArchiverError | None) -> None:
            answer.append(error)
            answered.set()

        self._put_once(key, record, body, conditional, done)
        answered.wait()
        return answer[0]

    def _put_once(self, key: str, record: dict, body: bytes, conditional: bool, on_done) -> None:
        """One PutObject with the object's attributes and checksum (its own full-object one,
        else our SHA-256, which S3 checks against the body), tracked for the watchdog."""
        args = object_args(record)
        name, value = attributes.put_checksum(record) or \
            ("ChecksumSHA256", attributes.sha256_checksum(record["sha256"]))
        args[name] = value
        if conditional:
            args["IfNoneMatch"] = "*"
        request = self.stream.track(f"write s3://{self.bucket}/{key}")

        def done(error: ArchiverError | None) -> None:
            self.stream.untrack(request)
            on_done(error)

        call = self._plane.put(key, body, attributes.put_headers(args), done)
        self.stream.cancellable(request, call.cancel)

    def _done(self, record: dict, size: int, outcome: str | None = None, error: BaseException | None = None) -> None:
        self._bodies.release(size)
        self._slots.release()
        if error is not None:
            if self.stream.set_exception(error):  # the first failure: the writes in flight are not waited out
                self.stream.cancel_requests()
        elif outcome is not None:
            self.count(outcome, record)
        with self._lock:
            self._pending -= 1
            if not self._pending:
                self._settled.notify_all()

    def count(self, outcome: str, record: dict) -> None:
        """An object's outcome in the result: written, the same already there, or a conflict."""
        with self._lock:  # the connections' thread and the settling ones count, and the reading thread (large objects)
            if outcome == "written":
                self.result.objects += 1
                self.result.bytes += record["size"]
            elif outcome == "same":
                self.result.skipped_same += 1
            else:
                self.conflicts.append(f"s3://{self.bucket}/{self.key_of(record)}")

    def close(self, failing: bool = False) -> None:
        """Wait for the writes in flight. ``failing`` (the extract stopped: a failure, Ctrl-C or a
        cancel; its cause is recorded): they are cancelled, each object is written whole or not at
        all, and this run's open uploads are aborted before the extract raises; a re-run writes
        what is missing."""
        if failing:
            self.stream.cancel("the extract stopped")  # a cause recorded before stays the cause
            self.stream.cancel_requests()  # also after a failure, which a cancel leaves alone
        with self._lock:
            while self._pending:
                self._settled.wait()
        self._settling.shutdown(wait=True)
        self.stream.stop_watchdog()
        if failing and (problem := self._abort_uploads()) is not None and self.stream.exception is not None:
            self.stream.exception.add_note(f"cleanup also failed: {problem}")


def _honours_if_none_match(store: Store, bucket: str, base: str) -> bool:
    """PUT a scratch object twice with ``If-None-Match: *``: a target that honours the condition
    refuses the second (412). One that ignores it (or refuses the header: 501) would let a
    conditional PUT replace an object with other content without --overwrite, so the writer
    then looks with a HEAD before each PUT instead. The probe's versions are deleted by id
    (under a default retention it was written with ``scratch_lock_args``' hour)."""
    import uuid

    from s3arch.io.retention import delete_scratch_version, scratch_lock_args

    key = f"{base}.s3arch-conditional-put-probe-{uuid.uuid4().hex}"
    what = f"probe conditional writes with s3://{bucket}/{key}"
    versions: list[str | None] = []
    try:
        for _ in range(2):
            try:
                # With its checksum given, as every object's PUT is: botocore would otherwise send
                # a trailing checksum in an aws-chunked body, which not every proxy forwards.
                versions.append(store.call("put_object", what, Bucket=bucket, Key=key, Body=b"", IfNoneMatch="*",
                                           ChecksumSHA256=_EMPTY_SHA256,
                                           **scratch_lock_args(store, bucket)).get("VersionId"))
            except ArchiverError as exc:
                if exc.status in (412, 501):
                    return exc.status == 412
                raise
        return False
    finally:
        try:
            for version in versions:
                if version in (None, "null"):
                    store.call("delete_object", f"delete the probe s3://{bucket}/{key}", Bucket=bucket, Key=key)
                else:
                    delete_scratch_version(store, bucket, key, version)
        except ArchiverError as exc:
            if exc.status != 403:  # without s3:DeleteObject(Version) the empty probe stays
                raise


def _same(head: dict, record: dict) -> bool:
    if head["ContentLength"] != record["size"]:
        return False
    return head.get("ETag") == record["etag"] or \
        head.get("Metadata", {}).get(SHA256_METADATA) == record["sha256"]


def object_args(record: dict) -> dict:
    """The object as it was (attributes.py): content headers, user metadata and tags; our own
    SHA-256 beside its metadata, so a re-run knows the content is there."""
    args = attributes.write_args(record)
    args["Metadata"] = {**args.get("Metadata", {}), SHA256_METADATA: record["sha256"]}
    return args


class _SmallObject:
    """An object PUT in one request: its bytes gathered, then queued for a writing thread,
    which counts it (``written`` is False here: nothing is written yet)."""

    written = False

    def __init__(self, writer: S3Writer, key: str, record: dict):
        self.w, self.key, self.record = writer, key, record
        self.pieces: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.pieces.append(data)

    def finish(self, ok: bool) -> None:
        if ok:
            self.w.put_later(self.key, self.record, b"".join(self.pieces))


class _S3Object:
    """A large object written back by a multipart upload that is completed only when the
    content matched the manifest; counted by its writer, as the small ones are, which aborts the
    upload if the extract stops before it ended."""

    written = False

    def __init__(self, writer: S3Writer, key: str, record: dict):
        self.w, self.record = writer, record
        self.uploader = PartUploader(writer.store, writer.bucket, key, storage_class="STANDARD",
                                     sizer=PartSizer(8 * MiB, lambda: record["size"] + MiB,
                                                     max_part=max(8 * MiB, writer.part_memory // 2)),
                                     memory=writer.part_memory // 2, extra_args=object_args(record))

    def write(self, data: bytes) -> None:
        self.uploader.write(data)

    def finish(self, ok: bool) -> None:
        if ok:
            self.uploader.complete()
            self.w.count("written", self.record)
        else:
            self.uploader.abort()
        self.w.upload_ended(self)
