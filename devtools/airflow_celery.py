"""The production topology on one machine, natively: `make airflow-celery` and the Celery tests.

PostgreSQL (Debian's server, a cluster made by ``initdb`` under ``.cache/``) holds Airflow's
metadata, Redis (Debian's ``redis-server``) is the Celery broker, and Airflow runs with the
CeleryExecutor: api-server, scheduler, dag-processor, triggerer and two Celery workers. Every
server listens on loopback only and is stopped by PID.

Two workers on one machine would record the same task-instance hostname (Airflow's default is
the FQDN): each worker's ``S3ARCH_WORKER_HOSTNAME`` is reported through
``s3arch_airflow.hostname.worker_hostname``. They would also both start Airflow's log server on
one port: the first worker serves logs, the second runs with ``--skip-serve-logs``; both write
into the one log folder, which the api-server reads directly. On separate hosts (docker-compose,
Kubernetes) each worker serves its own logs.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from devtools.airflow_local import AIRFLOW, COMPONENTS, POOL, LocalAirflow, airflow_env
from devtools.postgres_bin import find_pg_bin
from devtools.servers import ROOT, S3Server, ServerStartError, free_loopback_port, stop_process
from devtools.stopping import spawn, stop_processes

REDIS_SERVER = os.environ.get("S3ARCH_REDIS_SERVER", "redis-server")

# The executor settings of the production stack: docker-compose.yml sets the same ones
# (tests/test_compose.py compares them). Deployment-specific values (database, broker,
# secrets) are set beside them, per deployment.
CELERY_SETTINGS = {
    "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
    # One archive task holds one memory budget (256 MiB by default) and up to a core of
    # compression: a worker runs as many at once as it has budgets and cores (docs/DEPLOY.md).
    "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
    # A worker reserves a task only when it has a free slot, so a burst of segment tasks
    # spreads over the workers instead of queueing behind the first one to ask.
    "AIRFLOW__CELERY__WORKER_PREFETCH_MULTIPLIER": "1",
    # A task's message is acknowledged when it ends, not when it starts.
    "AIRFLOW__CELERY__TASK_ACKS_LATE": "True",
    "AIRFLOW__CORE__HOSTNAME_CALLABLE": "s3arch_airflow.hostname.worker_hostname",
    # Each worker imports the engine once before forking task processes (s3arch_airflow/preload.py).
    "AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS": "s3arch_airflow.celery_config.CELERY_CONFIG",
    # A backfill's day is one short task: the scheduler looks for the next one 5 times a
    # second when idle instead of once (docs/DEPLOY.md gives what each costs and saves).
    "AIRFLOW__SCHEDULER__SCHEDULER_IDLE_SLEEP_TIME": "0.2",
    # The task supervisor can miss its task's exit and notice it only at its next heartbeat:
    # this bounds that wait to 1 s instead of 5.
    "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
    # A worker that died (OOM-killed, host lost) leaves its tasks 'running': the scheduler
    # fails them after this many seconds without a heartbeat, and their retries run elsewhere.
    "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "120",
}
WORKERS = ("worker-1", "worker-2")


def _as_postgres() -> dict:
    """PostgreSQL refuses to run as root: as root, its processes run as Debian's postgres user."""
    if os.geteuid() != 0:
        return {}
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise ServerStartError("running as root, but there is no 'postgres' user to run PostgreSQL as: "
                               "install Debian's postgresql package (apt-get install postgresql)") from None
    return {"user": "postgres", "group": "postgres"}


def _data_dir_for(owner: dict) -> Path:
    """``.cache/postgres/ID`` when the postgres user can reach it; else (a checkout under a
    private home such as /root) a fresh directory under the system's temporary directory."""
    preferred = ROOT / ".cache" / "postgres" / uuid.uuid4().hex[:12]
    if not owner or _traversable_by(preferred.parent, pwd.getpwnam(owner["user"])):
        return preferred
    import tempfile

    return Path(tempfile.mkdtemp(prefix="s3arch-postgres-")) / "data"


