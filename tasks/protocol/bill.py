"""The bill of a run: the S3 requests it asked for, by operation (boto3's names), and the
CPU-seconds it used, recorded on its ``ArchiveResult`` beside its time; operators multiply them
by prices.

``RunBill`` snapshots, when a run starts, the clients' request counter (``S3Clients.store.sent``:
the control plane's requests and the data plane's, each counted once however often it was
resent: tasks/io/store.py ``Sent``) and the process's CPU (``getrusage``: every thread of this
process, and its child processes once they are reaped); at the end it adds the differences to
the result. What other processes spent is added by the producer (``StreamedArchive.elsewhere``):
the requests a segmented run's worker processes sent (their CPU is already this process's
children's), or what the prepare task and each segment task of an Airflow segmented run spent
(recorded in the plan and in each segment's result, read by the assembler).

The window is the process's: two runs at once in one process, on one set of clients, would
each count the other's requests and CPU. The engine runs a process's prefixes one at a time.
"""

from __future__ import annotations

from s3arch.io.spent import Spent
from s3arch.protocol.result import ArchiveResult

__all__ = ["RunBill"]


class RunBill(Spent):
    """What a run spent from now on (the module says how it is counted)."""

    def close(self, result: ArchiveResult) -> ArchiveResult:
        """``result`` with what the run spent added to its bill (to what other processes spent)."""
        spent = self.so_far()
        result.add_bill(spent["requests"], spent["cpu_s"])
        return result

    def closed(self, produced: dict) -> dict:
        """A segment step's result dict (``archive_segment``) with what this step spent."""
        return {**produced, **self.so_far()}
