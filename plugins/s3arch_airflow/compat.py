"""The Airflow names the package uses that moved into the Task SDK after 3.1, from where the
running Airflow has them (3.1.8 is the oldest supported: ``make compat``).

3.1's SDK has ``AirflowException`` (the same class as ``airflow.exceptions``') but not
``AirflowFailException``, whose 3.1 class its task runner fails a task on without retries,
nor ``DownstreamTasksSkipped``, nor ``conf``.
"""

from __future__ import annotations

try:
    from airflow.sdk import conf
    from airflow.sdk.exceptions import AirflowException, AirflowFailException, DownstreamTasksSkipped
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf  # type: ignore[assignment]
    from airflow.exceptions import (AirflowException, AirflowFailException,  # type: ignore[no-redef]
                                    DownstreamTasksSkipped)

__all__ = ["AirflowException", "AirflowFailException", "DownstreamTasksSkipped", "conf"]
