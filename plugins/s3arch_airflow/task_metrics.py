"""What an archive step tells Airflow besides its result: per prefix, the counters and timer of
its metrics, and an asset event for each archive it made."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from airflow.sdk import Context


def emit_metrics(row: dict, storage_class: str, dag_id: str) -> None:
    """One prefix's row as counters and a timer in Airflow's metrics (StatsD or OpenTelemetry),
    tagged with the storage class, the status and the DAG; its bill as ``s3arch.requests`` (one
    count per operation, also tagged ``operation``) and ``s3arch.cpu_seconds``."""
    from airflow.providers.common.compat.sdk import Stats

    tags = {"storage_class": storage_class, "status": row["status"], "dag_id": dag_id}
    if row["status"] == "failed":
        Stats.incr("s3arch.failures", tags=tags)
        return
    Stats.incr("s3arch.objects", row["objects"], tags=tags)
    Stats.incr("s3arch.bytes_in", row["bytes_in"], tags=tags)
    Stats.incr("s3arch.bytes_out", row["bytes_out"], tags=tags)
    Stats.incr("s3arch.throttled", row.get("throttled", 0), tags=tags)
    Stats.timing("s3arch.seconds", row["seconds"] * 1000.0, tags=tags)
    if row["status"] == "planned":
        return  # a prepare step's bill is in its assemble step's row: counted there, once
    # The run's bill: requests by operation (tagged ``operation``, boto3's name), CPU-seconds.
    for operation, n in (row.get("requests") or {}).items():
        Stats.incr("s3arch.requests", n, tags={**tags, "operation": operation})
    if row.get("cpu_s"):
        Stats.incr("s3arch.cpu_seconds", row["cpu_s"], tags=tags)


def emit_asset_event(context: Context, outlets, row: dict) -> None:
    """An archived prefix's asset event, ``Asset(<archive URL>)`` with the row as its extra, through
    every ``AssetAlias`` among the task's ``outlets``."""
    from airflow.sdk import Asset, AssetAlias

    extra = {k: row[k] for k in ("prefix", "objects", "bytes_in", "bytes_out", "ratio", "archive", "manifest")}
    for outlet in outlets or []:
        if isinstance(outlet, AssetAlias):
            context["outlet_events"][outlet].add(Asset(uri=row["archive"], name=row["archive"]), extra=extra)
