"""Peak memory against the budget, and the tar format's edge cases."""

from __future__ import annotations

import io
import json
import os
import random
import struct
import subprocess
import sys
import tarfile

import pytest

from helpers import ROOT, seed
from s3arch.format.tarwriter import member_header, member_name
from s3arch.io.upload import MAX_PARTS, PartSizer

# VmHWM belongs to the address space, so unlike ru_maxrss it does not carry over the peak of
# the (large) pytest process this child was forked from.
_PEAK_RSS = """
import json, re, sys
from s3arch.cli import main
code = main(sys.argv[1:])
hwm = int(re.search(r"VmHWM:\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) * 1024
print(json.dumps({"code": code, "peak_rss": hwm}))
"""


def _peak_rss(env, *args) -> int:
    proc = subprocess.run([sys.executable, "-c", _PEAK_RSS, *args], env=env, cwd=ROOT,
                          capture_output=True, check=True, timeout=600)
    out = json.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert out["code"] == 0, proc.stderr.decode()
    return out["peak_rss"]


@pytest.mark.slow
def test_peak_memory_stays_under_budget_on_a_prefix_many_times_larger(s3, buckets, cli_env):
    src, dst = buckets
    rng = random.Random(3)
    seed(s3, src, {"tiny/a.log": b"a"})
    # 320 MiB of incompressible data, five times the 64 MiB budget, in big and small objects.
    big = {f"big/{i:03d}.bin": rng.randbytes(16 << 20) for i in range(16)}
    big.update({f"big/small/{i:05d}.bin": rng.randbytes(16 << 10) for i in range(4096)})
    seed(s3, src, big)
    common = ("archive", "--storage-class", "STANDARD", "--memory-budget", "64MiB", "--quiet")
    baseline = _peak_rss(cli_env, *common[:1], f"s3://{src}/tiny/", f"s3://{dst}/", *common[1:])
    loaded = _peak_rss(cli_env, *common[:1], f"s3://{src}/big/", f"s3://{dst}/", *common[1:])
    growth = loaded - baseline
    print(f"peak RSS: baseline {baseline >> 20} MiB, 320 MiB prefix {loaded >> 20} MiB, "
          f"growth {growth >> 20} MiB for a 64 MiB budget")
    assert growth <= 64 << 20, f"memory grew by {growth >> 20} MiB, budget is 64 MiB"


