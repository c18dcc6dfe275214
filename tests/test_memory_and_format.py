"""Peak memory against the budget, and the tar format's edge cases."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
import tarfile

from helpers import ROOT, seed
from s3arch.tarwriter import member_header, member_name
from s3arch.upload import MAX_PARTS, PartSizer

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

    from s3arch.s3 import quote_key

    def full(key):
        return "/".join(urllib.parse.quote(s, safe="~").replace(".", "%2E") if s in (".", "..")
                        else urllib.parse.quote(s, safe="~") for s in key.split("/"))

    for key in ["logs/2026/11/21/13/app-0007.log", "a/./b", "a/../b", "../x", "./x", "x/.", "a//b",
                "a/.hidden", "dir/", "ключ/файл.txt", "sp ace+plus", "a..b", "/lead", "~tilde_-.x"]:
        assert quote_key(key) == full(key), key
