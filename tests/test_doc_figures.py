"""Every measured figure the docs quote is in the committed result file the doc names.

Each row: the doc, the sentence fragment that quotes the figure, the result file, where the
value is in it, and how the doc rounds it. The doc must hold the fragment and name the file,
and the file's value, rounded so, must be the figure the fragment shows. A re-run of a bench
that changes a figure fails here until the doc says the new one.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LATEST = "bench/results/latest.json"
SPLIT = "bench/results/20261126T050805Z.json"
SCALE = "bench/results/scale-1000000.json"
SEGMENTS = "bench/results/segments-cost-200000.json"
SEGMENTS_20K = "bench/results/segments-cost-20000.json"
SEGMENTS_1M = "bench/results/segments-cost-1000000.json"
SCALE_CELERY = "bench/results/scale-celery-synthetic-1000000.json"
SCALE_CELERY_10M = "bench/results/scale-celery-synthetic-10000000.json"
SCALE_10M = "bench/results/scale-synthetic-10000000.json"
RATIO = "bench/results/ratio.json"
INVENTORY = "bench/results/inventory-10000000.json"
BACKFILL = "bench/results/backfill-365.json"
BACKFILL_60 = "bench/results/backfill-60.json"

FIGURES = [
    # (doc, fragment quoting the figure, result file, path in it, decimals)
    ("docs/DEPLOY.md", "0.245 ms of client CPU per small object", LATEST, "results.small.ours.cpu_ms_per_object", 3),
    ("docs/DEPLOY.md", "it used\n4.9 s of CPU", LATEST, "results.small.ours.cpu_s", 1),
    ("bench/README.md", "| defaults | 753.0 s | 0.332 ms | 100 MiB", "bench/results/scale-200000.json", "archive_defaults.peak_rss_mib", 0),
    ("bench/README.md", "7.45 s, 0.403 ms | 0.75 [0.73-0.84]", LATEST, "results.small.ratio.median", 2),
    ("bench/README.md", "1.01x (target 1.1: PASS)", SEGMENTS, "summary.after.cpu_ratio", 2),
    ("bench/README.md", "before the line merge: 1.11x", SEGMENTS, "summary.before.cpu_ratio", 2),
    ("bench/README.md", "1.26x at 20,000", SEGMENTS_20K, "summary.after.cpu_ratio", 2),
    ("bench/README.md", "0.97x at 1,000,000 in 4 segments", SEGMENTS_1M, "summary.after.cpu_ratio", 2),
    ("bench/README.md", "0.74x the wall", SEGMENTS_1M, "summary.after.wall_ratio", 2),
    ("docs/DEPLOY.md", "objects took 341 s in one process", SCALE, "archive_processes_1.wall_s", 0),
    ("docs/DEPLOY.md", "in one process, in 102 MiB", SCALE, "archive_processes_1.peak_rss_mib", 0),
    ("docs/DEPLOY.md", "peaked at 195 MiB (`plan`;", SCALE_CELERY, "dag.tasks.0.peak_rss_mib", 0),
    ("docs/DEPLOY.md", "to 276 MiB (a segment", SCALE_CELERY_10M, "dag.tasks.6.peak_rss_mib", 0),
    ("bench/README.md", "**0.245 ms CPU/object**", LATEST, "results.small.ours.cpu_ms_per_object", 3),
    ("bench/README.md", "peak RSS 328 MiB at 256 MiB, worst of 3", LATEST, "results.many.ours.peak_rss.max", 0),
    ("bench/README.md", "peak RSS 101 / 196 / 184 MiB", LATEST, "results.small.ours.peak_rss.max", 0),
    ("bench/README.md", "peak RSS 101 / 196 / 184 MiB", LATEST, "results.medium.ours.peak_rss.max", 0),
    ("bench/README.md", "peak RSS 101 / 196 / 184 MiB", LATEST, "results.large.ours.peak_rss.max", 0),
    ("bench/README.md", "88 / 122 / 100 MiB", LATEST, "results.small.ours_64mib.peak_rss.max", 0),
    ("bench/README.md", "88 / 122 / 100 MiB", LATEST, "results.medium.ours_64mib.peak_rss.max", 0),
    ("bench/README.md", "88 / 122 / 100 MiB", LATEST, "results.large.ours_64mib.peak_rss.max", 0),
    ("bench/README.md", "CPU 0.262 -> 0.265 ms/object", SEGMENTS, "summary.after.cpu_ms_per_object.one", 3),
    ("bench/README.md", "CPU 0.262 -> 0.265 ms/object", SEGMENTS, "summary.after.cpu_ms_per_object.segments", 3),
    ("bench/README.md", "segments 46.8 s", SEGMENTS, "summary.after.segments_cpu_split_s.workers_segment_cpu_s", 1),
    ("bench/README.md", "(plan, assembly) 5.2 s", SEGMENTS, "summary.after.segments_cpu_split_s.parent", 1),
    ("bench/README.md", "6.3 s before the assembler", SEGMENTS, "summary.before.segments_cpu_split_s.parent", 1),
    ("bench/README.md", "8.13 [8.09-8.17] round trips", SPLIT, "lines.fixed.round_trips.median", 2),
    ("bench/README.md", "0.95 [0.94-0.96] (target 1.0", SPLIT, "lines.startup.vs_s5cmd.warm.median", 2),
    ("bench/README.md", "1.08 [1.07-1.12] and 1.01", LATEST, "lines.restore.0ms.ours_vs_s5cmd.median", 2),
    ("bench/README.md", "| 360.2 s | 2,776 |", SCALE, "archive_defaults.wall_s", 1),
    ("bench/README.md", "green in 210 s against", SCALE_CELERY, "dag.wall_s", 0),
    ("bench/README.md", "against 276 s, **0.76x**", SCALE_CELERY, "cli_processes_1.wall_s", 0),
    ("bench/README.md", "against 276 s, **0.76x**", SCALE_CELERY, "dag_vs_cli_processes_1_wall", 2),
    ("bench/README.md", "the tasks' CPU 0.92x the CLI's", SCALE_CELERY, "dag_vs_cli_processes_1_cpu", 2),
    ("bench/README.md", "prepare 10.2 s", SCALE_CELERY, "dag.tasks.3.seconds", 1),
    ("bench/README.md", "1,009 LISTs in", SCALE_CELERY, "dag.report.0.requests.list_objects_v2", 0),
    ("bench/README.md", "each task within 268 MiB", SCALE_CELERY, "dag.tasks.4.peak_rss_mib", 0),
    ("bench/README.md", "| 3,124 s | 3,201 | 0.261 ms | 125 MiB", SCALE_10M, "runs.processes-1.wall_s", 0),
    ("bench/README.md", "| 3,124 s | 3,201 | 0.261 ms | 125 MiB", SCALE_10M, "runs.processes-1.peak_rss_mib", 0),
    ("bench/README.md", "| 1,929 s (0.62x) | 5,183 | 0.254 ms (0.97x) | 276 MiB", SCALE_CELERY_10M, "dag.wall_s", 0),
    ("bench/README.md", "| 1,929 s (0.62x) | 5,183 | 0.254 ms (0.97x) | 276 MiB", SCALE_CELERY_10M,
     "dag_vs_cli_processes_1_wall", 2),
    ("bench/README.md", "| 1,929 s (0.62x) | 5,183 | 0.254 ms (0.97x) | 276 MiB", SCALE_CELERY_10M,
     "dag_vs_cli_processes_1_cpu", 2),
    ("bench/README.md", "| 1,929 s (0.62x) | 5,183 | 0.254 ms (0.97x) | 276 MiB", SCALE_CELERY_10M,
     "dag.tasks_cpu_ms_per_object", 3),
    ("bench/README.md", "| 1,929 s (0.62x) | 5,183 | 0.254 ms (0.97x) | 276 MiB", SCALE_CELERY_10M,
     "dag.tasks.6.peak_rss_mib", 0),
    ("bench/README.md", "| 340.7 s | 2,935 |", SCALE, "archive_processes_1.wall_s", 1),
    ("bench/README.md", "4.74:1 with `gzip -6`", RATIO, "reference.ratio", 2),
    ("README.md", "the 4.24:1 the default codec reaches on plain-text sample logs", RATIO, "default.ratio", 2),
    ("README.md", "took 85.5 s as one range run", BACKFILL, "range_run.wall_s", 1),
    ("README.md", "0.54x the time of `s3arch archive` day by day", BACKFILL, "range_run.vs_cli", 2),
    ("README.md", "60 of them 32.4 s, 1.29x", BACKFILL, "backfill.wall_s", 1),
    ("README.md", "60 of them 32.4 s, 1.29x", BACKFILL, "backfill.vs_cli", 2),
    ("README.md", "again on 60 days: 0.93x and 1.19x", BACKFILL_60, "range_run.vs_cli", 2),
    ("README.md", "again on 60 days: 0.93x and 1.19x", BACKFILL_60, "backfill.vs_cli", 2),
    ("bench/README.md", "| defaults | 37.2 s | 0.328 ms | 98 MiB", "bench/results/scale-20000.json", "archive_defaults.wall_s", 1),
    ("bench/README.md", "load 21.8 on 2 CPUs): CSV.gz in 122.1 s", INVENTORY, "CSV.planner.wall_s", 1),
    ("bench/README.md", "load 21.8 on 2 CPUs", INVENTORY, "CSV.planner.load_at_start.0", 1),
    ("bench/README.md", "20.4 s on a CPU", INVENTORY, "CSV.planner.main_thread.on_cpu_s", 1),
    ("bench/README.md", "101.7 s waiting for one", INVENTORY, "CSV.planner.main_thread.waiting_for_cpu_s", 1),
    ("bench/README.md", "0.05 s blocked on GETs", INVENTORY, "CSV.planner.main_thread.blocked_s", 2),
    ("bench/README.md", "blocked on GETs, 63 MiB; Parquet", INVENTORY, "CSV.planner.peak_rss_mib", 0),
    ("bench/README.md", "20.0 s (4.6 s CPU), 215 MiB", INVENTORY, "Parquet.planner.wall_s", 1),
    ("bench/README.md", "20.0 s (4.6 s CPU), 215 MiB", INVENTORY, "Parquet.planner.cpu_s", 1),
    ("bench/README.md", "20.0 s (4.6 s CPU), 215 MiB", INVENTORY, "Parquet.planner.peak_rss_mib", 0),
    ("bench/README.md", "1.77x the CPU", INVENTORY, "CSV.planner_over_reference.cpu", 2),
    ("bench/README.md", "and 1.43x (Parquet)", INVENTORY, "Parquet.planner_over_reference.cpu", 2),
    ("bench/README.md", "index](../docs/FORMAT.md#parts-objects-that-arrive-after-their-day)) in 1.265 s",
     "bench/results/late-recheck.json", "late_recheck.seconds_median", 3),
    ("bench/README.md", "re-check 16 (no lease) in 1.190 s", "bench/results/late-recheck.json",
     "late_window_recheck.seconds_median", 3),
    ("bench/README.md", "| 32.4 s | 25.1 s | **1.29x**", "bench/results/backfill-365.json", "backfill.vs_cli", 2),
    ("bench/README.md", "| 85.5 s | 159.6 s | **0.54x**", "bench/results/backfill-365.json", "range_run.vs_cli", 2),
    ("bench/README.md", "again on 60 days: 0.93x and", "bench/results/backfill-60.json", "range_run.vs_cli", 2),
    ("bench/README.md", "0.93x and 1.19x", "bench/results/backfill-60.json", "backfill.vs_cli", 2),
    ("bench/README.md", "The Backfill was 2.47x on 16 dates", "bench/results/backfill-40-plan-reports.json",
     "backfill.vs_cli", 2),
    ("bench/README.md", "no HEAD) in 2.55 s", "bench/results/catalog.json", "first_read.seconds", 2),
    ("bench/README.md", "from the cache, with its 499 KiB of JSON, 59 ms", "bench/results/catalog.json", "cached_json_ms", 0),
    ("docs/JOBS.md", "took 51 LISTs (0.9 s)", "bench/results/expand-org-trail.json", "expand_seconds.median", 1),
    ("bench/README.md", "17.4 us/key | 0.98 [0.95-1.06]", "bench/results/listing-s5cmd.json",
     "dry_run.ours_vs_s5cmd_wall.median", 2),
    ("bench/README.md", "| 13.3 us CPU/key | `s5cmd ls`", "bench/results/listing-s5cmd.json",
     "dry_run.cpu_us_per_key.ours --dry-run.median", 1),
    ("bench/README.md", "17.14 us/key | 0.47 [0.33-0.68]", "bench/results/listing-s5cmd.json",
     "synthetic.ours_vs_s5cmd_wall.median", 2),
    ("docs/JOBS.md", "850 prefixes 8.5 s", "bench/results/expand-org-trail.json", "listing_seconds.median", 1),
]


@cache
def result(name: str) -> dict:
    return json.loads((ROOT / name).read_text())


def value_at(data, path: str):
    for part in path.split("."):
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def test_the_paths_into_the_result_files_exist():
    for _, _, name, path, _ in FIGURES:
        assert isinstance(value_at(result(name), path), (int, float)), (name, path)


@pytest.mark.parametrize("doc, fragment, name, path, decimals", FIGURES,
                         ids=[f"{row[0]}:{row[3]}" for row in FIGURES])
def test_a_quoted_figure_is_the_committed_results(doc, fragment, name, path, decimals):
    text = (ROOT / doc).read_text()
    flat = re.sub(r"\s+", " ", text)
    assert re.sub(r"\s+", " ", fragment) in flat, f"{doc} no longer says {fragment!r}: update this table"
    assert name in text, f"{doc} quotes {fragment!r} without naming {name}"
    value = value_at(result(name), path)
    shown = f"{value:,.{decimals}f}"
    assert re.search(rf"(?<![\d.]){re.escape(shown)}(?![\d])", fragment), \
        f"{name} {path} is {value}, which {doc} would show as {shown}, not as in {fragment!r}"
