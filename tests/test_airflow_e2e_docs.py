"""Every Airflow example in README.md and docs/JOBS.md, run as printed against the `make
airflow` stack, and every run it starts must go green.

JOBS.md's examples use the shipped job; the README's use the jobs its YAML defines (AWS log
presets), which this test adds to the stack as printed but for `storage_class` (MinIO takes
only STANDARD), with their buckets and days seeded as AWS names the objects
(tests/test_aws_presets.py's layouts).

The commands are read from the docs themselves (the `airflow` and `curl` lines of fenced
`bash` blocks, and inline `airflow dags trigger ...` / `airflow backfill create ...` with
arguments), so an edited example is tested as it now reads. The stack is the
suite's one Airflow (``airflow_e2e_stack``), given what `make airflow` gives its own: the
shipped job of dags/archive_jobs.yaml, the sample days `devtools.airflow_ui.seed_samples`
seeds, and the env file `devtools.airflow_ui.write_env_file` writes. Each command runs in a
new bash that only sources that file, as a second shell of a user would. Placeholders that a
reader fills in (`RUN_ID`, `MAP_INDEX` in the REST example) are filled from the run the
on-call trigger made.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import time
from datetime import date
from pathlib import Path

import pytest
import yaml

from devtools.airflow_local import write_jobs_file
from devtools.airflow_ui import EXAMPLE_DAYS, seed_samples, write_env_file
from devtools.demo import ARCHIVE_BUCKET, DAG_ID, JOBS_FILE, SOURCE_BUCKET


pytestmark = pytest.mark.slow  # the docs' examples on the real Airflow stack


ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "docs" / "JOBS.md"]

def _commands(text: str) -> list[str]:
    """The Airflow commands a doc prints: `airflow ...` and `curl ...` lines of its bash
    blocks (continuation lines and quotes spanning lines joined), and inline `airflow ...`."""
    found = []
    for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, re.S):
        command = ""
        for line in block.splitlines():
            if not command and not line.startswith(("airflow ", "curl ")):
                continue
            command += line + "\n"
            try:
                complete = not command.rstrip().endswith("\\") and shlex.split(command, comments=True) is not None
            except ValueError:  # a quote still open
                complete = False
            if complete:
                found.append(command.strip())
                command = ""
        assert not command, f"unfinished command in a code block: {command}"
    # In prose, the commands that run something (a name like `airflow tasks clear` in a
    # sentence is not an example).
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    found += re.findall(r"`(airflow (?:dags trigger|backfill create) [^`]+)`", prose)
    return found


def test_the_docs_have_the_examples_this_test_runs():
    per_doc = {doc.name: _commands(doc.read_text()) for doc in DOCS}
    assert any(c.startswith("airflow dags trigger") for c in per_doc["README.md"]), per_doc
    assert any(c.startswith("airflow dags trigger") for c in per_doc["JOBS.md"]), per_doc
    assert any(c.startswith("curl ") and "/backfills" in c for c in per_doc["JOBS.md"]), per_doc
    assert any(c.startswith("curl ") and "/clearTaskInstances" in c for c in per_doc["JOBS.md"]), per_doc


def _bash(env_file: Path, command: str, done=lambda: False, attempts: int = 20) -> str:
    """Run ``command`` in a fresh bash that sources ``env_file`` (nothing else of this
    process's environment but PATH and HOME). SQLite's "database is locked", when the
    scheduler writes at that moment, is SQLite's limit, not the example's (the README says to
    run the command again): run it again, unless ``done()`` says the failed try took effect."""
    for attempt in range(attempts):
        result = subprocess.run(["bash", "-c", f"source {shlex.quote(str(env_file))} && {command}"],
                                cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(env_file.parent)},
                                timeout=300)
        said = result.stdout + result.stderr
        # curl exits 0 on Airflow's error answer ("Database is locked. Backfill creation is not
        # supported on SQLite under concurrent access"): the answer is what tells.
        locked = "database is locked" in said.lower()
        if result.returncode == 0 and not locked:
            return result.stdout  # curl's progress meter and Airflow's log lines go to stderr
        if not locked or attempt == attempts - 1:
            pytest.fail(f"the documented command failed ({result.returncode}):\n$ {command}\n{said[-4000:]}")
        if done():
            return result.stdout
        time.sleep(3 + attempt)
    raise AssertionError("unreachable")


def _runs(airflow, dag_id=DAG_ID) -> dict[str, dict]:
    return {r["dag_run_id"]: r for r in airflow.api("GET", f"dags/{dag_id}/dagRuns?limit=500")["dag_runs"]}


def _wait_finished(airflow, run_ids, timeout: float, dag_id=DAG_ID) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        runs = _runs(airflow, dag_id)
        states = {r: runs[r]["state"] for r in run_ids}
        if all(s in ("success", "failed") for s in states.values()):
            return states
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {name}\n{airflow.log_tail(name)}" for name in ("scheduler", "dag-processor"))
            pytest.fail(f"runs not finished after {timeout:.0f}s: {states}\n{logs}")
        time.sleep(2)


def _mapped_archive(airflow, run_id) -> dict[str, int]:
    tis = airflow.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=500")["task_instances"]
    return {ti["rendered_map_index"]: ti["map_index"] for ti in tis if ti["task_id"] == "archive"}


def _readme_jobs() -> dict[str, dict]:
    """The jobs of the README's YAML, as printed but for the storage class MinIO takes."""
    text = (ROOT / "README.md").read_text()
    jobs = {}
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        jobs.update((yaml.safe_load(block) or {}).get("jobs", {}))
    assert jobs, "the README shows no jobs file"
    return {name: {**job, "storage_class": "STANDARD"} for name, job in jobs.items()}


def _seed_readme_jobs(s3, jobs: dict[str, dict], today: date) -> None:
    """Each README job's buckets, and its source's days (the examples' and the ten before today,
    which a scheduled run archives) with objects named as AWS names them."""
    from datetime import timedelta

    from helpers import seed
    from test_aws_presets import cloudtrail, s3_simple

    layouts = {"cloudtrail": cloudtrail, "s3-access-logs": s3_simple}  # the README's presets
    days = {*EXAMPLE_DAYS, *(today - timedelta(days=n) for n in range(1, 11))}
    existing = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    for job in jobs.values():
        source = job["source"].removeprefix("s3://").split("/", 1)
        for bucket in (source[0], job["destination"].removeprefix("s3://").split("/", 1)[0]):
            if bucket not in existing:
                s3.create_bucket(Bucket=bucket)
                existing.add(bucket)
        keys = [k for day in sorted(days) for k in layouts[job["preset"]](day)]
        # The layouts' keys start with the prefix AWS was told to write under (the source's key).
        assert all(k.startswith(source[1]) for k in keys), (job, keys[:1])
        seed(s3, source[0], {k: f"{k}\n".encode() * 20 for k in keys})


def test_every_readme_and_jobs_airflow_example_goes_green_as_printed(airflow_e2e_stack):
    airflow, s3, _, _ = airflow_e2e_stack
    # What `make airflow` has: the shipped job, its buckets, the sample days, the env file; and
    # the README's jobs with theirs.
    jobs_file = Path(airflow.env["S3ARCH_JOBS_FILE"])
    shipped = yaml.safe_load(JOBS_FILE.read_text())["jobs"]
    readme_jobs = _readme_jobs()
    write_jobs_file(jobs_file, {**yaml.safe_load(jobs_file.read_text())["jobs"], **shipped, **readme_jobs})
    for bucket in (SOURCE_BUCKET, ARCHIVE_BUCKET):
        s3.create_bucket(Bucket=bucket)
    seed_samples(s3, date.today())
    _seed_readme_jobs(s3, readme_jobs, date.today())
    env_file = write_env_file(airflow, airflow.home / "env.sh")
    wanted = {DAG_ID, *(f"s3_archive__{name}" for name in readme_jobs)}
    deadline = time.monotonic() + 120
    while not wanted <= {d["dag_id"] for d in airflow.api("GET", "dags?limit=100")["dags"]}:
        assert time.monotonic() < deadline, f"not all of {sorted(wanted)} were parsed"
        time.sleep(2)

    commands = [(doc.name, c) for doc in DOCS for c in _commands(doc.read_text())]
    on_call = None  # the run of the first prefixes trigger: the REST example clears in it
    for doc, command in commands:
        dag_id = re.search(r"s3_archive__[\w-]+", command).group(0)  # the DAG the example runs
        before = set(_runs(airflow, dag_id))
        clears = command.startswith("curl ") and "/clearTaskInstances" in command
        backfill = command.startswith("airflow backfill create") or (command.startswith("curl ") and "/backfills" in command)
        if clears:
            assert on_call, f"{doc}: the REST example needs a run to clear in: {command}"
            index = _mapped_archive(airflow, on_call["run_id"])[on_call["prefix"]]
            command = command.replace("RUN_ID", on_call["run_id"]).replace("MAP_INDEX", str(index))

        def made_runs():  # a try that failed late may have made its runs all the same
            return not clears and any(
                r not in before and v["run_type"] in ("manual", "backfill") for r, v in _runs(airflow, dag_id).items())

        output = _bash(env_file, command, done=made_runs)
        if clears:
            cleared = json.loads(output)
            assert ("archive", index) in {(ti["task_id"], ti["map_index"]) for ti in cleared["task_instances"]}, output
            deadline = time.monotonic() + 60
            while _runs(airflow, dag_id)[on_call["run_id"]]["state"] not in ("queued", "running"):
                assert time.monotonic() < deadline, "the cleared run did not start again"
                time.sleep(1)
            new = [on_call["run_id"]]
        else:
            deadline = time.monotonic() + 60
            while not (new := sorted(r for r, v in _runs(airflow, dag_id).items()
                                     if r not in before and v["run_type"] in ("manual", "backfill"))):
                assert time.monotonic() < deadline, f"{doc}: no run appeared for: {command}\n{output}"
                time.sleep(1)
        if backfill:
            frm, to = (date.fromisoformat(re.search(rf"(?:--{w}-date |\"{w}_date\": \")(\d{{4}}-\d\d-\d\d)", command).group(1))
                       for w in ("from", "to"))
            expected = (to - frm).days + 1
            deadline = time.monotonic() + 60
            while len(new := sorted(r for r, v in _runs(airflow, dag_id).items()
                                    if r not in before and v["run_type"] == "backfill")) < expected:
                assert time.monotonic() < deadline, f"{doc}: the backfill made {len(new)} of {expected} runs"
                time.sleep(2)
        states = _wait_finished(airflow, new, timeout=900, dag_id=dag_id)
        assert set(states.values()) == {"success"}, f"{doc}: $ {command}\n{states}"
        conf = json.loads(re.search(r"--conf '(.*?)'", command).group(1)) if "--conf '" in command else {}
        if on_call is None and conf.get("prefixes") and dag_id == DAG_ID:
            on_call = {"run_id": new[0], "prefix": conf["prefixes"][0]}
