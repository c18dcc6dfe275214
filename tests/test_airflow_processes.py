"""One Airflow task is one process unless the job asks (issue 29, item 4).

A day over the job's segment threshold (lowered to 20 objects so the day stays small) is
archived by the archive DAG with dag.test(), while a thread watches this process's tree: with
the defaults no worker process appears (the engine's own default, the CLI's, would start one
per CPU); with ``processes: 2`` exactly two segment workers run and the archive is the same.
What is counted is the process tree (psutil), not the engine's counters.
"""

from __future__ import annotations

import gzip
import threading
from datetime import date, datetime, timezone

import pytest

from devtools.sample_data import seed_day
from helpers import LOG_TEMPLATE as TEMPLATE, ROOT, airflow_with_log_job, use_airflow_home

pytestmark = pytest.mark.slow  # whole DagRuns through dag.test(), one with segment worker processes

DAY = date(2026, 7, 1)


@pytest.fixture(scope="module")
def af(minio, tmp_path_factory):
    from devtools.airflow_local import write_jobs_file

    home = tmp_path_factory.mktemp("airflow-proc")
    # Over the threshold: 48 objects against 20; a budget that holds two workers and the
    # assembler (so only the job's processes setting can keep the task to one process).
    small_threshold = {"segment_min_objects": 20, "memory_budget": "320MiB"}
    airflow, s3, src, dst = airflow_with_log_job(minio, home, "proc", **small_threshold)
    import yaml

    jobs = yaml.safe_load((home / "jobs.yaml").read_text())["jobs"]
    asking = {**jobs["proc"], "destination": f"s3://{dst}/asked/", "processes": 2}
    write_jobs_file(home / "jobs.yaml", {"proc": jobs["proc"], "proc2": asking})
    seed_day(s3, src, TEMPLATE, DAY, files_per_hour=2, lines_per_file=20)
    with pytest.MonkeyPatch.context() as mp:
        use_airflow_home(mp, airflow.env)
        airflow.s3, airflow.src, airflow.dst = s3, src, dst
        yield airflow


class WorkerWatch:
    """Every process started under this one while it runs that is a multiprocessing child
    (spawned interpreters run ``multiprocessing.spawn.spawn_main``; its resource tracker is not a worker), by PID, sampled every 10 ms."""

    def __init__(self):
        import psutil

        self.me = psutil.Process()
        self.pids: set[int] = set()
        self.most_at_once = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        import psutil

        while not self._stop.wait(0.01):
            alive = set()
            for child in self.me.children(recursive=True):
                try:
                    if any("spawn_main" in part for part in child.cmdline()):
                        alive.add(child.pid)
                except psutil.Error:
                    continue
            self.pids |= alive
            self.most_at_once = max(self.most_at_once, len(alive))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_archive(dag_id: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(ROOT / "dags"))
    assert not bag.import_errors, bag.import_errors
    with WorkerWatch() as watch:
        run = bag.dags[dag_id].test(logical_date=datetime(2026, 10, 1, tzinfo=timezone.utc),
                                    run_conf={"date_from": str(DAY), "date_to": str(DAY)})
    return run, watch


def archive_body(af, prefix: str) -> bytes:
    return af.s3.get_object(Bucket=af.dst, Key=f"{prefix}{af.src}/{DAY:logs/%Y/%m/%d}.tar.gz")["Body"].read()


def test_a_task_on_a_prefix_over_the_threshold_stays_one_process_by_default(af):
    run, watch = run_archive("s3_archive__proc")
    assert run.state == "success"
    assert watch.pids == set(), f"the archive task started worker processes {sorted(watch.pids)}"
    assert gzip.decompress(archive_body(af, "archive/")).count(b"ustar") >= 48


def test_a_job_with_processes_2_runs_two_worker_processes_and_makes_the_same_archive(af):
    run, watch = run_archive("s3_archive__proc2")
    assert run.state == "success"
    assert len(watch.pids) == 2 and watch.most_at_once <= 2, sorted(watch.pids)
    assert gzip.decompress(archive_body(af, "asked/")) == gzip.decompress(archive_body(af, "archive/"))
