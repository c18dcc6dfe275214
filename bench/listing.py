"""Client CPU per listed key: the listing's page parser (tasks/listed.parse_listing_page)
against botocore's own XML parser of the same ListObjectsV2 pages, alternating, in one process;
and with ``--dry-run-keys N``, ``s3arch archive --dry-run`` of a prefix of N keys against
``s5cmd ls`` of it (bench/run's s5cmd, ``make s5cmd``), alternating, on a throwaway MinIO.

Two pages of 1,000 keys: one as the pinned MinIO writes it (ETags quoted with ``&#34;``),
captured from a throwaway MinIO, and the same entries as S3 writes them (``&quot;``, and the
checksum algorithm and type S3 lists since 2025). Prints us of CPU per key, median [min-max]
over the alternating rounds, and ours as a ratio to botocore's per round.

    .venv/bin/python -m bench.listing [--rounds 9] [--dry-run-keys 60000]

With ``--synthetic-keys N`` (issue 46, Deliver 4), also ``s3arch archive --dry-run`` of a
virtual day of N keys on the synthetic source (bench/synthetic_source.py, nothing seeded)
against ``s5cmd ls`` of it, alternating; ``--out FILE`` writes every figure with the load
average and the git commit.

    .venv/bin/python -m bench.listing --rounds 3 --dry-run-keys 60000 --synthetic-keys 1000000 \
        --out bench/results/listing-s5cmd.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

PAGE_KEYS = 1000


def minio_page(server) -> bytes:
    """One ListObjectsV2 page of 1,000 keys named as in the ``small`` set, as ``server`` (the
    pinned MinIO) answers it; the keys are written once."""
    from concurrent.futures import ThreadPoolExecutor

    from bench.bench import ensure_buckets

    s3 = server.client(max_pool_connections=32)
    ensure_buckets(s3, "listing-page")
    keys = [f"small/2026/11/21/{h:02d}/app-{i:05d}.log" for h in range(4) for i in range(PAGE_KEYS // 4)]
    if s3.list_objects_v2(Bucket="listing-page", Prefix="small/").get("KeyCount", 0) < PAGE_KEYS:
        with ThreadPoolExecutor(32) as pool:
            list(pool.map(lambda k: s3.put_object(Bucket="listing-page", Key=k, Body=k.encode() * 20), keys))
    bodies: list[bytes] = []
    s3.meta.events.register("before-parse.s3.ListObjectsV2",
                            lambda response_dict, **_: bodies.append(response_dict["body"]))
    s3.list_objects_v2(Bucket="listing-page", Prefix="small/", MaxKeys=PAGE_KEYS)
    return bodies[0]


def s3_page(minio: bytes) -> bytes:
    return (minio.replace(b"&#34;", b"&quot;")
            .replace(b"</ETag><Size>", b"</ETag><ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm>"
                                       b"<ChecksumType>FULL_OBJECT</ChecksumType><Size>"))


def botocore_parse():
    """botocore's parse of a page, as a boto3 client without the engine's parser makes it."""
    import botocore.parsers
    import botocore.session

    model = botocore.session.get_session().get_service_model("s3").operation_model("ListObjectsV2")
    parser = botocore.parsers.create_parser("rest-xml")

    def parse(body: bytes):
        return parser.parse({"body": body, "headers": {}, "status_code": 200}, model.output_shape)
    return parse


def cpu_us_per_key(parse, body: bytes, repeat: int = 20) -> float:
    started = time.process_time()
    for _ in range(repeat):
        parse(body)
    return 1e6 * (time.process_time() - started) / repeat / PAGE_KEYS


def parser_runs(server, rounds: int) -> dict:
    """Our page parser against botocore's on a MinIO page and an S3 page, alternating: us of
    CPU per key of each, and ours over botocore's per round."""
    from bench.bench import spread
    from s3arch.io.listed import parse_listing_page

    minio = minio_page(server)
    pages = {"MinIO page": minio, "S3 page": s3_page(minio)}
    for name, body in pages.items():
        listed, _ = parse_listing_page(body)
        assert len(listed) == PAGE_KEYS and listed[0].etag.startswith('"'), f"{name}: not parsed by the fast path"
    paths = {"ours": parse_listing_page, "botocore": botocore_parse()}
    runs: dict[tuple[str, str], list[float]] = {(p, n): [] for p in pages for n in paths}
    for _ in range(rounds):  # alternate, so that drift on a shared machine hits both
        for page, body in pages.items():
            for name, parse in paths.items():
                runs[(page, name)].append(cpu_us_per_key(parse, body))
    out = {}
    for page in pages:
        ours, theirs = runs[(page, "ours")], runs[(page, "botocore")]
        out[page] = {"ours_us_per_key": spread([{"v": v} for v in ours], "v"),
                     "botocore_us_per_key": spread([{"v": v} for v in theirs], "v"),
                     "ours_vs_botocore": spread([{"v": o / t} for o, t in zip(ours, theirs)], "v")}
        print(f"  {page}: ours {_spread(ours)} us/key, botocore {_spread(theirs)} us/key, "
              f"ours/botocore {_spread([o / t for o, t in zip(ours, theirs)])}", flush=True)
    return out


