"""Every command line the README, docs/RESTORE.md and docs/CATALOG.md show is accepted by the CLI
as shown, and the trigger forms mark only what is required as required."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from helpers import ROOT


def documented_command_lines() -> list[str]:
    lines = []
    for doc in ("README.md", "docs/RESTORE.md", "docs/CATALOG.md"):
        text = (ROOT / doc).read_text()
        for language, block in re.findall(r"```(\w*)\n(.*?)```", text, flags=re.S):
            if language not in ("", "bash"):
                continue
            lines += [line.split("#")[0].split(" > ")[0].strip() for line in _joined(block)
                      if line.strip().startswith("s3arch ")]
    return lines


def _joined(block: str) -> list[str]:
    """Lines of a usage block, with indented continuation lines joined to their command."""
    out: list[str] = []
    for line in block.splitlines():
        if line.startswith("  ") and out:
            out[-1] += " " + line.split("(default")[0].strip()
        else:
            out.append(line)
    return out


def concrete(line: str) -> list[str]:
    """A usage line with its placeholders filled in: alternatives take their first choice,
    optional groups are included, values get a valid example."""
    line = re.sub(r"\[([^\[\]]*)\]", r"\1", line.replace("[options]", ""))
    line = re.sub(r"([A-Z_]+)(\|[A-Z_]+)+", r"\1", line)
    line = line.replace("$ARCHIVE", "s3://vault/archive/app-logs/logs/2026/11/21.tar.gz")
    line = re.sub(r"s3://[A-Z_]+/[A-Z_/]*\.\.\.[a-z-]+\.\.\.", "s3://vault/a/b.tar.gz", line)
    line = re.sub(r"s3://[A-Z_]+/[A-Z_/.]*", "s3://bucket-a/prefix/", line)
    line = line.replace("gzip|zstd", "gzip").replace("aws:kms --sse-kms-key-id ID", "aws:kms --sse-kms-key-id k")
    words = shlex.split(line)
    return [{"N": "2", "URL": "http://127.0.0.1:9000", "NAME": "default", "KEY": "k", "ACCOUNT": "123456789012"}.get(w, w)
            for w in words]


def test_readme_shows_the_s3arch_commands_it_documents():
    commands = {line.split()[1] for line in documented_command_lines()}
    assert {"archive", "restore", "extract", "cat", "verify", "ls", "delete-sources"} <= commands


@pytest.mark.parametrize("line", documented_command_lines())
def test_documented_command_line_parses(line):
    from s3arch.cli import _parser

    args = concrete(line)[1:]
    try:
        _parser().parse_args(args)
    except SystemExit as exc:
        pytest.fail(f"the docs show `{line}`, which the CLI rejects (as {args}): exit {exc.code}")


@pytest.mark.parametrize("where", ["before", "after"])
def test_connection_flags_work_before_or_after_the_subcommand(where):
    from s3arch.cli import _parser

    flags = ["--endpoint-url", "http://127.0.0.1:9000", "--profile", "p"]
    argv = ["ls", "s3://vault/a/b.tar.gz"]
    args = _parser().parse_args(flags + argv if where == "before" else argv + flags)
    assert args.endpoint_url == "http://127.0.0.1:9000" and args.profile == "p"


@pytest.mark.slow
def test_progress_is_one_live_line_on_a_terminal_and_plain_lines_otherwise(s3, buckets, cli_env):
    """Run the CLI with its stderr on a pseudo-terminal, as a person would, then on a pipe."""
    import os
    import pty
    import subprocess
    import sys

    from helpers import seed

    src, dst = buckets
    seed(s3, src, {f"day/{i:04d}.bin": os.urandom(200_000) for i in range(300)})
    args = [sys.executable, "-m", "s3arch", "archive", f"s3://{src}/day/", f"s3://{dst}/", "--storage-class",
            "STANDARD", "--concurrency", "4", "--memory-budget", "48MiB"]
    leader, follower = pty.openpty()
    proc = subprocess.Popen(args, env=cli_env, cwd=ROOT, stdout=subprocess.PIPE, stderr=follower)
    os.close(follower)
    terminal = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        terminal += chunk
    proc.wait(120)
    os.close(leader)
    assert proc.returncode == 0 and b"archived 300 objects" in proc.stdout.read()
    assert b"\x1b[" in terminal and b"objects" in terminal and b"obj/s" in terminal  # redrawn in place
    piped = subprocess.run(args + ["--overwrite"], env=cli_env, cwd=ROOT, capture_output=True, timeout=120)
    assert piped.returncode == 0 and b"\x1b[" not in piped.stderr


def _flags(command: str) -> set[str]:
    from s3arch.cli import _parser

    sub = next(a for a in _parser()._actions if a.dest == "command").choices[command]
    return {a.dest for a in sub._actions if a.option_strings and a.dest != "help"}


def _parameters(*operators) -> set[str]:
    """The settings the operators take: their parameters and, for an archive step, the keys of
    its ``options``."""
    import inspect

    return {name for op in operators for cls in op.__mro__ if "__init__" in vars(cls)
            for name in inspect.signature(cls.__init__).parameters} | {
        name for op in operators for name in (op.option_names() if hasattr(op, "option_names") else ())}


# Output and connection (Airflow's own there), and `archive --job`'s choice of a job's days.
CLI_ONLY = {"json", "quiet", "endpoint_url", "profile", "job", "jobs_file", "date", "date_to"}


def test_one_name_per_setting_across_cli_job_yaml_and_operators():
    """Issue 29, item 5: each `s3arch archive` / `restore` flag is, with `_` for `-`, the job
    key (or trigger param) and an operator parameter (or key of its ``options``) of the same setting."""
    from s3arch_airflow.factory import archive_params
    from s3arch_airflow.operators import (S3ArchivePrefixOperator, S3ArchiveSegmentOperator, S3AssembleSegmentsOperator,
                                          S3PrepareSegmentsOperator)
    from s3arch_airflow.restore import S3RestoreArchiveOperator

    from s3arch.ops.jobs import job_keys as keys_of_a_job

    job_keys = keys_of_a_job() | set(archive_params())
    archive = _parameters(S3ArchivePrefixOperator, S3PrepareSegmentsOperator, S3ArchiveSegmentOperator,
                          S3AssembleSegmentsOperator)
    cli_only = CLI_ONLY
    for flag in sorted(_flags("archive") - cli_only):
        assert flag in job_keys, f"--{flag.replace('_', '-')} has no job key {flag!r}"
        assert flag in archive or flag == "late_window", f"--{flag.replace('_', '-')} has no operator parameter {flag!r}"
    restore = _parameters(S3RestoreArchiveOperator)
    for flag in ("poll_interval", "wait_timeout", "tier", "days"):
        assert flag in _flags("restore") and flag in restore
    assert "poll_interval" in job_keys and "delete_versions" in _flags("delete-sources")
    # The spellings this replaced are gone from the CLI (the YAML and operators keep them a release).
    assert not {"versions", "interval", "timeout"} & (_flags("delete-sources") | _flags("restore"))


def test_the_segment_operators_are_exported_with_the_others():
    import s3arch_airflow
    from s3arch_airflow import operators

    for name in ("S3ArchivePrefixOperator", "S3PrepareSegmentsOperator", "S3ArchiveSegmentOperator",
                 "S3AssembleSegmentsOperator", "S3RestoreArchiveOperator"):
        assert name in s3arch_airflow.__all__
        assert getattr(s3arch_airflow, name) is getattr(operators, name, None) or name == "S3RestoreArchiveOperator"


def test_deploys_sizing_table_quotes_the_committed_sizing_output():
    """docs/DEPLOY.md's RSS per `processes` is bench/sizing.py's committed output, row for row."""
    import json

    measured = json.loads((ROOT / "bench/results/sizing.json").read_text())
    deploy = (ROOT / "docs/DEPLOY.md").read_text()
    assert measured["when"] in deploy and "bench.sizing" in deploy
    rows = {int(m[0]): m[1:] for m in re.findall(r"^\| (\d+)[^|]*\| (\d+) \| (\d+) MiB \[(\d+)-(\d+)\] \|$", deploy,
                                                    flags=re.M)}
    assert sorted(rows) == [r["processes"] for r in measured["rows"]]
    for r in measured["rows"]:
        lo, hi = r["peak_rss_range_mib"]
        assert rows[r["processes"]] == (str(r["workers_seen"]), f"{r['peak_rss_mib']:.0f}", f"{lo:.0f}", f"{hi:.0f}")
    assert [r["workers_seen"] for r in measured["rows"]] == [0, 2, 4]  # one task, one process by default


def test_every_test_a_doc_cites_exists():
    """A doc that proves a claim by naming a test (`tests/test_x.py`, `test_name`) names one
    that exists, so a renamed or removed test cannot leave the claim without its proof."""
    defined = {name for path in (ROOT / "tests").glob("*.py")
               for name in re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), flags=re.M)}
    for doc in [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "bench/README.md",
                *sorted((ROOT / "docs").rglob("*.md"))]:
        text = doc.read_text()
        for path in re.findall(r"\btests/(test_\w+\.py)", text):
            assert (ROOT / "tests" / path).exists(), f"{doc.name} cites tests/{path}, which does not exist"
        for name in re.findall(r"`(test_\w+)`", text):
            assert name in defined, f"{doc.name} cites `{name}`, which no test defines"


def test_the_readmes_exceptions_to_one_name_per_flag_are_exactly_the_codes():
    """The README names the `archive` flags that are no job key or no S3ArchivePrefixOperator
    parameter (or key of its ``options``); these sets are what the code has, no more and no fewer."""
    from s3arch_airflow.factory import archive_params
    from s3arch_airflow.operators import S3ArchivePrefixOperator

    from s3arch.ops.jobs import job_keys

    flags = _flags("archive")
    cli_only = CLI_ONLY
    trigger_params = flags - cli_only - job_keys()
    assert trigger_params == {"overwrite", "dry_run"} and trigger_params <= set(archive_params())
    assert flags - cli_only - _parameters(S3ArchivePrefixOperator) == {"segments", "late_window"}
    readme = " ".join((ROOT / "README.md").read_text().split())
    for words in ("`--json`, `--quiet`, `--endpoint-url`, `--profile`", "and the `--job` ones",
                  "`--overwrite` and `--dry-run` are the run's trigger params",
                  "`--segments` is a parameter of the segment operators",
                  "`--late-window` is a job key that the DAG's plan applies"):
        assert words in readme, words


def _env_file_written_by(target: str, monkeypatch) -> str:
    """Where `make TARGET` has devtools/airflow_ui.py write env.sh, relative to the repository:
    its main() run with the Makefile's arguments up to the point it settles its home (the
    home's removal is stubbed to record it and stop there), plus the file name it writes."""
    import shutil as real_shutil
    import types

    from devtools import airflow_ui

    recipe = re.search(rf"^{re.escape(target)}:[^\n]*\n\t([^\n]+)", (ROOT / "Makefile").read_text(), flags=re.M)
    argv = recipe.group(1).split("-m devtools.airflow_ui", 1)[1].replace("$(ARGS)", "").split()

    class Settled(Exception):
        pass

    def record(path, **_):
        raise Settled(path)

    monkeypatch.setattr(airflow_ui, "stop_on_signals", lambda: None)
    monkeypatch.setattr(airflow_ui, "shutil", types.SimpleNamespace(**{**vars(real_shutil), "rmtree": record}))
    with pytest.raises(Settled) as settled:
        airflow_ui.main(argv)
    home = Path(settled.value.args[0])
    name = re.search(r'write_env_file\(\w+, home / "([^"]+)"\)', Path(airflow_ui.__file__).read_text()).group(1)
    return str((home / name).relative_to(ROOT))


