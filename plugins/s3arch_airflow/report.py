"""The archive DAG's closing report: one row per planned prefix, whatever happened to it."""

from __future__ import annotations

from s3arch_airflow.task_rows import result_row
from s3arch.core.cost import CostEstimate, usd
from s3arch.core.progress import human_bytes

COLUMNS = ("prefix", "status", "objects", "bytes_in", "bytes_out", "ratio", "seconds", "requests", "CPU s",
           "$/month archive", "$/month separate", "archive")
# Shown when a prefix was archived as segments: how many, and where its time went.
SEGMENT_COLUMNS = ("segments", "plan s", "slowest segment s", "assembly s")
# The archive DAG's sizing task: its result is the prefixes that went to segment tasks
# (the archive tasks leave them alone).
SIZE_TASK_ID = "size"
# Shown when a prefix's archive is under Object Lock (docs/SECURITY.md).
LOCK_COLUMNS = ("locked",)
RESTORE_COLUMNS = ("prefix", "status", "objects", "bytes_in", "skipped", "seconds", "target")


def collect_rows(planned: list[list[str]], pushed: list[list[dict]], task: str = "archive") -> list[dict]:
    """One row per planned prefix, in plan order: what the mapped tasks pushed (a list of
    rows per task), or a failed row for a prefix whose task left no result (killed, timed
    out, upstream failed), so no prefix is forgotten."""
    reported = {row["prefix"]: row for rows in pushed if rows for row in rows}
    out = []
    for index, batch in enumerate(planned):
        for prefix in batch:
            out.append(reported.get(prefix) or result_row(
                prefix, "failed", retryable=True,
                error=f"no result from {task} task map index {index}: it was killed, timed out "
                      "or did not run; see its log"))
    return out


def format_table(rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> str:
    def cell(row, column):
        value = row.get(column)
        if column in ("bytes_in", "bytes_out"):
            return human_bytes(value or 0)
        if column == "objects":
            return f"{value or 0:,}"
        if column == "requests":  # the run's S3 requests, all operations
            return "" if value is None else f"{sum(value.values()):,}"
        if column == "CPU s":
            cpu = row.get("cpu_s")
            return "" if cpu is None else f"{cpu:.1f}"
        if column.startswith("$/month"):
            cost = row.get("cost")
            return usd(cost[column.split()[-1] + "_monthly"]) if cost else ""
        if column in ("archive", "target") and row.get("status") == "failed":
            return row.get("error") or ""
        if column == "locked":
            retention = row.get("retention") or {}
            held = "legal hold" if retention.get("legal_hold") == "ON" else ""
            until = f"{retention['mode']} until {retention['retain_until'][:10]}" if "mode" in retention else ""
            return ", ".join(filter(None, (until, held)))
        if column in SEGMENT_COLUMNS[1:]:
            timings = row.get("timings") or {}
            seconds = {"plan s": timings.get("plan_s"), "slowest segment s": timings.get("slowest_segment_s"),
                       "assembly s": (timings.get("assemble_archive_s") or 0) + (timings.get("assemble_manifest_s") or 0)
                       if timings else None}[column]
            return "" if seconds is None else f"{seconds:.1f}"
        return "" if value is None else str(value)

    table = [columns] + [tuple(cell(row, c) for c in columns) for row in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(columns))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(line, widths)).rstrip() for line in table]
    lines.insert(1, "  ".join("-" * w for w in widths))
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    lines.append(", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing planned")
    throttled = sum(row.get("throttled") or 0 for row in rows)
    if throttled:
        lines.append(f"throttled: S3 answered {throttled:,} request(s) 503 SlowDown; waited out with backoff")
    costs = [CostEstimate.from_dict(row["cost"]) for row in rows if row.get("cost")]
    if costs:
        lines.append(f"total of the {len(costs)} archived: {sum(costs[1:], costs[0]).line()}")
    return "\n".join(lines)


def print_report(rows: list[dict], columns: tuple[str, ...] = COLUMNS) -> None:
    """Log the rows' table, with the segment and lock columns when a row has them."""
    segmented = [row for row in rows if (row.get("segments") or 1) > 1]
    locked = [row for row in rows if row.get("retention")]
    print(format_table(rows, columns + (SEGMENT_COLUMNS if segmented else ()) + (LOCK_COLUMNS if locked else ())))


def report_run(ti, *, task_id: str, rows_key: str, columns: tuple[str, ...] = COLUMNS,
               segmented_task_id: str | None = None) -> list[dict]:
    """The report task of both DAGs: a table of every planned prefix, failing the run if any
    prefix failed. The plan task returned batches of prefixes (archive) or prefixes (restore);
    with ``segmented_task_id``, the size task's result says which prefixes went to segment
    tasks ending in ``segmented_task_id`` instead."""
    from s3arch_airflow.compat import AirflowFailException

    planned = ti.xcom_pull(task_ids="plan")
    if not planned:
        raise AirflowFailException("the plan task produced nothing (bad parameters?); see its log")
    batches = [p if isinstance(p, list) else [p] for p in planned]
    # A run of one day archived by its plan task (plan_task.py) has no other rows.
    pushed: list = [ti.xcom_pull(task_ids="plan", key=rows_key)]
    mapped = {"plan": 0} if pushed[0] else {task_id: len(batches)}
    if segmented_task_id and not pushed[0]:
        mapped[segmented_task_id] = len(ti.xcom_pull(task_ids=SIZE_TASK_ID) or [])
    for task, count in mapped.items():
        if count:
            pushed += ti.xcom_pull(task_ids=task, key=rows_key, map_indexes=list(range(count))) or []
    rows = collect_rows(batches, [p for p in pushed if p], task=" or ".join(mapped))
    print_report(rows, columns)
    failed = [row["prefix"] for row in rows if row["status"] == "failed"]
    if failed:
        raise AirflowFailException(f"{len(failed)} of {len(rows)} prefix(es) failed: {', '.join(failed)}")
    # The rows say what happened to each prefix; a run is green only if every task in it is
    # (a segment task that failed under an assembly that skipped must not hide in a green run).
    broken = failed_task_instances(ti)
    if broken:
        raise AirflowFailException(f"{len(broken)} task instance(s) of this run failed: {', '.join(broken)}; "
                                   "see their logs")
    return rows


def failed_task_instances(ti) -> list[str]:
    """The run's task instances, other than ``ti``, that ended failed or upstream_failed
    (mapped ones as ``task_id_mapindex``), asked of Airflow's execution API."""
    states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[ti.run_id]).get(ti.run_id, {})
    return sorted(name for name, state in states.items()
                  if state in ("failed", "upstream_failed") and name != ti.task_id)


def job_retry_args(job) -> dict:
    """A job's retry policy: exponential backoff, capped at an hour; permanent errors are never
    retried (s3arch_airflow/failures.py)."""
    from datetime import timedelta

    return {"retries": job.retries, "retry_delay": timedelta(seconds=job.retry_delay_seconds),
            "retry_exponential_backoff": True, "max_retry_delay": timedelta(hours=1)}


def job_task_args(job, duty: str = "archive") -> dict:
    """What every mapped task of a job's DAG for ``duty`` shares: the connection of that duty
    (``ArchiveJob.conn_id_for``), the pool and the retry policy."""
    return {"aws_conn_id": job.conn_id_for(duty), "pool": job.pool, **job_retry_args(job),
            "map_index_template": "{{ task.label }}"}
