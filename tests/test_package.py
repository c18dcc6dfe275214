"""The package as a user gets it: a wheel built from a clean tree, installed into a new venv
outside the repository, used from there.

- The wheel is built from a copy of the tracked files only (`git ls-files`, as a fresh clone
  has them), by pip with build isolation, as `pip install .` or `python -m build` would.
- The venv is new, without system site-packages, and the commands run with the venv's own
  `s3arch` script, cwd outside the repo, no PYTHONPATH: the repo is not importable there, which
  the test checks rather than assumes.
- The engine is installed first, alone (its declared dependencies, pinned by constraints.txt),
  and must archive, verify and extract against MinIO without Airflow. Then the `airflow`
  extra goes into the same venv and Airflow must load a DAG file of a few lines that calls the
  factory, and find the `s3arch` plugin through its entry point, once.

The wheel and the venv are new on every run (module-scoped: one build and one venv for the
tests of this file). The third-party wheels come from a wheelhouse in .cache/package-wheels,
filled by `pip wheel` with the same constraints the first time (or when constraints.txt names a
version it lacks): pip here keeps no cache, and downloading Airflow's ~250 packages on every
run took 3 minutes, while installing them from local wheels takes well under one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import zipfile
from pathlib import Path

import pytest


pytestmark = pytest.mark.slow  # builds a wheel and installs it into new venvs


ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
WHEELHOUSE = ROOT / ".cache" / "package-wheels"
TIMINGS: dict[str, float] = {}


def _run(argv, *, env=None, cwd, timeout=900, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, text=True, capture_output=True,
                            timeout=timeout)
    if check and result.returncode:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {result.returncode}:\n"
                             f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH, no virtualenv of ours, no AWS_/AIRFLOW
    settings left over from the test process."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")
           and not k.startswith(("AWS_", "AIRFLOW"))}
    env.update(extra)
    return env


def _base_python() -> str:
    """The interpreter the repo's venv was made from (a venv is never made from a venv)."""
    return str(Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """s3arch-*.whl built from the tracked files of the working tree, copied elsewhere."""
    started = time.monotonic()
    base = tmp_path_factory.mktemp("package")
    tree = base / "clone"
    tracked = _run(["git", "ls-files", "-z"], cwd=ROOT).stdout.split("\0")
    for name in filter(None, tracked):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not in a clone either
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_bytes(source.read_bytes())
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", base / "dist", tree],
         cwd=base, env=_clean_env())
    built = list((base / "dist").glob("s3arch-*.whl"))
    assert len(built) == 1, built
    TIMINGS["build wheel"] = time.monotonic() - started
    return built[0]


@pytest.fixture(scope="module")
def venv(wheel):
    """A new venv (no pip of its own: the repo venv's pip installs into it with --python) with
    the wheel and its declared dependencies, pinned by constraints.txt."""
    started = time.monotonic()
    # On tmpfs where there is room: Airflow's venv is ~400 MB in ~21,000 files, and on this
    # shared disk writing and removing them took over a minute each.
    from devtools.servers import scratch_root

    home = Path(tempfile.mkdtemp(prefix="s3arch-package-", dir=scratch_root()))
    _run([_base_python(), "-m", "venv", "--without-pip", home / "venv"], cwd=home, env=_clean_env())
    assert "include-system-site-packages = false" in (home / "venv" / "pyvenv.cfg").read_text()
    _pip_install(home / "venv", [wheel], cwd=home)
    TIMINGS["venv + engine install"] = time.monotonic() - started
    yield home / "venv"
    subprocess.run(["rm", "-rf", str(home)], check=False)


def _pip_install(venv: Path, requirements: list, *, cwd: Path) -> None:
    """pip install into ``venv``, versions from constraints.txt, wheels from the wheelhouse
    only (--no-index); what the wheelhouse lacks is fetched into it first, then installed the
    same way."""
    # --no-compile: byte-compiling all of Airflow at install took longer than compiling, on
    # first import, the part the checks import.
    install = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--quiet",
               "--no-compile", "--no-index", "--find-links", WHEELHOUSE, "-c", CONSTRAINTS, *requirements]
    WHEELHOUSE.mkdir(parents=True, exist_ok=True)
    if _run(install, cwd=cwd, env=_clean_env(), check=False).returncode:
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", WHEELHOUSE, "-c", CONSTRAINTS,
              *requirements], cwd=cwd, env=_clean_env())
        for ours in WHEELHOUSE.glob("s3arch-*.whl"):  # the package itself always comes from this run's build
            ours.unlink()
        _run(install, cwd=cwd, env=_clean_env())


