"""What a Celery worker prepares before it forks task processes (s3arch_airflow/preload.py,
celery_config.py) and the engine's one parsed S3 model per process (botocore_hooks.shared_loader):
each task process Airflow forks starts with them instead of loading them again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import ROOT


def _run(code: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "plugins"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # imports Airflow and the engine in a fresh interpreter: the Celery stack's preparation
def test_the_preload_leaves_the_worker_safe_to_fork_with_the_engine_and_s3_model_loaded():
    """A fork copies one thread: a thread, socket or CRT object made by the preload would be
    broken in every task process. After the preload, a task's clients read no model file."""
    seen = _run("""
import json, os, builtins
import s3arch_airflow.preload
threads = len(os.listdir('/proc/self/task'))
sockets = sum(os.readlink(f'/proc/self/fd/{fd}').startswith('socket:') for fd in os.listdir('/proc/self/fd')
              if os.path.exists(f'/proc/self/fd/{fd}'))
opened = []
real_open = builtins.open
builtins.open = lambda path, *a, **k: (opened.append(str(path)), real_open(path, *a, **k))[1]
import boto3
from s3arch.io.s3 import S3Clients
S3Clients.from_session(boto3.Session(aws_access_key_id='k', aws_secret_access_key='s', region_name='eu-west-1'),
                       endpoint_url='http://127.0.0.1:9')
builtins.open = real_open
print(json.dumps({'threads': threads, 'sockets': sockets, 'json_read': [p for p in opened if '.json' in p]}))
""")
    assert seen == {"threads": 1, "sockets": 0, "json_read": []}


def test_engine_sessions_share_one_loader_whose_search_paths_do_not_grow():
    seen = _run("""
import json, boto3
from s3arch.io import botocore_hooks
loaders = set()
for _ in range(50):
    session, _ = botocore_hooks.engine_session(boto3.Session(region_name='us-east-1'))
    loaders.add(id(session._session.get_component('data_loader')))
print(json.dumps({'loaders': len(loaders), 'paths': len(botocore_hooks.shared_loader(None).search_paths)}))
""")
    assert seen["loaders"] == 1
    assert seen["paths"] <= 3  # ~/.aws/models, botocore's data, boto3's data: once each


def test_the_celery_config_is_airflows_own_plus_the_preload():
    from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG

    from s3arch_airflow.celery_config import CELERY_CONFIG

    assert {k: v for k, v in CELERY_CONFIG.items() if k != "imports"} == {
        k: v for k, v in DEFAULT_CELERY_CONFIG.items() if k != "imports"}
    assert CELERY_CONFIG["imports"][-1] == "s3arch_airflow.preload"