@pytest.mark.slow  # scale: 400 objects of 4 MiB (1.6 GB) seeded, then archived on three processes
def test_process_tree_of_a_run_on_three_processes_stays_within_the_budget_plus_64_mib(s3, buckets, cli_env):
    """--memory-budget is what the run's processes hold together, the segment workers'
    interpreters included: the summed RSS of the tree, sampled from /proc as `top` would add it
    up, peaks within the budget plus 64 MiB (the parent's own interpreter) on a prefix of 4x
    the budget in objects that fill every worker's GETs."""
    from bench.bench import RssSampler

    src, dst = buckets
    rng = random.Random(39)
    lines = [f"2026-11-21T{h:02d}:00:00Z GET /api/v1/items/{rng.randrange(10**6)} 200\n".encode() for h in range(24)]
    seed(s3, src, {f"day/{i:03d}.log": b"".join(rng.choices(lines, k=(4 << 20) // len(lines[0]))) for i in range(400)})
    budget = 400
    process = subprocess.Popen([sys.executable, "-m", "s3arch", "archive", f"s3://{src}/day/", f"s3://{dst}/",
                                "--storage-class", "STANDARD", "--memory-budget", f"{budget}MiB", "--processes", "3",
                                "--segments", "3", "--segment-min-objects", "1", "--json"],
                               env=cli_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    sampler = RssSampler(process.pid)
    sampler.start()
    stdout, stderr = process.communicate(timeout=600)
    sampler.done.set()
    sampler.join()
    assert process.returncode == 0, stderr.decode()
    result = json.loads(stdout.decode().strip().splitlines()[-1])
    assert result["segments"] == 3 and result["objects"] == 400 and not result["notes"]
    peak = sampler.peak_tree >> 20
    print(f"peak RSS of the process tree: {peak} MiB at a {budget} MiB budget, 3 worker processes")
    assert peak <= budget + 64, f"the process tree peaked at {peak} MiB, over the {budget} MiB budget + 64 MiB"


def test_unsafe_keys_cannot_escape_the_extraction_directory():
    assert member_name("/etc/passwd", 5) == ("%2F/etc/passwd", False)
    assert member_name("a/../../b", 5) == ("a/%2E%2E/%2E%2E/b", False)
    assert member_name("./x", 1) == ("%2E/x", False)
    assert member_name("a//b", 1) == ("a/%2F/b", False)
    assert member_name("dir/", 0) == ("dir/", True)
    assert member_name("dir/", 7) == ("dir/%2F", False)


def test_long_non_ascii_and_huge_sizes_use_pax_headers_tarfile_understands():
    name = "ключ/" + "é" * 300 + "\n" + "/control\x01.log"
    header = member_header(name, 9 << 30, 1_700_000_000, False)
    data = header + bytes(1024)  # header only: tarfile reads it without the 9 GiB body
    info = tarfile.TarInfo.frombuf(data[:512], "utf-8", "surrogateescape")
    assert info.type == tarfile.XHDTYPE
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tar:
        member = tar.next()
    assert member.name == name and member.size == 9 << 30 and member.mtime == 1_700_000_000


def test_ten_thousand_parts_always_cover_five_tib():
    sizer = PartSizer(8 << 20)
    total = parts = 0
    while parts < MAX_PARTS:
        total += sizer.next_size(parts, total)
        parts += 1
    assert total >= 5 << 40
    known = PartSizer(8 << 20, lambda: 3 << 40)
    assert known.next_size(0, 0) * (MAX_PARTS - 100) >= 3 << 40


def test_quote_key_fast_path_agrees_with_full_percent_encoding():
    import urllib.parse

    from s3arch.io.dataplane import quote_key

    def full(key):
        return "/".join(urllib.parse.quote(s, safe="~").replace(".", "%2E") if s in (".", "..")
                        else urllib.parse.quote(s, safe="~") for s in key.split("/"))

    for key in ["logs/2026/11/21/13/app-0007.log", "a/./b", "a/../b", "../x", "./x", "x/.", "a//b",
                "a/.hidden", "dir/", "ключ/файл.txt", "sp ace+plus", "a..b", "/lead", "~tilde_-.x"]:
        assert quote_key(key) == full(key), key


def _build_archive(s3, bucket: str, source: tuple[str, str], members: int, block_size: int = 1 << 20) -> str:
    """An archive of ``members`` tiny objects and its manifest, made in-process as the engine
    makes them (pax tar, one gzip member with a full flush every ``block_size`` tar bytes,
    records with offsets and ranges) and uploaded whole: seconds, where archiving as many
    objects from MinIO would take many minutes. Returns the archive's URL."""
    import gzip
    import hashlib
    import zlib

    from s3arch.format.manifest import FORMAT_NAME, FORMAT_VERSION, ArchiveLayout
    from s3arch.format.tarwriter import BLOCK

    src_bucket, prefix = source
    stem = f"a/{src_bucket}/{prefix.rstrip('/')}"
    layout = ArchiveLayout(bucket, stem)
    archive_key = layout.archive_key(".tar.gz")
    deflate = zlib.compressobj(1, zlib.DEFLATED, -15)
    out = bytearray(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff")
    block_starts: list[int] = []
    tar = bytearray()
    tar_done = crc = 0
    records = []

    def flush_blocks(final: bool) -> None:
        nonlocal tar, tar_done, crc
        while len(tar) >= block_size or (final and tar):
            block = bytes(tar[:block_size])
            del tar[:block_size]
            block_starts.append(len(out))
            out.extend(deflate.compress(block) + deflate.flush(zlib.Z_FULL_FLUSH))
            crc = zlib.crc32(block, crc)
            tar_done += len(block)

    for i in range(members):
        key = f"{prefix}{i // 10000:02d}/{i:07d}.log"
        data = b"log line %d\n" % i
        header_offset = tar_done + len(tar)
        tar += member_header(member_name(key, len(data))[0], len(data), 1_700_000_000, False)
        data_offset = tar_done + len(tar)
        tar += data + bytes(-len(data) % BLOCK)
        records.append({"type": "object", "key": key, "size": len(data),
                        "etag": '"%s"' % hashlib.md5(data).hexdigest(),
                        "last_modified": "2023-11-14T22:13:20+00:00", "sha256": hashlib.sha256(data).hexdigest(),
                        "header_offset": header_offset, "data_offset": data_offset,
                        "block": header_offset // block_size, "last": (data_offset + len(data) - 1) // block_size})
        flush_blocks(False)
    tar += bytes(2 * BLOCK)
    total = tar_done + len(tar)
    flush_blocks(True)
    out.extend(deflate.flush())
    out.extend(struct.pack("<II", crc & 0xFFFFFFFF, total & 0xFFFFFFFF))
    ends = block_starts[1:] + [len(out) - 8]
    lines = [{"type": "header", "format": FORMAT_NAME, "version": FORMAT_VERSION, "tool": "test",
              "source": {"bucket": src_bucket, "prefix": prefix}, "archive": {"bucket": bucket, "key": archive_key},
              "codec": "gzip", "level": 1, "block_size": block_size, "started": "2026-11-25T00:00:00+00:00"}]
    for r in records:
        last = r.pop("last")
        r["range"] = [block_starts[r["block"]], ends[last]]
        lines.append(r)
    lines.append({"type": "summary", "objects": members, "bytes": sum(r["size"] for r in records),
                  "tar_size": total, "blocks": len(block_starts), "archive_size": len(out),
                  "archive_crc32": f"{zlib.crc32(out):08x}", "storage_class": "STANDARD"})
    s3.put_object(Bucket=bucket, Key=archive_key, Body=bytes(out))
    s3.put_object(Bucket=bucket, Key=layout.manifest_key, Body=gzip.compress(
        b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines), 1))
    return f"s3://{bucket}/{archive_key}"


@pytest.mark.timeout(1500)
@pytest.mark.slow
def test_full_reads_keep_memory_flat_in_the_member_count(s3, buckets, cli_env):
    """`verify` read the archive with tarfile in stream mode, which keeps every member it read
    (667 MiB RSS at a million members); `extract` held a run's records for 64 MiB of compressed
    archive, which tiny objects fill with every record there is. Both read 200,000 tiny members
    here within a bound the whole member lists exceed (measured: 61 MiB at 2,000 members; at
    120,000 before the fix verify 226 MiB, extract 283 MiB; after, 74 and 79 MiB).

    The 120,000 files go to a directory removed at the end (on tmpfs where there is room): in
    tmp_path pytest would keep them for three more runs, then delete them at the exit of a
    later one (86 s on this machine's ext4). A file costs the same RSS anywhere."""
    import tempfile

    from devtools.servers import scratch_root

    src, dst = buckets
    small = _build_archive(s3, dst, (src, "small/"), 2_000)
    large = _build_archive(s3, dst, (src, "large/"), 120_000)
    base = _peak_rss(cli_env, "verify", small)
    verify = _peak_rss(cli_env, "verify", large)
    with tempfile.TemporaryDirectory(prefix="s3arch-extract-", dir=scratch_root()) as out:
        extract = _peak_rss(cli_env, "extract", large, "--to-dir", out)
        files = sum(len(names) for _, _, names in os.walk(out))
    print(f"peak RSS at 2,000 members {base >> 20} MiB; at 120,000: verify {verify >> 20} MiB, "
          f"extract --to-dir {extract >> 20} MiB")
    assert files == 120_000
    assert verify - base < 40 << 20, f"verify grew by {(verify - base) >> 20} MiB for 118,000 more members"
    assert extract - base < 40 << 20, f"extract grew by {(extract - base) >> 20} MiB for 118,000 more members"