def test_wheel_ships_every_module_its_dependencies_and_entry_points(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = _run(["git", "ls-files", "tasks", "plugins/s3arch_airflow"], cwd=ROOT).stdout.split()
    # Every tracked file of the two source folders (data files too, should one appear).
    expected = {("s3arch/" + p.removeprefix("tasks/")) if p.startswith("tasks/")
                else p.removeprefix("plugins/") for p in tracked if (ROOT / p).exists()}
    assert {"s3arch/produce/segments/workers.py", "s3arch_airflow/factory.py", "s3arch_airflow/plugin.py"} <= expected
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
    assert not [n for n in names if n.startswith(("tasks/", "tests/", "dags/", "devtools/", "bench/"))]

    info = next(n for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(info).decode()
    requires = [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    engine = [r for r in requires if "extra ==" not in r]
    for name in ("boto3", "botocore", "awscrt", "zstandard", "isal", "zlib-ng", "PyYAML", "rich"):
        spec = next((r for r in engine if r.lower().startswith(name.lower())), None)
        assert spec and ">=" in spec and "<" in spec and "==" not in spec, (name, spec)  # a range, not a pin
    assert not [r for r in engine if "airflow" in r], "the engine must install without Airflow"
    assert any(r.startswith("apache-airflow") and 'extra == "airflow"' in r and "<4" in r for r in requires)
    assert any(r.startswith("apache-airflow-providers-amazon") and 'extra == "airflow"' in r for r in requires)
    assert any(r.startswith("apache-airflow-providers-openlineage") and 'extra == "lineage"' in r for r in requires)

    entry_points = zipfile.ZipFile(wheel).read(info.replace("METADATA", "entry_points.txt")).decode()
    assert "[airflow.plugins]\ns3arch = s3arch_airflow.plugin:S3ArchPlugin" in entry_points
    assert "[console_scripts]\ns3arch = s3arch.cli:command" in entry_points
    assert "[apache_airflow_provider]\nprovider_info = s3arch_airflow.provider:get_provider_info" in entry_points


def test_installed_cli_archives_verifies_and_extracts_without_the_repo_or_airflow(venv, minio, buckets, s3,
                                                                                 tmp_path):
    src, dst = buckets
    objects = {f"day/{hour:02d}/app-{n}.log": os.urandom(n * 1000 + 17) + b"line\n" * (n * 300)
               for hour in range(3) for n in range(4)}
    objects["day/ünïcode key with spaces.txt"] = b"\xff" * 70_000
    for key, body in objects.items():
        s3.put_object(Bucket=src, Key=key, Body=body)
    env = _clean_env(**minio.env())
    s3arch = venv / "bin" / "s3arch"

    where = _run([venv / "bin" / "python", "-c", textwrap.dedent("""\
        import importlib.util, json, sys, s3arch, s3arch.produce.segments.workers
        print(json.dumps({"s3arch": s3arch.__file__, "path": sys.path,
                          "airflow": importlib.util.find_spec("airflow") is not None}))""")],
                 env=env, cwd=tmp_path)
    found = json.loads(where.stdout)
    assert found["s3arch"].startswith(str(venv)), found
    assert not [p for p in found["path"] if p and Path(p).resolve().is_relative_to(ROOT)], found["path"]
    assert found["airflow"] is False  # the engine alone, as a CLI user installs it

    started = time.monotonic()
    archived = _run([s3arch, "archive", f"s3://{src}/day/", f"s3://{dst}/vault/", "--storage-class", "STANDARD",
                     "--json"], env=env, cwd=tmp_path, check=False)
    assert archived.returncode == 0, archived.stderr
    assert json.loads(archived.stdout.strip().splitlines()[-1])["objects"] == len(objects)
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=dst)["Contents"]}
    archive = f"vault/{src}/day.tar.gz"
    assert {archive, f"vault/{src}/day.manifest.jsonl.gz"} <= keys, keys

    verified = _run([s3arch, "verify", f"s3://{dst}/{archive}"], env=env, cwd=tmp_path, check=False)
    assert verified.returncode == 0, verified.stderr

    out = tmp_path / "restored"
    extracted = _run([s3arch, "extract", f"s3://{dst}/{archive}", "--to-dir", out], env=env, cwd=tmp_path,
                     check=False)
    assert extracted.returncode == 0, extracted.stderr
    # Files are written under the directory by their keys below the archived prefix.
    written = {"day/" + p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert written == objects
    TIMINGS["archive, verify, extract"] = time.monotonic() - started


def _documented_dag_file(jobs: Path) -> str:
    """The DAG file the README gives, as printed but for the jobs file's path."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("```python\n# dags/s3arch.py\n") + len("```python\n"):]
    block = block[:block.index("```")]
    assert block.count("/opt/airflow/dags/archive_jobs.yaml") == 1 and len(block.splitlines()) <= 8, block
    return block.replace("/opt/airflow/dags/archive_jobs.yaml", str(jobs))

JOBS = """\
jobs:
  weblogs:
    source: s3://web-logs/
    prefix_template: "logs/{date:%Y/%m/%d}/"
    destination: s3://web-archive/archive/
    aws_conn_id: aws_default
    schedule: "@daily"
    start_date: 2026-11-01
"""

AIRFLOW_CHECK = """\
import json, logging, sys
from airflow import plugins_manager
from airflow.dag_processing.dagbag import DagBag
from airflow.providers_manager import ProvidersManager
import s3arch_airflow

class Warnings(logging.Handler):  # what Airflow logs at WARNING or above while it finds the providers
    seen = []
    def emit(self, record):
        self.seen.append(record.getMessage())
logging.getLogger().addHandler(Warnings(logging.WARNING))
providers = ProvidersManager()
ours = providers.providers.get("s3arch")  # what `airflow providers list` shows
providers.initialize_providers_triggers()
provider = {"version": ours.version, "package-name": ours.data["package-name"],
            "triggers": sorted(t.trigger_class_name for t in providers.trigger if t.package_name == "s3arch"),
            "plugins": sorted(p.name for p in providers.plugins if p.provider_name == "s3arch"),
            "warnings": Warnings.seen} if ours else None

bag = DagBag(dag_folder=sys.argv[1])
plugins, plugin_errors = plugins_manager._get_plugins()
apps, _ = plugins_manager.get_fastapi_plugins()  # builds the catalog app, as the api-server does
print(json.dumps({
    "import_errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "dags": {dag_id: {"tasks": sorted(dag.task_ids), "fileloc": dag.fileloc} for dag_id, dag in bag.dags.items()},
    "plugins": [{"name": p.name, "source": str(p.source), "module": type(p).__module__} for p in plugins],
    "plugin_errors": {str(k): str(v) for k, v in plugin_errors.items()},
    "apps": [{"name": a.get("name"), "url_prefix": a.get("url_prefix"), "app": type(a.get("app")).__name__}
             for a in apps],
    "package": s3arch_airflow.__file__,
    "provider": provider,
    "path": sys.path,
}))
"""


def test_airflow_loads_a_few_line_dag_file_and_finds_the_plugin_by_its_entry_point(venv, wheel, tmp_path):
    started = time.monotonic()
    _pip_install(venv, [f"s3arch[airflow] @ {wheel.as_uri()}"], cwd=tmp_path)
    TIMINGS["airflow extra install"] = time.monotonic() - started
    # The package's ranges and Airflow's own requirements hold together in the installed set.
    _run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "check"], cwd=tmp_path, env=_clean_env())

    dags, plugins = tmp_path / "dags", tmp_path / "plugins"
    dags.mkdir()
    plugins.mkdir()  # empty: the plugin must come from the installed package alone
    (tmp_path / "jobs.yaml").write_text(JOBS)
    (dags / "s3arch.py").write_text(_documented_dag_file(tmp_path / "jobs.yaml"))
    env = _clean_env(AIRFLOW_HOME=str(tmp_path / "home"), AIRFLOW__CORE__LOAD_EXAMPLES="False",
                     AIRFLOW__CORE__DAGS_FOLDER=str(dags), AIRFLOW__CORE__PLUGINS_FOLDER=str(plugins))
    started = time.monotonic()
    checked = _run([venv / "bin" / "python", "-c", AIRFLOW_CHECK, dags], env=env, cwd=tmp_path)
    found = json.loads(checked.stdout.strip().splitlines()[-1])
    assert found["import_errors"] == {}, "\n".join(found["import_errors"].values())
    assert set(found["dags"]) == {"s3_archive__weblogs", "s3_restore__weblogs", "s3_scrub__weblogs"}
    assert found["dags"]["s3_archive__weblogs"]["fileloc"] == str(dags / "s3arch.py")
    assert {"plan", "archive", "report"} <= set(found["dags"]["s3_archive__weblogs"]["tasks"])
    assert {"plan", "restore", "report"} <= set(found["dags"]["s3_restore__weblogs"]["tasks"])
    ours = [p for p in found["plugins"] if p["name"] == "s3arch"]
    assert len(ours) == 1 and "EntryPoint(name='s3arch'" in ours[0]["source"], found["plugins"]
    assert ours[0]["module"] == "s3arch_airflow.plugin" and found["plugin_errors"] == {}
    # The catalog app the plugin mounts in the api-server is built from the installed package.
    assert [a for a in found["apps"] if a["url_prefix"] == "/s3arch-catalog" and a["app"] == "FastAPI"], found["apps"]
    assert found["package"].startswith(str(venv))
    # ProvidersManager (`airflow providers list`) finds the package as the provider "s3arch", at the
    # wheel's version, without a warning, and takes no plugin from it (the entry point above has it).
    version = wheel.name.split("-")[1]
    assert found["provider"] == {"version": version, "package-name": "s3arch", "triggers": ["s3arch_airflow.triggers"],
                                 "plugins": [], "warnings": []}, found["provider"]
    assert not [p for p in found["path"] if p and Path(p).resolve().is_relative_to(ROOT)]

    # What an operator sees: `airflow plugins` lists it, from the package.
    listed = _run([venv / "bin" / "airflow", "plugins", "--output", "json"], env=env, cwd=tmp_path)
    rows = json.loads(listed.stdout[listed.stdout.index("["):])
    assert [r for r in rows if r["name"] == "s3arch"], rows
    TIMINGS["airflow checks"] = time.monotonic() - started
    print("\n[package] " + ", ".join(f"{k} {v:.1f}s" for k, v in TIMINGS.items()), file=sys.stderr)


def test_local_stacks_register_the_plugin_once_though_plugins_is_their_plugins_folder(tmp_path):
    """devtools' stacks point Airflow's plugins folder at this repo's plugins/, and the repo's
    venv has the package installed (editable) with its entry point: the folder scan must not
    load the package's modules a second time as top-level modules, nor register the plugin
    twice (it did, with an import error in the UI, before plugins/.airflowignore)."""
    from types import SimpleNamespace

    from devtools.airflow_local import airflow_env

    s3 = SimpleNamespace(access_key="a", secret_key="b", endpoint_url="http://127.0.0.1:9", region="us-east-1",
                         env=lambda: {})
    env = airflow_env(tmp_path / "home", s3, tmp_path / "jobs.yaml")
    assert Path(env["AIRFLOW__CORE__PLUGINS_FOLDER"]) == ROOT / "plugins"
    script = ("import json, sys\nfrom airflow import plugins_manager\n"
              "plugins, errors = plugins_manager._get_plugins()\n"
              "print(json.dumps({'plugins': [[p.name, str(p.source)] for p in plugins], 'errors': errors,\n"
              "                  'stray': sorted(m for m in ('operators', 'plugin', 'factory', 'restore') if m in sys.modules)}))")
    found = json.loads(_run([sys.executable, "-c", script], env=env, cwd=tmp_path).stdout.strip().splitlines()[-1])
    ours = [source for name, source in found["plugins"] if name == "s3arch"]
    assert len(ours) == 1 and "EntryPoint(name='s3arch'" in ours[0], found
    assert found["errors"] == {} and found["stray"] == [], found
