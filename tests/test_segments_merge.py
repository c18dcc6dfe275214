"""The assembler passes a segment's records on as written, only their ``range`` shifted
(tasks/produce/segments/assemble.py, ``shifted_line``): the manifest it writes must say what
parsing and encoding every record again would have said, whatever fields a record holds."""

from __future__ import annotations

import json

import pytest

from s3arch.format.manifest import dump_record
from s3arch.produce.segments.assemble import shifted_line

BASE, FIRST_BLOCK, FIRST_START = 1_000_000, 7, 999_000


def _record(**extra) -> dict:
    record = {"type": "object", "key": "logs/2026/11/21/00/app-0001.log", "size": 6849, "etag": '"9b2c"',
              "last_modified": "2026-11-22T21:55:04+00:00", "sha256": "5f1d" * 16, "header_offset": 7_340_544,
              "data_offset": 7_341_056, **extra}
    return record


def _by_parsing(record: dict, first_block: int) -> dict:
    start = FIRST_START if record["block"] == first_block else BASE + record["range"][0]
    return {**record, "range": [start, BASE + record["range"][1]]}


@pytest.mark.parametrize("record", [
    # As the pipeline writes it: block and range last, after any attributes.
    {**_record(content_type="text/plain", metadata={"range": "[1,2]", "block": "3"}, tags={"t": '"block":1'}),
     "block": 8, "range": [10, 15342]},
    {**_record(), "block": FIRST_BLOCK, "range": [0, 512]},  # in the block shared with the segment before
    # Written some other way (fields after the range): shifted all the same.
    {"block": 9, "range": [20, 30], **_record(checksum={"algorithm": "CRC32C", "value": "4cu3Xg=="})},
    {**_record(key="logs/\udcff-not-utf-8 \"quoted\" ,\"block\":1,\"range\":[1,2]}"), "block": 8, "range": [1, 2]},
], ids=["pipeline", "first-block", "fields-after-range", "hostile-key"])
def test_a_shifted_line_says_what_the_parsed_record_shifted_says(record):
    line = shifted_line(dump_record(record)[:-1], FIRST_BLOCK, FIRST_START, BASE)
    assert line.endswith(b"}\n") and line.count(b"\n") == 1
    assert json.loads(line.decode("utf-8", "surrogateescape")) == _by_parsing(record, FIRST_BLOCK)


def test_a_record_as_the_pipeline_writes_it_keeps_its_bytes_but_for_the_range():
    record = {**_record(content_type="text/plain"), "block": 8, "range": [10, 15342]}
    assert shifted_line(dump_record(record)[:-1], FIRST_BLOCK, FIRST_START, BASE) == \
        dump_record({**record, "range": [BASE + 10, BASE + 15342]})
