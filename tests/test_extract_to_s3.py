"""Restoring to S3 (`extract --to s3://`) as a user sees it, on the embedded MinIO: odd keys
and attributes come back as they were, writes go out while the archive is read (many in
flight, not one round trip per object), a fault aimed at one object's PUT is retried or fails
naming it with the right exit code, and a re-run finishes the job."""

from __future__ import annotations

import os
import random
import time

import pytest

from faultproxy import Fault
from helpers import keys_in, run_cli, run_json, seed


pytestmark = pytest.mark.slow  # each test archives then extracts hundreds of objects through the CLI


PREFIX = "day/2026/11/21/"
ODD_KEYS = ["with space/and+plus.log", "percent%20stays.log", "ünïcødé/日本語.txt", "q?uery#frag&amp=.log",
            "tilde~and'quote\".log", "deep/" * 40 + "long.log", "folder/", "empty.log"]
VICTIM = "00/victim.log"


def _archive(env, src: str, dst: str) -> str:
    run_json(env, "archive", f"s3://{src}/{PREFIX}", f"s3://{dst}/vault/", "--storage-class", "STANDARD")
    return f"s3://{dst}/vault/{src}/{PREFIX.rstrip('/')}.tar.gz"


def _bodies(n: int) -> dict[str, bytes]:
    rng = random.Random(n)
    return {f"{PREFIX}{i % 7:02d}/app-{i:04d}.log": b"GET /item/%d 200\n" % rng.randrange(10**6) * rng.randrange(1, 400)
            for i in range(n)}


def _contents(s3, bucket: str, prefix: str) -> dict[str, bytes]:
    return {k[len(prefix):]: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys_in(s3, bucket, prefix)}


def test_every_object_comes_back_byte_for_byte_with_its_attributes_and_a_rerun_writes_nothing(s3, buckets, cli_env):
    src, dst = buckets
    objects = {PREFIX + k: (b"" if k.endswith("/") or k == "empty.log" else f"body of {k}\n".encode() * 50)
               for k in ODD_KEYS}
    objects[PREFIX + "big.bin"] = os.urandom(9 << 20)  # over one PUT's size: a multipart upload
    objects.update(_bodies(300))
    seed(s3, src, objects)
    attributed = PREFIX + ODD_KEYS[2]
    s3.put_object(Bucket=src, Key=attributed, Body=objects[attributed], ContentType="text/plain; charset=utf-8",
                  CacheControl="max-age=60", Metadata={"team": "ops"}, Tagging="keep=yes&owner=a%20b")
    archive = _archive(cli_env, src, dst)

    result = run_json(cli_env, "extract", archive, "--to", f"s3://{dst}/back/")

    assert result["objects"] == len(objects) and result["bytes"] == sum(map(len, objects.values()))
    assert _contents(s3, dst, "back/") == {k[len(PREFIX):]: v for k, v in objects.items()}
    head = s3.head_object(Bucket=dst, Key="back/" + ODD_KEYS[2])
    assert head["ContentType"] == "text/plain; charset=utf-8" and head["CacheControl"] == "max-age=60"
    assert head["Metadata"]["team"] == "ops"
    tags = s3.get_object_tagging(Bucket=dst, Key="back/" + ODD_KEYS[2])["TagSet"]
    assert {t["Key"]: t["Value"] for t in tags} == {"keep": "yes", "owner": "a b"}

    again = run_json(cli_env, "extract", archive, "--to", f"s3://{dst}/back/")
    assert again["objects"] == 0 and again["skipped_same"] == len(objects)