def test_the_env_file_the_docs_tell_to_source_is_the_one_make_airflow_writes(monkeypatch):
    """CONTRIBUTING.md prints `source .cache/airflow-ui/env.sh` after `make airflow` and names
    `.cache/airflow-celery/env.sh` for `make airflow-celery`: those are the files
    devtools/airflow_ui.py writes for each target, so the printed command cannot drift."""
    written = {target: _env_file_written_by(target, monkeypatch) for target in ("airflow", "airflow-celery")}
    assert written == {"airflow": ".cache/airflow-ui/env.sh", "airflow-celery": ".cache/airflow-celery/env.sh"}, written
    contributing = (ROOT / "CONTRIBUTING.md").read_text()
    sourced = re.findall(r"^source (\S+)$", contributing, flags=re.M)
    assert sourced and set(sourced) == {written["airflow"]}, sourced
    assert f"`{written['airflow-celery']}` for `make airflow-celery`" in " ".join(contributing.split())
    for doc in ("README.md", "CONTRIBUTING.md", "docs/JOBS.md", "docs/DEPLOY.md", "docs/RESTORE.md",
                "docs/CATALOG.md"):
        for path in re.findall(r"\.cache/[\w./-]*env\.sh", (ROOT / doc).read_text()):
            assert path in written.values(), f"{doc} names {path}, which no make target writes"
