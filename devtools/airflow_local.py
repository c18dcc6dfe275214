"""A local Airflow for the demo, the tests and trying the UI by hand.

Everything lives in one throwaway AIRFLOW_HOME: a SQLite DB, LocalExecutor, this repo's
dags/ and plugins/, a jobs file, the ``s3_archive`` pool and an AWS connection pointing at a
local S3 server (MinIO) through ``endpoint_url`` in its extra. ``LocalAirflow.start`` runs
the real api-server, scheduler, dag-processor and triggerer on loopback; ``stop`` stops them by PID.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from devtools.servers import ROOT, S3Server, ServerStartError, free_loopback_port
from devtools.stopping import spawn, stop_processes

AIRFLOW = str(Path(sys.executable).with_name("airflow"))
POOL = "s3_archive"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")


def airflow_env(home: Path, s3: S3Server, jobs_file: Path, *, conn_id: str = "s3_archive",
                api_port: int | None = None) -> dict[str, str]:
    """Environment for every Airflow process (and in-process dag.test) of one local Airflow."""
    api_port = api_port or free_loopback_port()
    connection = {"conn_type": "aws", "login": s3.access_key, "password": s3.secret_key,
                  "extra": {"endpoint_url": s3.endpoint_url, "region_name": s3.region}}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "AIRFLOW"))}
    env.update({
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(api_port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "1",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        "S3ARCH_JOBS_FILE": str(jobs_file),
        f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(connection),
        # The engine's own CLI and boto3 default chain look here; the DAG uses the connection.
        **s3.env(),
    })
    return env


@dataclass
class LocalAirflow:
    home: Path
    env: dict[str, str]
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def api_url(self) -> str:
        return self.env["AIRFLOW__API__BASE_URL"]

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([AIRFLOW, *args], env=self.env, cwd=self.home, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if check and result.returncode:
            raise RuntimeError(f"airflow {' '.join(args)} failed ({result.returncode}):\n{result.stdout[-3000:]}")
        return result

    def commands(self) -> dict[str, tuple[list[str], dict[str, str]]]:
        """Each process this Airflow runs: its name, argv and environment."""
        return {name: ([AIRFLOW, name], self.env) for name in COMPONENTS}

    def start_process(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        """One process in its own process group (so a stop or a kill reaches its children),
        logging to ``HOME/NAME.log``."""
        with open(self.home / f"{name}.log", "ab") as log:
            self.processes[name] = spawn(argv, env=env, cwd=self.home, stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return self.processes[name]

    def start(self, timeout: float = 180.0) -> None:
        """Start the api-server, then, once it answers, every other process of ``commands``:
        a task the scheduler hands out before the api-server listens fails at once (its
        supervisor cannot report it started), as a loaded machine showed with catch-up runs."""
        commands = self.commands()
        deadline = time.monotonic() + timeout
        self.start_process("api-server", *commands.pop("api-server"))
        self._wait_for_api(deadline, timeout)
        for name, (argv, env) in commands.items():
            self.start_process(name, argv, env)

    def _wait_for_api(self, deadline: float, timeout: float) -> None:
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    self.stop()
                    raise ServerStartError(f"airflow {name} exited with {process.returncode}:\n"
                                           f"{self.log_tail(name)}")
            try:
                with urllib.request.urlopen(f"{self.api_url}/api/v2/monitor/health", timeout=2):
                    return
            except (urllib.error.URLError, OSError):
                time.sleep(0.5)
        self.stop()
        raise ServerStartError(f"the Airflow api-server did not answer within {timeout:.0f}s:\n"
                               f"{self.log_tail('api-server')}")

    def api(self, method: str, path: str, body: dict | None = None) -> dict:
        """Call the REST API (/api/v2/...). The local setup lets every caller act as admin."""
        request = urllib.request.Request(f"{self.api_url}/api/v2/{path.lstrip('/')}", method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {exc.read().decode(errors='replace')}") from None

    def wait_until(self, condition, timeout: float, what: str, interval: float = 0.5):
        """``condition()``'s first true value, polled every ``interval`` seconds; after
        ``timeout``, TimeoutError naming ``what`` with the scheduler's and dag-processor's logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(interval)
        logs = "\n".join(f"--- {name}\n{self.log_tail(name)}" for name in ("scheduler", "dag-processor"))
        raise TimeoutError(f"timed out after {timeout}s waiting for {what}\n{logs}")

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.home / f"{name}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        """Stop every process we started, with its process group and descendants (task
        processes included): SIGTERM, then SIGKILL after 20 s; the api-server's after 5 s
        (Airflow 3's api-server finishes serving at once, then its process does not exit)."""
        graces = {p.pid: 5.0 for name, p in self.processes.items() if name == "api-server"}
        try:
            stop_processes(self.processes.values(), grace=20, graces=graces)
        finally:
            self.processes.clear()


def prepare_airflow(home: Path, s3: S3Server, jobs_file: Path, *, pool_slots: int = 2,
                    api_port: int | None = None, meanwhile: Callable[[], object] = lambda: None) -> LocalAirflow:
    """Migrate a fresh SQLite DB and create the pool the archive tasks run in (a task in a
    pool that does not exist would wait forever). ``meanwhile`` runs while the DB migrates (a
    fresh clone's first Airflow start is its slowest step: the demo seeds its logs then)."""
    home.mkdir(parents=True, exist_ok=True)
    airflow = LocalAirflow(home, airflow_env(home, s3, jobs_file, api_port=api_port))
    airflow.start_process("db-migrate", [AIRFLOW, "db", "migrate"], airflow.env)
    try:
        meanwhile()
    finally:
        migrated = airflow.processes.pop("db-migrate").wait()
    if migrated:
        raise RuntimeError(f"airflow db migrate failed ({migrated}):\n{airflow.log_tail('db-migrate')}")
    airflow.cli("pools", "set", POOL, str(pool_slots), "archive tasks (each holds one memory budget)")
    return airflow


def write_jobs_file(path: Path, jobs: dict[str, dict]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({"jobs": jobs}, sort_keys=False))
    return path