def test_writes_are_in_flight_together_not_one_round_trip_per_object(minio, s3, buckets, cli_env, proxy):
    """Each PUT held 0.25 s at the proxy: 200 objects one after another take 50 s."""
    src, dst = buckets
    objects = _bodies(200)
    seed(s3, src, objects)
    archive = _archive(cli_env, src, dst)
    held = proxy.add(Fault("stall", seconds=0.25, match=lambda r: r.method == "PUT" and r.key.startswith(f"{dst}/back/0")))
    started = time.monotonic()
    run_json(cli_env, "--endpoint-url", proxy.endpoint_url, "extract", archive, "--to", f"s3://{dst}/back/")
    took = time.monotonic() - started
    assert held.injected == len(objects)
    assert took < 15, f"{took:.1f} s for {len(objects)} PUTs held 0.25 s each"
    assert _contents(s3, dst, "back/") == {k[len(PREFIX):]: v for k, v in objects.items()}


def test_a_fault_on_one_put_is_retried_or_fails_naming_the_key_and_a_rerun_completes(minio, s3, buckets, cli_env,
                                                                                     proxy):
    src, dst = buckets
    objects = _bodies(400)
    objects[PREFIX + VICTIM] = b"the object every fault is aimed at\n" * 100
    seed(s3, src, objects)
    archive = _archive(cli_env, src, dst)
    expected = {k[len(PREFIX):]: v for k, v in objects.items()}

    def victim_put(r):
        return r.method == "PUT" and r.key.endswith(VICTIM)

    via = ("--endpoint-url", proxy.endpoint_url, "extract", archive)
    # A 503 twice, a reset instead of any answer twice, and twice the 400 IncompleteBody a
    # loaded MinIO gives: retried, the run completes.
    busy = proxy.add(Fault("status", status=503, count=2, match=victim_put))
    dropped = proxy.add(Fault("drop", count=2, match=victim_put))
    cut = proxy.add(Fault("status", status=400, code="IncompleteBody", count=2, match=victim_put))
    result = run_json(cli_env, *via, "--to", f"s3://{dst}/retried/")
    assert busy.injected == 2 and dropped.injected == 2 and cut.injected == 2
    assert result["objects"] == len(objects) and _contents(s3, dst, "retried/") == expected

    # A 403 is final: exit 2 naming the key; what is there is whole.
    proxy.clear()
    proxy.add(Fault("status", status=403, code="AccessDenied", match=victim_put))
    proc = run_cli(cli_env, *via, "--to", f"s3://{dst}/denied/", check=False)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2 and f"s3://{dst}/denied/{VICTIM}" in stderr and "Traceback" not in stderr, stderr
    assert "objects were written before it" in stderr
    partial = _contents(s3, dst, "denied/")
    assert VICTIM not in partial and all(expected[k] == v for k, v in partial.items())
    rerun = run_json(cli_env, "extract", archive, "--to", f"s3://{dst}/denied/")
    assert _contents(s3, dst, "denied/") == expected
    assert rerun["objects"] == len(objects) - len(partial) and rerun["skipped_same"] == len(partial)


def test_a_target_that_ignores_if_none_match_gets_a_head_before_each_put(minio, s3, buckets, cli_env, proxy):
    """The proxy answers the run's probe (its second conditional PUT of a scratch key) 200, as a
    store that ignores If-None-Match does: an object already at the target with other content
    is left alone without --overwrite (exit 2, its bytes unchanged), every key was looked at
    with a HEAD before its PUT, the rest are extracted and no probe object is left behind."""
    src, dst = buckets
    objects = _bodies(40)
    seed(s3, src, objects)
    archive = _archive(cli_env, src, dst)
    taken = sorted(objects)[0][len(PREFIX):]
    s3.put_object(Bucket=dst, Key="back/" + taken, Body=b"someone else's bytes")
    accepted = proxy.add(Fault("status", status=200, count=1, after=1,
                               match=lambda r: r.method == "PUT" and "s3arch-conditional-put-probe" in r.path))
    heads: list[str] = []
    proxy.add(Fault("status", match=lambda r: r.method == "HEAD" and heads.append(r.path) is None and False))
    proc = run_cli(cli_env, "--endpoint-url", proxy.endpoint_url, "extract", archive, "--to",
                   f"s3://{dst}/back/", check=False)
    stderr = proc.stderr.decode(errors="replace")
    assert accepted.injected == 1
    assert proc.returncode == 2 and "already exist" in stderr and "--overwrite" in stderr, stderr
    assert s3.get_object(Bucket=dst, Key="back/" + taken)["Body"].read() == b"someone else's bytes"
    contents = _contents(s3, dst, "back/")
    assert contents == {k[len(PREFIX):]: v for k, v in objects.items()} | {taken: b"someone else's bytes"}
    missing = [k for k in objects if not any(h.endswith("/back/" + k[len(PREFIX):]) for h in heads)]
    assert missing == [], (len(heads), heads[:3], missing[:3])