def _traversable_by(path: Path, user: pwd.struct_passwd) -> bool:
    """Whether ``user`` may pass through every existing directory on the way to ``path``."""
    import stat

    for directory in (path, *path.parents):
        if not directory.exists():
            continue
        st = directory.stat()
        if st.st_uid == user.pw_uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid == user.pw_gid:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


@dataclass
class Postgres:
    """A throwaway PostgreSQL cluster on loopback with a trusted ``airflow`` superuser. Its
    data directory lives under ``.cache/postgres/`` (the postgres user must reach it: a
    private temporary directory of root's would not do) and is removed on stop."""

    log_path: Path
    datadir: Path = field(default_factory=lambda: _data_dir_for(_as_postgres()))
    port: int = field(default_factory=free_loopback_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://airflow@127.0.0.1:{self.port}/airflow"

    @property
    def result_backend(self) -> str:
        return f"db+postgresql://airflow@127.0.0.1:{self.port}/airflow"

    def start(self, timeout: float = 60.0) -> "Postgres":
        """Start the cluster; whatever interrupts the start (a signal included) stops it again."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> "Postgres":
        pg_bin = find_pg_bin()
        if pg_bin is None:
            raise ServerStartError("PostgreSQL's initdb and postgres were not found (S3ARCH_PG_BIN, "
                                   "`pg_config --bindir`, /usr/lib/postgresql/*/bin, PATH): install Debian's "
                                   "postgresql package (apt-get install postgresql) or set S3ARCH_PG_BIN")
        owner = _as_postgres()
        shutil.rmtree(self.datadir, ignore_errors=True)
        self.datadir.mkdir(parents=True, mode=0o700)
        if owner:
            shutil.chown(self.datadir, owner["user"], owner["group"])
            if self.datadir.parent.name.startswith("s3arch-postgres-"):  # the temporary fallback
                shutil.chown(self.datadir.parent, owner["user"], owner["group"])
        init = subprocess.run([str(pg_bin / "initdb"), "-D", str(self.datadir), "-A", "trust", "-U", "airflow",
                               "-E", "UTF8", "--no-sync"], capture_output=True, text=True, **owner)
        if init.returncode:
            raise ServerStartError(f"initdb failed ({init.returncode}): {init.stderr[-2000:]}")
        with open(self.log_path, "ab") as log:
            self.process = spawn(
                [str(pg_bin / "postgres"), "-D", str(self.datadir), "-k", str(self.datadir), "-p", str(self.port),
                 "-h", "127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, **owner)
        deadline = time.monotonic() + timeout
        import psycopg2

        while True:
            if self.process.poll() is not None:
                raise ServerStartError(f"postgres exited with {self.process.returncode}: "
                                       f"{self.log_path.read_text()[-2000:]}")
            try:
                connection = psycopg2.connect(host="127.0.0.1", port=self.port, user="airflow", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise ServerStartError(f"PostgreSQL did not accept connections within {timeout:.0f}s")
                time.sleep(0.2)
        connection.autocommit = True
        with connection.cursor() as cursor:
            cursor.execute("CREATE DATABASE airflow")
        connection.close()
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, stop), SIGKILL after 20 s."""
        stop_processes([self.process], grace=20, first=signal.SIGINT)
        temporary = self.datadir.parent.name.startswith("s3arch-postgres-")
        shutil.rmtree(self.datadir.parent if temporary else self.datadir, ignore_errors=True)


@dataclass
class Redis:
    """A Redis on loopback that keeps nothing on disk (the Celery broker)."""

    port: int = field(default_factory=free_loopback_port)
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, log_path: Path, timeout: float = 30.0) -> "Redis":
        """Start the server; whatever interrupts the start (a signal included) stops it again."""
        try:
            return self._start(log_path, timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, log_path: Path, timeout: float) -> "Redis":
        if not shutil.which(REDIS_SERVER):
            raise ServerStartError(f"{REDIS_SERVER} is not installed: apt-get install redis-server "
                                   "(or set S3ARCH_REDIS_SERVER)")
        with open(log_path, "ab") as log:
            self.process = spawn(
                [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerStartError(f"redis-server exited with {self.process.returncode}: "
                                       f"{log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.1)
        raise ServerStartError(f"redis-server did not answer PING within {timeout:.0f}s")

    def stop(self) -> None:
        stop_process(self.process)


@dataclass
class CeleryAirflow(LocalAirflow):
    """Airflow on PostgreSQL + Redis with the CeleryExecutor and two Celery workers."""

    postgres: Postgres | None = None
    redis: Redis | None = None

    def worker_command(self, name: str) -> tuple[list[str], dict[str, str]]:
        argv = [AIRFLOW, "celery", "worker", "--celery-hostname", f"{name}@%h"]
        if name != WORKERS[0]:
            argv.append("--skip-serve-logs")  # one log server per machine: see the module's doc
        return argv, {**self.env, "S3ARCH_WORKER_HOSTNAME": f"s3arch-{name}"}

    def commands(self) -> dict[str, tuple[list[str], dict[str, str]]]:
        return {**super().commands(), **{name: self.worker_command(name) for name in WORKERS}}

    def kill_worker(self, name: str, *, host_lost: bool = False) -> None:
        """SIGKILL a worker's process group: the worker and its pool. Airflow runs each task
        in a process group of its own, so its task processes live on, orphaned, as they do
        when a worker is OOM-killed. With ``host_lost``, every process the worker started
        dies with it, as when its host goes away."""
        import psutil

        process = self.processes[name]
        tasks = psutil.Process(process.pid).children(recursive=True) if host_lost else []
        os.killpg(process.pid, signal.SIGKILL)
        for task in tasks:
            try:
                task.kill()
            except psutil.NoSuchProcess:
                pass
        process.wait()

    def start_worker(self, name: str) -> None:
        self.start_process(name, *self.worker_command(name))

    def stop(self) -> None:
        """Airflow's processes first (they use the database and the broker), then Redis and
        PostgreSQL; each is stopped even if stopping another failed."""
        try:
            super().stop()
        finally:
            try:
                if self.redis:
                    self.redis.stop()
            finally:
                if self.postgres:
                    self.postgres.stop()


def prepare_celery_airflow(home: Path, s3: S3Server, jobs_file: Path, *, pool_slots: int = 4,
                           api_port: int | None = None, overrides: dict[str, str] | None = None) -> CeleryAirflow:
    """Start PostgreSQL and Redis under ``home``, migrate the metadata DB and create the pool.
    ``overrides`` are Airflow settings for this stack only (the tests shorten timeouts)."""
    home.mkdir(parents=True, exist_ok=True)
    postgres = Postgres(home / "postgres.log").start()
    redis = Redis()
    try:
        redis.start(home / "redis.log")
    except BaseException:
        postgres.stop()
        raise
    env = airflow_env(home, s3, jobs_file, api_port=api_port)
    env.update(CELERY_SETTINGS)
    env.update({
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": postgres.url,
        "AIRFLOW__CELERY__BROKER_URL": redis.url,
        "AIRFLOW__CELERY__RESULT_BACKEND": postgres.result_backend,
        # The scheduler may hand out as many tasks as both workers have slots.
        "AIRFLOW__CORE__PARALLELISM": str(len(WORKERS) * int(CELERY_SETTINGS["AIRFLOW__CELERY__WORKER_CONCURRENCY"])),
        **(overrides or {}),
    })
    airflow = CeleryAirflow(home, env, postgres=postgres, redis=redis)
    try:
        airflow.cli("db", "migrate")
        airflow.cli("pools", "set", POOL, str(pool_slots), "archive tasks (each holds one memory budget)")
    except BaseException:
        airflow.stop()
        raise
    return airflow


__all__ = ["CELERY_SETTINGS", "COMPONENTS", "WORKERS", "CeleryAirflow", "Postgres", "Redis",
           "prepare_celery_airflow"]
