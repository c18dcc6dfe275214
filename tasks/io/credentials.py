"""Credentials for segment worker processes that refresh as the parent's do, never a frozen copy.

The parent's boto3 session may hold credentials no child can rebuild on its own (an Airflow
connection's assumed role, a profile's credential_process, IRSA, an instance profile): so the
parent serves them. Each worker gets one end of a pipe; a thread in the parent answers every
request with the session's credentials as they are now (``get_frozen_credentials``, which lets
botocore refresh them) and their expiry. In the worker they are a botocore
``RefreshableCredentials`` that asks the parent when botocore's own refresh windows say so
(the parent's windows, passed along): the control plane and the CRT plane (whose provider
delegates to botocore's credentials, ``crt._crt_credentials_provider``) sign with the refreshed
keys from then on. Static keys stay static.
"""

from __future__ import annotations

import threading
from datetime import datetime
from multiprocessing.connection import Connection, wait

from botocore.credentials import Credentials, RefreshableCredentials


def _describe(creds) -> dict:
    """``creds`` as they are now (refreshed by botocore if due), with their expiry and refresh
    windows: what a worker needs to refresh when the parent would."""
    frozen = creds.get_frozen_credentials()
    expiry = getattr(creds, "_expiry_time", None) if isinstance(creds, RefreshableCredentials) else None
    return {"access_key": frozen.access_key, "secret_key": frozen.secret_key, "token": frozen.token,
            "expiry_time": expiry.isoformat() if isinstance(expiry, datetime) else None,
            "advisory": getattr(creds, "_advisory_refresh_timeout", None),
            "mandatory": getattr(creds, "_mandatory_refresh_timeout", None)}


class CredentialServer:
    """In the parent: one thread answering the workers' pipes with the session's credentials."""

    def __init__(self, session, context) -> None:
        self._creds = session.get_credentials()
        self._context = context
        self._ends: list[Connection] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def first(self) -> dict | None:
        """The credentials a worker starts with (None: the worker finds none, as the parent)."""
        return _describe(self._creds) if self._creds is not None else None

    def connect(self):
        """A pipe end for one worker (passed to it at its start); None for static keys."""
        if self._creds is None or type(self._creds) is Credentials:
            return None
        mine, theirs = self._context.Pipe(duplex=True)
        with self._lock:
            self._ends.append(mine)
            if self._thread is None:
                self._thread = threading.Thread(target=self._serve, name="s3arch-credentials", daemon=True)
                self._thread.start()
        return theirs

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        with self._lock:
            for end in self._ends:
                end.close()
            self._ends = []

    def _serve(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                ends = list(self._ends)
            for ready in wait(ends, timeout=0.2) if ends else ():
                end: Connection = ready  # type: ignore[assignment]  # wait() returns what it was given
                try:
                    end.recv()
                    end.send(self.answer())
                except (EOFError, OSError):  # that worker is gone
                    with self._lock:
                        if end in self._ends:
                            self._ends.remove(end)
                    end.close()
            if not ends:
                self._stop.wait(0.2)

    def answer(self) -> dict:
        try:
            return _describe(self._creds)
        except Exception as exc:  # noqa: BLE001 - the worker raises it where it signs
            return {"error": f"refreshing credentials in the parent process failed: {exc}"}


class ParentCredentials(RefreshableCredentials):
    """In a worker: credentials refreshed from the parent over ``pipe``, on botocore's schedule."""

    def __init__(self, pipe, first: dict):
        from dateutil.parser import parse

        self._pipe = pipe
        self._ask_lock = threading.Lock()
        super().__init__(first["access_key"], first["secret_key"], first["token"], parse(first["expiry_time"]),
                         refresh_using=self._ask, method="s3arch-parent-process",
                         advisory_timeout=first.get("advisory"), mandatory_timeout=first.get("mandatory"))

    def _ask(self) -> dict:
        with self._ask_lock:
            self._pipe.send("credentials")
            answer = self._pipe.recv()
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer


def worker_session(first: dict | None, pipe, region: str | None):
    """A boto3 session for a worker: the parent's credentials, refreshed through ``pipe``."""
    import boto3
    import botocore.session
    from botocore.credentials import CredentialProvider, CredentialResolver

    if first is None:
        return boto3.Session(region_name=region)
    if pipe is None or first.get("expiry_time") is None:
        creds = Credentials(first["access_key"], first["secret_key"], first["token"])
    else:
        creds = ParentCredentials(pipe, first)

    class FromParent(CredentialProvider):
        METHOD = "s3arch-parent-process"

        def load(self):
            return creds

    core = botocore.session.Session()
    core.register_component("credential_provider", CredentialResolver([FromParent()]))
    return boto3.Session(botocore_session=core, region_name=region)
