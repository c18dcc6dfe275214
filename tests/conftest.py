"""Session-wide real S3 servers on loopback. A server that cannot start fails the suite."""

from __future__ import annotations

import os
import re
import sys
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "plugins"))  # as Airflow puts it, for tests of the operators themselves

from devtools.servers import ServerStartError, scratch_root, start_minio, start_moto  # noqa: E402

# tmp_path on tmpfs where there is room (pytest's own setting for its temporary root): the
# trees tests write are deleted there in a moment (pytest deletes old runs' at exit), where
# this machine's ext4 took 86 s for one test's 120,000 files.
if "PYTEST_DEBUG_TEMPROOT" not in os.environ and (_root := scratch_root()):
    os.environ["PYTEST_DEBUG_TEMPROOT"] = _root


def _start(starter, name):
    try:
        return starter()
    except ServerStartError as exc:
        pytest.fail(f"{name} could not start, so the suite cannot prove anything: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def minio():
    server = _start(start_minio, "MinIO")
    print(f"\n[servers] MinIO pid {server.pid} at {server.endpoint_url}", file=sys.stderr)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_server():
    server = _start(start_moto, "moto server")
    print(f"\n[servers] moto server pid {server.pid} at {server.endpoint_url}", file=sys.stderr)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def airflow_e2e_stack(minio, tmp_path_factory):
    """One real Airflow (api-server, scheduler, dag-processor, triggerer on SQLite) for the
    end-to-end modules: started once (test_airflow_e2e.shared_stack), stopped right after the
    last test that uses it (``pytest_runtest_teardown`` below), so it does not idle under the
    rest of the suite."""
    from test_airflow_e2e import shared_stack

    yield from shared_stack(minio, tmp_path_factory)


def pytest_runtest_teardown(item, nextitem):
    if "airflow_e2e_stack" not in item.fixturenames:
        return
    items = item.session.items  # the next test may not use the stack while a later one does
    if any("airflow_e2e_stack" in later.fixturenames for later in items[items.index(item) + 1:]):
        return
    stack = getattr(item, "funcargs", {}).get("airflow_e2e_stack")
    if stack is not None:
        stack[0].shutdown()


@pytest.fixture
def start_proxy():
    """Starts a fault-injecting proxy (tests/faultproxy.py) in front of an S3 endpoint:
    ``start_proxy(endpoint_url, **options)``; every proxy started is stopped after the test,
    which releases the requests it still holds."""
    from faultproxy import FaultProxy

    started: list[FaultProxy] = []

    def start(upstream: str, **options) -> FaultProxy:
        started.append(FaultProxy(upstream, **options))
        return started[-1]

    yield start
    for proxy in started:
        proxy.stop()


@pytest.fixture
def proxy(minio, start_proxy, request):
    """A fault-injecting proxy in front of MinIO. Its random faults draw from the seed a module
    sets as ``PROXY_SEED`` (1 if it sets none), so a module's faults fall the same way each run."""
    return start_proxy(minio.endpoint_url, seed=getattr(request.module, "PROXY_SEED", 1))


@pytest.fixture
def s3(minio):
    return minio.client(max_pool_connections=64)


@pytest.fixture
def buckets(s3):
    """A fresh source and destination bucket per test."""
    suffix = uuid.uuid4().hex[:10]
    src, dst = f"src-{suffix}", f"dst-{suffix}"
    s3.create_bucket(Bucket=src)
    s3.create_bucket(Bucket=dst)
    return src, dst


@pytest.fixture
def day(s3, buckets):
    """1,500 small logs under ``day/`` of the source bucket: {key: body}."""
    from helpers import seed

    objects = {f"day/{i:04d}.log": (b"entry %d\n" % i) * (i % 40 + 1) for i in range(1500)}
    seed(s3, buckets[0], objects)
    return objects


@pytest.fixture
def clients(minio):
    from helpers import engine_clients

    return engine_clients(minio)


@pytest.fixture
def cli_env(minio):
    from helpers import cli_env_for

    return cli_env_for(minio)


class ReliabilityLog:
    """Faults the tests injected and what came of them, as the list of docs/appendix/FAULTS.md
    (between its table markers; docs/RELIABILITY.md links to it). A run that covered every test
    that records here and passed writes the full table, doses included, to
    ``.cache/reliability/fault-table.md`` (``make test`` leaves the tree clean); ``make
    reliability`` runs those tests and also rewrites the doc's list
    (S3ARCH_WRITE_RELIABILITY_DOC=1)."""

    BEGIN, END = "<!-- fault-table:begin -->", "<!-- fault-table:end -->"
    TABLE = ROOT / ".cache" / "reliability" / "fault-table.md"
    DOC = ROOT / "docs" / "appendix" / "FAULTS.md"

    def __init__(self):
        self.rows: list[tuple[str, str, str, str]] = []

    def record(self, fault: str, injected: str, outcome: str) -> None:
        test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0].split("::")[-1]
        self.rows.append((fault, injected, outcome, test))

    def merged(self) -> list[tuple[str, str, str, str]]:
        """One row per test: a parametrized test's cases are merged into one row, and the
        error text an outcome quotes is cut where it names a scratch bucket or path (the
        test's name says what the message must name; the test checks it)."""
        by_test: dict[str, list[tuple[str, str, str]]] = {}
        for fault, injected, outcome, test in self.rows:
            by_test.setdefault(test.split("[")[0], []).append((fault, injected, _without_scratch_names(outcome)))
        return [(*(_merged([case[k] for case in cases]) for k in range(3)), test) for test, cases in by_test.items()]

    def render(self) -> str:
        """The doc's list: one line per test, the fault and what came of it."""
        return "\n".join(f"- {fault}: {outcome} (`{test}`)" for fault, _, outcome, test in self.merged())

    def render_table(self) -> str:
        """The full record for ``.cache/reliability/``: also what each test injected."""
        lines = ["| fault | injected | outcome | test |", "|---|---|---|---|"]
        for fault, injected, outcome, test in self.merged():
            lines.append(f"| {fault} | {injected} | {outcome.replace('|', '/')} | `{test}` |")
        return "\n".join(lines)

    def write(self, path: Path) -> None:
        text = path.read_text()
        head, rest = text.split(self.BEGIN, 1)
        _, tail = rest.split(self.END, 1)
        path.write_text(f"{head}{self.BEGIN}\n{self.render()}\n{self.END}{tail}")

    @staticmethod
    def test_files() -> set[Path]:
        """The test files that record faults (``make reliability`` runs the same set)."""
        return {path for path in (ROOT / "tests").glob("test_*.py") if "reliability.record" in path.read_text()}


