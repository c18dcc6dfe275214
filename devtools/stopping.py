"""Stopping what the local stacks started, whatever signal arrives and however often.

`make airflow`, `make airflow-celery` and `make demo` start servers in process groups of
their own (so a Ctrl-C in the terminal reaches only the Python process that owns them, which
stops them in order). Three rules make that stop complete:

- **The first SIGINT, SIGTERM or SIGHUP starts the stop; later ones are ignored.** A process
  manager, `timeout` or a CI runner sends SIGTERM to the whole process group, and `make`,
  which is in that group, sends its child a second SIGTERM: were that second signal to raise
  inside the stop, it would abandon the servers not yet stopped (9 processes were left so).
  ``stop_on_signals`` installs the handlers; ``stopping`` marks a stop that began for another
  reason (an error, a process that exited) as uninterruptible too.
- **A process is recorded the moment it exists.** ``spawn`` starts it with signals deferred
  (a signal arriving inside ``Popen`` would lose the child's PID) and records it, so
  ``stop_all_started`` finds it whatever was interrupted half-way.
- **Every process is stopped by PID, with its descendants.** ``stop_processes`` sends the
  polite signal to each process group and to every descendant it finds (Airflow runs task
  processes in process groups of their own), waits up to a grace period, then SIGKILLs what
  is left, the descendants included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class _State:
    stopping = False  # a stop has begun: every further signal is ignored
    deferring = 0  # inside ``signals_deferred``: a signal is remembered, acted on after
    pending: int | None = None


_state = _State()
_started: list[subprocess.Popen] = []


def _on_signal(signum, frame) -> None:
    if _state.stopping:
        return
    if _state.deferring:
        _state.pending = signum
        return
    _state.stopping = True
    raise KeyboardInterrupt  # unwinds to the caller's ``finally``, which stops everything


def stop_on_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP all stop as Ctrl-C does (KeyboardInterrupt, so the
    caller's ``finally`` runs), once: a signal that arrives during the stop is ignored."""
    for signum in SIGNALS:
        signal.signal(signum, _on_signal)


def stopping() -> None:
    """The stop has begun (call it first in the ``finally`` that stops): from here on the
    signals are ignored, whichever reason started the stop, until the process has exited
    (a Python handler would be reset to the default, fatal, action while Python exits)."""
    _state.stopping = True
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


@contextmanager
def signals_deferred():
    """Hold back a signal's KeyboardInterrupt until the block is done (the block must be short)."""
    _state.deferring += 1
    try:
        yield
    finally:
        _state.deferring -= 1
    if not _state.deferring and _state.pending is not None and not _state.stopping:
        _state.pending = None
        _state.stopping = True
        raise KeyboardInterrupt


def spawn(argv: list[str], **popen_kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a new session (a process group of its own, out of reach of the
    terminal's and the caller's group signals), recorded for ``stop_all_started``."""
    if _state.stopping:  # it would inherit the ignored signals, and nothing may start now
        raise RuntimeError(f"not starting {argv[0]}: stopping")
    with signals_deferred():
        process = subprocess.Popen(argv, start_new_session=True, **popen_kwargs)
        _started.append(process)
    return process


def descendants(pid: int) -> list:
    """The processes below ``pid`` (psutil.Process objects, which notice PID reuse)."""
    import psutil

    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def _signal_each(processes: Iterable, signum: int) -> None:
    import psutil

    for process in processes:
        try:
            process.send_signal(signum)  # psutil refuses a PID that was reused meanwhile
        except psutil.Error:
            pass


def _alive(processes: Iterable) -> list:
    import psutil

    alive = []
    for process in processes:
        try:
            if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                alive.append(process)
        except psutil.Error:
            pass
    return alive


def _wait_gone(processes: list, until: float) -> list:
    """Wait until none of ``processes`` (psutil) runs or ``until`` (monotonic); the rest."""
    while True:
        alive = _alive(processes)
        if not alive or time.monotonic() >= until:
            return alive
        time.sleep(0.1)


def stop_processes(processes: Iterable[subprocess.Popen], grace: float = 20.0,
                   first: int = signal.SIGTERM, graces: dict[int, float] | None = None) -> None:
    """Stop each process, its process group and every descendant: ``first`` to each group
    and descendant, SIGKILL to whatever is left after ``grace`` seconds (``graces``: a
    shorter or longer one by PID). Never raises for a process that is already gone."""
    running = [p for p in processes if p is not None and p.poll() is None]
    tree = [child for p in running for child in descendants(p.pid)]
    for process in running:
        _signal_group(process.pid, first)
    _signal_each(tree, first)
    start = time.monotonic()
    deadlines = {p.pid: start + (graces or {}).get(p.pid, grace) for p in running}
    for process in sorted(running, key=lambda p: deadlines[p.pid]):
        try:
            process.wait(timeout=max(0.05, deadlines[process.pid] - time.monotonic()))
        except subprocess.TimeoutExpired:
            # Still running, so its PID is still its group's: SIGKILL the group, and the
            # descendants it started meanwhile.
            tree += [c for c in descendants(process.pid) if c not in tree]
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
    _signal_each(_wait_gone(tree, max([start + grace, *deadlines.values()])), signal.SIGKILL)
    _wait_gone(tree, time.monotonic() + 5)


def stop_all_started(grace: float = 10.0) -> None:
    """Stop every process ``spawn`` started that is still running (after the orderly stops,
    this finds what an interrupted start left)."""
    stop_processes([p for p in _started if p.poll() is None], grace=grace)
    _started[:] = [p for p in _started if p.poll() is None]


__all__ = ["SIGNALS", "descendants", "signals_deferred", "spawn", "stop_all_started", "stop_on_signals",
           "stop_processes", "stopping"]
