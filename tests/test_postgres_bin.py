"""PostgreSQL's server programs are found whatever its major version (devtools/postgres_bin.py),
as .ci/run and the Celery stack look for them."""

from __future__ import annotations

from pathlib import Path

from devtools.postgres_bin import find_pg_bin


def _install(directory: Path, tools=("initdb", "postgres")) -> Path:
    directory.mkdir(parents=True)
    for tool in tools:
        (directory / tool).write_text("#!/bin/sh\n")
        (directory / tool).chmod(0o755)
    return directory


def _pg_config(tmp_path: Path, bindir: str) -> Path:
    path = tmp_path / "path"
    path.mkdir()
    (path / "pg_config").write_text(f"#!/bin/sh\necho {bindir}\n")
    (path / "pg_config").chmod(0o755)
    return path


def test_the_newest_debian_major_version_wins_without_pg_config(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    _install(lib / "9.6" / "bin")
    _install(lib / "15" / "bin")
    newest = _install(lib / "17" / "bin")
    _install(lib / "18" / "bin", tools=("initdb",))  # a client-only or broken install: skipped
    monkeypatch.delenv("S3ARCH_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_pg_bin(lib) == newest


def test_pg_config_comes_first_and_s3arch_pg_bin_overrides_everything(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    _install(lib / "17" / "bin")
    chosen = _install(tmp_path / "pg16" / "bin")
    monkeypatch.delenv("S3ARCH_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(_pg_config(tmp_path, str(chosen))))
    assert find_pg_bin(lib) == chosen
    override = _install(tmp_path / "custom")
    monkeypatch.setenv("S3ARCH_PG_BIN", str(override))
    assert find_pg_bin(lib) == override
    monkeypatch.setenv("S3ARCH_PG_BIN", str(tmp_path / "missing"))
    assert find_pg_bin(lib) is None  # a wrong override is an error, not a silent fallback


def test_nothing_installed_is_none(tmp_path, monkeypatch):
    monkeypatch.delenv("S3ARCH_PG_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert find_pg_bin(tmp_path / "lib") is None
