"""The docs' option tables, made from the option table (tasks/core/options.py).

Each block between ``<!-- options:NAME -->`` and ``<!-- /options:NAME -->`` in a doc is the
table NAME of ``TABLES``; the text around the blocks is the docs' own.

    python -m devtools.option_tables          rewrite the blocks
    python -m devtools.option_tables --check  exit 1 naming each doc whose blocks differ
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from s3arch.core import options
from s3arch.core.options import Option

ROOT = Path(__file__).resolve().parent.parent
DOCS = ("docs/JOBS.md", "README.md")
_BLOCK = re.compile(r"(<!-- options:(?P<name>[\w-]+) -->\n).*?(<!-- /options:(?P=name) -->)", re.S)


def _names(option: Option) -> str:
    if option.job == "param":
        return f"trigger param `{option.name}` / `{option.name}`"
    if option.job is None:
        return f"{option.operator} operator's `{option.name}`"
    return f"`{option.name}`"


def _flags(option: Option) -> str:
    spelled = []
    for command in option.cli:
        if command == "connection":
            spelled.append(f"`{option.flag}` (any command)")
        elif command == "archive":
            spelled.append(f"`{option.flag}`")
        else:
            spelled.append(f"`{command} {option.flag}`")
    return ", ".join(spelled) or "none"


def settings_table() -> str:
    """Each setting's job key / operator option, CLI flag and default (docs/JOBS.md, "Settings"):
    the options a job or an operator takes, but the restore form's fields (its own, docs/RESTORE.md);
    a flag of the CLI alone is in its --help."""
    rows = ["| setting | job key / operator option | CLI flag | default |", "|---|---|---|---|"]
    rows += [f"| {o.label} | {_names(o)} | {_flags(o)} | {o.doc_default} |" for o in options.OPTIONS
             if (o.job or o.operator) and not (o.form and o.operator == "restore")]
    return "\n".join(rows) + "\n"


TABLES: dict[str, Callable[[], str]] = {"settings": settings_table}


def rewritten(text: str) -> str:
    """``text`` with each marked block holding its table as generated now."""
    def table(match: re.Match) -> str:
        name = match.group("name")
        if name not in TABLES:
            raise SystemExit(f"<!-- options:{name} --> names no table; the tables: {', '.join(TABLES)}")
        return match.group(1) + TABLES[name]() + match.group(3)
    return _BLOCK.sub(table, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.option_tables", description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block differs")
    args = parser.parse_args(argv)
    stale = []
    for doc in DOCS:
        path = ROOT / doc
        text = path.read_text()
        if rewritten(text) == text:
            continue
        stale.append(doc)
        if not args.check:
            path.write_text(rewritten(text))
    verb = "differ from the option table (run python -m devtools.option_tables)" if args.check else "rewritten"
    for doc in stale:
        print(f"{doc}: option tables {verb}", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
