"""Progress of Airflow Backfills of an archive job, for the catalog (docs/CATALOG.md).

A Backfill (Trigger > Backfill, ``POST /api/v2/backfills``) makes one DagRun per logical date;
each archives the day(s) its logical date plans (minus the job's age). The operator of a long
backfill asks: how many of its days are archived, how many runs are still waiting, did
one fail, is it paused. Archived is what S3 says (the catalog's day states), not what Airflow
says: a day archived earlier by another run counts, a green run whose day has no manifest
does not.
"""

from __future__ import annotations

from datetime import date

RECENT = 5  # backfills shown per job: the unfinished ones first, then the newest finished


def backfill_progress(job, dag_id: str, view) -> list[dict]:
    """The job's recent Backfills, each with its planned days and how many of them the
    catalog ``view`` shows archived (days outside the view's range are counted apart)."""
    from sqlalchemy import select

    from airflow.models.backfill import Backfill, BackfillDagRun
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from s3arch.ops.catalog.view import ARCHIVED_STATES

    states = {d.day: d.state for d in view.days}
    with create_session() as session:
        backfills = session.scalars(
            select(Backfill).where(Backfill.dag_id == dag_id)
            .order_by(Backfill.completed_at.is_not(None), Backfill.id.desc()).limit(RECENT)).all()
        rows = session.execute(
            select(BackfillDagRun.backfill_id, BackfillDagRun.logical_date, DagRun.state)
            .outerjoin(DagRun, DagRun.id == BackfillDagRun.dag_run_id)
            .where(BackfillDagRun.backfill_id.in_([b.id for b in backfills]))).all()
        described = [_describe(b) for b in backfills]
    for entry in described:
        days: set[str] = set()
        runs: dict[str, int] = {}
        for backfill_id, logical, state in rows:
            if backfill_id != entry["id"]:
                continue
            days.update(planned_days(job, logical.date()))
            key = str(state.value if hasattr(state, "value") else state) if state else "not created"
            runs[key] = runs.get(key, 0) + 1
        seen = [states[day] for day in days if day in states]
        entry.update(days=len(days), archived=sum(s in ARCHIVED_STATES for s in seen),
                     outside_view=len(days) - len(seen), runs=runs)
    return described


def planned_days(job, logical: date) -> list[str]:
    """The days (ISO) the run of a logical date archives: the same plan the DAG's plan task makes."""
    from s3arch.ops.planning import plan

    return [job.date_of(prefix).isoformat() for prefix in plan(job, logical_date=logical)]


def _describe(backfill) -> dict:
    return {"id": backfill.id, "from_date": backfill.from_date.date().isoformat(),
            "to_date": backfill.to_date.date().isoformat(), "paused": bool(backfill.is_paused),
            "completed_at": backfill.completed_at.isoformat() if backfill.completed_at else None,
            "max_active_runs": backfill.max_active_runs}
