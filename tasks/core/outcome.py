"""What a run of the engine did, as its result's ``status`` says it."""

from enum import StrEnum


class Outcome(StrEnum):
    """What a run did with its prefix (or one segment of it)."""

    ARCHIVED = "archived"  # committed by this run
    SKIPPED = "skipped"  # committed before: nothing written (but the end of a source deletion)
    DRY_RUN = "dry_run"  # listed and estimated: nothing written
    PLANNED = "planned"  # a segmented run's plan made and its upload opened (Airflow's prepare)
    PRODUCED = "produced"  # one segment produced into the open upload (Airflow's segment)