def _without_scratch_names(outcome: str) -> str:
    """An outcome's clauses, each cut before the quoted message that names a throwaway bucket
    or a temporary path ("exit 3 in 3.9 s: error: read s3://dst-1a2b.../day.tar.gz: ..." is
    "exit 3 in 3.9 s")."""
    clauses = [c.split(": ", 1)[0] if re.search(r"s3://|/dev/shm/|/tmp/", c) else c for c in outcome.split("; ")]
    return "; ".join(clauses)


def _merged(texts: list[str]) -> str:
    """One text for a parametrized test's cases: the words they share before and after, and
    what differs between them as "a / b / c", case by case, or as a range when it is a number."""
    if len(set(texts)) == 1:
        return texts[0]
    words = [text.split(" ") for text in texts]
    shortest = min(len(w) for w in words)
    head = 0
    while head < shortest and len({w[head] for w in words}) == 1:
        head += 1
    tail = 0
    while tail < shortest - head and len({w[-1 - tail] for w in words}) == 1:
        tail += 1
    middles = [" ".join(w[head:len(w) - tail]) for w in words]
    try:
        numbers = sorted(float(m) for m in middles)
        middle = f"{numbers[0]:g}-{numbers[-1]:g}"  # timings of the cases: their range
    except ValueError:
        middle = " / ".join(middles)
    return " ".join(words[0][:head] + [middle] + (words[0][len(words[0]) - tail:] if tail else []))


@pytest.fixture(scope="session")
def reliability(request):
    log = ReliabilityLog()
    yield log
    config = request.session.config
    ran = {Path(a).resolve() for a in config.args}
    complete = not (config.option.keyword or config.option.markexpr or config.option.deselect) and \
        (ran <= {ROOT / "tests"} or ReliabilityLog.test_files() <= ran)
    if log.rows and complete and not request.session.testsfailed:
        ReliabilityLog.TABLE.parent.mkdir(parents=True, exist_ok=True)
        ReliabilityLog.TABLE.write_text(log.render_table() + "\n")
        if os.environ.get("S3ARCH_WRITE_RELIABILITY_DOC") == "1":
            log.write(ReliabilityLog.DOC)
