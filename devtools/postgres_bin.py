"""Where PostgreSQL's server programs (``initdb``, ``postgres``) are, whatever its major version.

Debian keeps them out of PATH, under ``/usr/lib/postgresql/MAJOR/bin`` (15 on Debian 12, 16
or 17 elsewhere). The first directory that holds both wins:

1. ``S3ARCH_PG_BIN``, when set (then only it: a wrong override is an error, not a fallback);
2. ``pg_config --bindir`` (the postgresql-common wrapper on Debian, the server's own elsewhere);
3. the newest ``/usr/lib/postgresql/*/bin``;
4. the directory of ``postgres`` on PATH (Fedora, Homebrew, a source build).

Standard library only: ``.ci/run`` asks it before the venv exists
(``python3.11 -m devtools.postgres_bin`` prints the directory, or exits 1).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

TOOLS = ("initdb", "postgres")


def _has_tools(directory: Path) -> bool:
    return all(os.access(directory / tool, os.X_OK) for tool in TOOLS)


def _major(directory: Path) -> tuple[int, ...]:
    """``/usr/lib/postgresql/15/bin`` -> (15,); ``9.6`` -> (9, 6); unknown names sort first."""
    try:
        return tuple(int(part) for part in directory.parent.name.split("."))
    except ValueError:
        return ()


DEBIAN_DIR = Path("/usr/lib/postgresql")


def candidates(debian_dir: Path = DEBIAN_DIR) -> list[Path]:
    """The directories looked at, in order (without S3ARCH_PG_BIN)."""
    found: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        try:
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=10)
            if out.returncode == 0 and out.stdout.strip():
                found.append(Path(out.stdout.strip()))
        except (OSError, subprocess.TimeoutExpired):
            pass
    found += sorted(debian_dir.glob("*/bin"), key=_major, reverse=True)
    postgres = shutil.which("postgres")
    if postgres:
        found.append(Path(postgres).resolve().parent)
    return found


def find_pg_bin(debian_dir: Path = DEBIAN_DIR) -> Path | None:
    """The directory of ``initdb`` and ``postgres``, or None when PostgreSQL is not installed
    (or S3ARCH_PG_BIN names a directory without them)."""
    override = os.environ.get("S3ARCH_PG_BIN")
    if override:
        return Path(override) if _has_tools(Path(override)) else None
    return next((d for d in candidates(debian_dir) if _has_tools(d)), None)


if __name__ == "__main__":
    pg_bin = find_pg_bin()
    if pg_bin is None:
        sys.exit(1)
    print(pg_bin)