def test_a_stalled_put_is_cancelled_and_sent_again_and_slowdown_is_waited_out(minio, s3, buckets, cli_env, monkeypatch,
                                                                              proxy):
    """The PUTs go on plain connections (no botocore timeouts or retries around them): a PUT
    with no answer is cancelled by the writer's watchdog and sent again, and SlowDown, which
    the connections leave to the writer, is waited out within the throttle budget. Everything comes back byte for byte, and the stalled PUT did not hold the run."""
    import s3arch.restore.extract as extract
    import s3arch.restore.to_s3 as to_s3
    from helpers import engine_clients
    from s3arch.core.config import S3Url
    from s3arch.format.manifest import layout_for

    src, dst = buckets
    objects = _bodies(120)
    objects[PREFIX + VICTIM] = b"the object every fault is aimed at\n" * 100
    seed(s3, src, objects)
    _archive(cli_env, src, dst)
    monkeypatch.setattr(to_s3, "PUT_STALL_SECONDS", 2.0)
    def victim_put(r):
        return r.method == "PUT" and r.key.endswith(VICTIM)

    stalled = proxy.add(Fault("stall", seconds=30, count=1, match=victim_put))
    slowed = proxy.add(Fault("status", status=503, code="SlowDown", count=3, match=victim_put))
    clients = engine_clients(minio, proxy.endpoint_url)
    layout = layout_for(S3Url(src, PREFIX), S3Url(dst, "vault/"))
    started = time.monotonic()
    result = extract.extract_to_s3(clients, layout, S3Url(dst, "stalled/"))
    took = time.monotonic() - started
    assert stalled.injected == 1 and slowed.injected == 3
    assert result.objects == len(objects) and took < 25, (result, took)
    assert _contents(s3, dst, "stalled/") == {k[len(PREFIX):]: v for k, v in objects.items()}


def test_a_bug_while_sending_a_put_surfaces_as_itself_and_nothing_waits_for_it(minio, s3, buckets, cli_env, monkeypatch):
    """An exception from our own code on the way to a PUT is a bug: it is raised as itself
    (the CLI's exit 1, with its traceback), not turned into "try again", and the writer does
    not wait for a PUT that was never sent."""
    import threading

    import pytest

    import s3arch.restore.extract as extract
    import s3arch.restore.to_s3 as to_s3
    from helpers import engine_clients
    from s3arch.core.config import S3Url
    from s3arch.format.manifest import layout_for

    src, dst = buckets
    seed(s3, src, _bodies(40))
    _archive(cli_env, src, dst)

    def broken(args):
        raise KeyError("a header this code cannot map")

    monkeypatch.setattr(to_s3.attributes, "put_headers", broken)
    outcome: list = []

    def run():
        try:
            extract.extract_to_s3(engine_clients(minio), layout_for(S3Url(src, PREFIX), S3Url(dst, "vault/")),
                                  S3Url(dst, "bug/"))
        except BaseException as exc:  # noqa: BLE001 - what the run raised is the assertion
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "the extract hung after a bug in its writer"
    assert len(outcome) == 1 and type(outcome[0]) is KeyError, outcome
    assert keys_in(s3, dst, "bug/") == []
