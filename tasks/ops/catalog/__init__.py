"""The archive catalog: what state each day of a job is in, read cheaply (docs/CATALOG.md).

For a job and a date range it makes:

- **one listing of the job's archive prefix** (archives, manifests, indexes, leases of every
  day at once; a few pages for three years of days),
- **one small GET per committed day** (its manifest index, which carries the manifest's header
  and summary), remembered by the manifest's ETag, so a refresh GETs only what changed,
- **the source's day prefixes by delimiter listing** (one listing per parent of a day prefix:
  ``logs/2026/11/`` for ``logs/{date:%Y/%m/%d}/``, one for ``events/`` for
  ``events/dt={date:%Y-%m-%d}/``),
- **one GET of the last scrub's result** (tasks/ops/scrub/),

and never a HEAD per day. Airflow's view of a day (a failed or running run) is not S3's to tell:
the Airflow layer fills ``DayState.airflow`` and may override ``state`` with "failed" or
"running" (``apply_runs``).

The package's modules: ``view`` (the days' states and the view of them), ``job_catalog`` (a
job's catalog: what it reads, cached), ``reading`` (its requests), ``day_states`` (a day's state
from what was read), ``pricing``, ``counter`` (what a read cost), ``prefixes`` and
``scrub_result`` (where the archives and the last scrub's result are).
"""