def dry_run_against_s5cmd(server, keys: int, rounds: int) -> dict:
    """Wall time and client CPU of our dry run of a prefix of ``keys`` keys and of ``s5cmd ls``
    of it, alternating, on ``server`` (the keys written once); ours over s5cmd's per round."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from bench.bench import S5CMD, ensure_buckets, measure, spread

    s3 = server.client()
    src, dst, prefix = "listing-src", "listing-dst", f"keys-{keys}/"
    ensure_buckets(s3, src, dst)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | server.env()
    s5 = [str(S5CMD), "--endpoint-url", server.endpoint_url]
    marker = f"seeded-{prefix}"
    if not s3.list_objects_v2(Bucket=dst, Prefix=marker).get("KeyCount"):
        staging = tempfile.mkdtemp(prefix="s3arch-listing-", dir="/dev/shm")
        try:
            for h in range(24):
                os.mkdir(f"{staging}/{h:02d}")
                for i in range(keys // 24 + (h < keys % 24)):
                    with open(f"{staging}/{h:02d}/app-{i:06d}.log", "wb") as f:
                        f.write(b"x")
            subprocess.run([*s5, "cp", f"{staging}/", f"s3://{src}/{prefix}"], env=env, check=True,
                           stdout=subprocess.DEVNULL)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        s3.put_object(Bucket=dst, Key=marker, Body=b"")
    ours_argv = [sys.executable, "-m", "s3arch", "archive", f"s3://{src}/{prefix}", f"s3://{dst}/out/", "--dry-run",
                 "--json", "--quiet"]
    runs: dict[str, list[dict]] = {"ours --dry-run": [], "s5cmd ls": []}
    for _ in range(rounds):
        ours = measure(ours_argv, env, server.pid)
        summary = json.loads(ours.pop("stdout").strip().splitlines()[-1])
        assert summary["objects"] == keys, f"the dry run counted {summary['objects']} of {keys} keys"
        runs["ours --dry-run"].append(ours)
        theirs = measure([*s5, "ls", f"s3://{src}/{prefix}*"], env, server.pid)
        assert theirs.pop("stdout").count("\n") == keys, "s5cmd ls did not list every key"
        runs["s5cmd ls"].append(theirs)
    for name, rs in runs.items():
        print(f"  {name} of {keys:,} keys: wall {_spread([r['wall_s'] for r in rs])} s, "
              f"client CPU {_spread([1e6 * r['cpu_s'] / keys for r in rs])} us/key", flush=True)
    return {"keys": keys, "runs": runs,
            "cpu_us_per_key": {name: spread([{"v": 1e6 * r["cpu_s"] / keys} for r in rs], "v")
                               for name, rs in runs.items()},
            "ours_vs_s5cmd_wall": spread([{"v": o["wall_s"] / t["wall_s"]}
                                          for o, t in zip(*runs.values())], "v")}


def listing_line(server, repeat: int, keys: int = 60_000) -> dict:
    """Issue 33 item 5 on the bench's server: the parser's CPU per key (reported) and the
    dry run of ``keys`` keys against ``s5cmd ls`` (target: no slower)."""
    from bench.bench import fmt, verdict

    line = {"parser": parser_runs(server, 3 * repeat), "dry_run": dry_run_against_s5cmd(server, keys, repeat)}
    dry = line["dry_run"]
    minio = line["parser"]["MinIO page"]
    line["verdicts"] = [
        f"{verdict(dry['ours_vs_s5cmd_wall']['median'] <= 1.0)}  listing `archive --dry-run` / `s5cmd ls` wall time "
        f"of {keys:,} keys {fmt(dry['ours_vs_s5cmd_wall'])} (target <= 1.0; client CPU "
        f"{dry['cpu_us_per_key']['ours --dry-run']['median']:.1f} vs {dry['cpu_us_per_key']['s5cmd ls']['median']:.1f} "
        "us/key, ours with the interpreter's start and the bounded GET sample)",
        f"info  listing page parser {fmt(minio['ours_us_per_key'])} us/key on a MinIO page, "
        f"{fmt(minio['ours_vs_botocore'])} of botocore's parse"]
    return line


def synthetic_against_s5cmd(server, keys: int, rounds: int) -> dict:
    """Our dry run of a synthetic day of ``keys`` keys against ``s5cmd ls`` of it, alternating
    (the archive's destination is ``server``, MinIO, behind the synthetic endpoint); wall time,
    client CPU, and ours over s5cmd's per round. The endpoint's own CPU is recorded too."""
    import os
    import sys

    from bench.bench import S5CMD, ensure_buckets, measure, spread
    from bench.synthetic_source import SyntheticSource

    ensure_buckets(server.client(), "listing-dst")
    runs: dict[str, list[dict]] = {"ours --dry-run": [], "s5cmd ls": []}
    with SyntheticSource(objects=keys, upstream=server) as source:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | source.env()
        ours_argv = [sys.executable, "-m", "s3arch", "archive", f"s3://{source.bucket}/{source.prefix}",
                     "s3://listing-dst/out/", "--dry-run", "--json", "--quiet"]
        theirs_argv = [str(S5CMD), "--endpoint-url", source.endpoint_url, "ls", f"s3://{source.bucket}/{source.prefix}*"]
        for _ in range(rounds):
            ours = measure(ours_argv, env, source.pid)
            summary = json.loads(ours.pop("stdout").strip().splitlines()[-1])
            assert summary["objects"] == keys, f"the dry run counted {summary['objects']} of {keys} keys"
            ours["load"] = os.getloadavg()[0]
            runs["ours --dry-run"].append(ours)
            theirs = measure(theirs_argv, env, source.pid)
            assert theirs.pop("stdout").count("\n") == keys, "s5cmd ls did not list every key"
            theirs["load"] = os.getloadavg()[0]
            runs["s5cmd ls"].append(theirs)
    for rs in runs.values():
        for r in rs:
            r["server_cpu_s"] = r.pop("minio_cpu_s")  # the synthetic endpoint's, not MinIO's
    for name, rs in runs.items():
        print(f"  {name} of {keys:,} synthetic keys: wall {_spread([r['wall_s'] for r in rs])} s, "
              f"client CPU {_spread([1e6 * r['cpu_s'] / keys for r in rs])} us/key", flush=True)
    return {"keys": keys, "runs": runs,
            "cpu_us_per_key": {name: spread([{"v": 1e6 * r["cpu_s"] / keys} for r in rs], "v")
                               for name, rs in runs.items()},
            "ours_vs_s5cmd_wall": spread([{"v": o["wall_s"] / t["wall_s"]} for o, t in zip(*runs.values())], "v")}


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main(argv=None) -> int:
    from devtools.servers import start_minio

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--dry-run-keys", type=int, default=0, help="also a dry run of this many keys against s5cmd ls")
    parser.add_argument("--synthetic-keys", type=int, default=0,
                        help="also a dry run of a synthetic day of this many keys against s5cmd ls")
    parser.add_argument("--out", help="write the figures, the load average and the git commit to this JSON file")
    args = parser.parse_args(argv)
    import os
    import subprocess

    from bench.bench import fmt, verdict

    started_load = os.getloadavg()
    out: dict = {"commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
                 "dirty": bool(subprocess.run(["git", "status", "--porcelain", "--", "tasks/io", "tasks/archive.py"],
                                              capture_output=True, text=True).stdout.strip()),
                 "load_before": started_load}
    server = start_minio()
    try:
        out["parser"] = parser_runs(server, args.rounds)
        rounds = max(3, args.rounds // 3)
        if args.dry_run_keys:
            line = listing_line(server, rounds, args.dry_run_keys)
            out["dry_run"], out["verdicts"] = line["dry_run"], line["verdicts"]
            print("\n".join(line["verdicts"]))
        if args.synthetic_keys:
            synthetic = out["synthetic"] = synthetic_against_s5cmd(server, args.synthetic_keys, rounds)
            out.setdefault("verdicts", []).append(
                f"{verdict(synthetic['ours_vs_s5cmd_wall']['median'] <= 1.0)}  `archive --dry-run` / `s5cmd ls` wall "
                f"time of {args.synthetic_keys:,} synthetic keys {fmt(synthetic['ours_vs_s5cmd_wall'])} (target <= 1.0)")
            print(out["verdicts"][-1])
    finally:
        server.stop()
    out["load_after"] = os.getloadavg()
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
