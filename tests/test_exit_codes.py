"""Exit codes say whether running again can help (issue 29, item 5): `restore --wait` that
times out while S3 still restores is retryable (3: the restore goes on, run it again); an
endpoint that ignores Object Lock is permanent (2: a retry would be ignored the same way);
Ctrl-C is 130. Pure logic: the S3 answers are stubs of the HEADs each path reads."""

from __future__ import annotations

import pytest


class Head:
    def __init__(self, **head):
        self.head = head

    def head_object(self, **kwargs):
        return self.head


def test_restore_wait_timing_out_is_retryable_and_says_to_run_again():
    from s3arch.core.errors import ArchivedObjectNotReadable, RestoreNotFinished
    from s3arch.io.store import Store
    from s3arch.restore.glacier import wait_restored

    ongoing = Store(Head(StorageClass="GLACIER", Restore='ongoing-request="true"'))
    with pytest.raises(RestoreNotFinished) as raised:
        wait_restored(ongoing, "vault", "a/b.tar.gz", timeout=0, interval=0)
    error = raised.value
    assert error.retryable and error.exit_code == 3 and isinstance(error, ArchivedObjectNotReadable)
    assert "run the same command again" in str(error)
    # Never requested is not "wait longer": that stays permanent, with the command that helps.
    with pytest.raises(ArchivedObjectNotReadable) as never:
        wait_restored(Store(Head(StorageClass="GLACIER")), "vault", "a/b.tar.gz", timeout=0, interval=0)
    assert never.value.exit_code == 2 and "s3arch restore" in str(never.value)


def test_a_lock_the_head_does_not_show_is_a_permanent_error_naming_the_permission():
    from datetime import datetime, timezone

    from s3arch.core.errors import LockNotApplied
    from s3arch.io.retention import check_applied
    from s3arch.io.store import Store

    wanted = {"ObjectLockMode": "COMPLIANCE", "ObjectLockRetainUntilDate": datetime(2030, 1, 1, tzinfo=timezone.utc)}
    with pytest.raises(LockNotApplied) as raised:
        check_applied(Store(Head(ContentLength=1)), "vault", "a/b.tar.gz", wanted)
    assert not raised.value.retryable and raised.value.exit_code == 2
    message = str(raised.value)
    assert "ignored" in message and "s3:GetObjectRetention" in message and "nothing was committed" in message
    locked = Head(ObjectLockMode="COMPLIANCE", ObjectLockRetainUntilDate="2030-01-01T00:00:00+00:00")
    assert check_applied(Store(locked), "vault", "a/b.tar.gz", wanted)["mode"] == "COMPLIANCE"


def test_ctrl_c_exits_130(monkeypatch, capsys):
    import s3arch.cli as cli
    import s3arch.cli.clients

    def interrupted(args):  # Ctrl-C while the command makes its clients, its first step
        raise KeyboardInterrupt

    monkeypatch.setattr(s3arch.cli.clients, "clients_for", interrupted)
    assert cli.main(["verify", "s3://vault/a/b.tar.gz"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_the_readme_lists_every_exit_code_the_cli_returns():
    import re

    from helpers import ROOT

    text = (ROOT / "README.md").read_text()
    codes = re.search(r"Exit codes:(.*?)\n\n", text, flags=re.S)
    assert codes, "the README has no 'Exit codes:' paragraph"
    for code in ("0", "2", "3", "4", "130"):
        assert re.search(rf"\b{code}\b", codes.group(1)), f"exit code {code} is not in the README"
    assert "restore --wait" in codes.group(1)
