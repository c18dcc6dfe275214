"""What an extract writes into, whichever its target: the result it counts into, the
protocol of a target's writer (``Writer``: ``begin`` an object, ``close``) and of the sink it
hands out per object (``Sink``: ``write`` its bytes, ``finish`` once the hash is known), and
the sinks both targets share.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from s3arch.core.coordinator import StreamCoordinator


@dataclass
class ExtractResult:
    archive: str
    target: str
    objects: int = 0
    bytes: int = 0
    skipped_same: int = 0
    conflicts: list[str] = field(default_factory=list)
    gets: int = 0
    bytes_fetched: int = 0  # compressed bytes the ranged GETs asked for

    def to_dict(self) -> dict:
        return asdict(self)


class Sink(Protocol):
    """One object's bytes on their way to the target; ``written`` once it is there."""

    written: bool

    def write(self, data: bytes) -> None: ...

    def finish(self, ok: bool) -> None: ...


class Writer(Protocol):
    """A target (tasks/restore/to_s3.py, to_dir.py): a ``Sink`` per object, or None for one
    that is there already with the same content. ``stream`` is the extract's one stop: its first
    failure, or a cancel from above (tasks/restore/extract.py)."""

    target: str
    conflicts: list[str]
    stream: StreamCoordinator

    def begin(self, record: dict) -> Sink | None: ...

    def close(self, failing: bool = False) -> None: ...


def relative_key(key: str, prefix: str, original_keys: bool) -> str:
    """Where an archived ``key`` goes under the target: relative to the archived prefix's
    folder, or whole with ``original_keys``. A date inside key names (logs/2026-11-21-) stays
    in the restored names, and a pattern's keys are taken from before its first '*'."""
    folder = prefix.split("*", 1)[0]
    folder = folder[:folder.rfind("/") + 1]
    return key if original_keys or not key.startswith(folder) else key[len(folder):]


class Discard:
    """Where the bytes of an object that is not written go (a conflict left alone)."""

    written = False

    def write(self, data: bytes) -> None:
        pass

    def finish(self, ok: bool) -> None:
        pass


class MadeDirectory(Discard):
    written = True
