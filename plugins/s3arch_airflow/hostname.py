"""A task instance's hostname for Airflow's ``[core] hostname_callable``.

Airflow records a task instance's ``hostname`` when its task starts and checks it on every
heartbeat; by default it is the machine's FQDN, so two Celery workers on one machine (or two
pods sharing a node's name) record the same host and an operator cannot tell which worker ran
what. With ``hostname_callable = s3arch_airflow.hostname.worker_hostname`` each worker process
reports ``S3ARCH_WORKER_HOSTNAME`` when its environment sets it (stable for the worker's life,
as the heartbeat check needs), else the FQDN as before.
"""

from __future__ import annotations

import os
import socket


def worker_hostname() -> str:
    return os.environ.get("S3ARCH_WORKER_HOSTNAME") or socket.getfqdn()
