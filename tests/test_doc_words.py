"""The user docs stay short and their links hold.

User docs: README.md, CONTRIBUTING.md, docs/*.md and bench/README.md, counted as `wc -w` counts
(whitespace-separated words), together under 15,000. Outside the count, on purpose:
CHANGELOG.md and the generated fault table in docs/appendix/ (``make reliability`` writes it).
Every other Markdown file of the repository must be one or the other, so a new doc is counted.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from conftest import ReliabilityLog

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 15_000
NOT_COUNTED = {"CHANGELOG.md", "docs/appendix/FAULTS.md"}


def user_docs() -> list[str]:
    return ["README.md", "CONTRIBUTING.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")),
            "bench/README.md"]


def words(name: str) -> int:
    return len((ROOT / name).read_text().split())


def test_the_user_docs_stay_under_15000_words():
    counts = {name: words(name) for name in user_docs()}
    total = sum(counts.values())
    listed = ", ".join(f"{name} {count:,}" for name, count in sorted(counts.items(), key=lambda kv: -kv[1]))
    assert total < LIMIT, f"the user docs hold {total:,} words, over {LIMIT:,}: {listed}"


def test_every_markdown_file_is_a_user_doc_or_left_out_on_purpose():
    found = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    found = [name for name in found if (ROOT / name).exists()]
    assert set(found) - set(user_docs()) - NOT_COUNTED == set(), "count these docs, or name why not"
    assert all((ROOT / name).exists() for name in NOT_COUNTED)


def test_the_fault_table_left_out_of_the_count_is_the_one_make_reliability_writes():
    assert ReliabilityLog.DOC == ROOT / "docs/appendix/FAULTS.md"
    text = ReliabilityLog.DOC.read_text()
    assert ReliabilityLog.BEGIN in text and ReliabilityLog.END in text
    assert "(appendix/FAULTS.md)" in (ROOT / "docs/RELIABILITY.md").read_text()


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces `-`."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_every_relative_link_of_the_docs_reaches_its_file_and_heading():
    broken = []
    for name in [*user_docs(), *sorted(NOT_COUNTED)]:
        doc = ROOT / name
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            if not linked.exists():
                broken.append(f"{name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)
