"""An extract's directory target: the tar member name (``..``, ``.`` and empty segments
escaped, FORMAT.md), created through directory file descriptors opened with O_NOFOLLOW, so no
symlink inside the target (planted before or during the run) can lead a write outside it;
path components longer than NAME_MAX are shortened as FORMAT.md says. Each file is written to
a temporary name and renamed over its own once its hash matched.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path

from s3arch.core.coordinator import StreamCoordinator
from s3arch.core.errors import DestinationConflict, LocalFileError
from s3arch.core.timestamps import parse_s3_time
from s3arch.format.tarwriter import member_name
from s3arch.io import attributes
from s3arch.restore.sinks import Discard, MadeDirectory, relative_key

NAME_MAX = 255


def safe_component(name: str) -> str:
    """A path component that fits NAME_MAX bytes: longer ones keep their first 200 bytes (cut
    at a character boundary), then ``~`` and 16 hex digits of the whole component's SHA-256."""
    raw = name.encode("utf-8", "surrogateescape")
    if len(raw) <= NAME_MAX:
        return name
    head = raw[:200].decode("utf-8", "ignore")
    return f"{head}~{hashlib.sha256(raw).hexdigest()[:16]}"


@contextmanager
def _local(path: str | Path, doing: str):
    """A local file system error while ``doing`` to ``path`` as the permanent error naming it
    (a full disk, a read-only directory); S3's and the network's errors pass through: they arrive
    typed (tasks/io/store.py), and an OSError without an errno is none of the file system's."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None:
            raise
        reason = os.strerror(exc.errno)
        hint = {errno.ENOSPC: "free space there or extract elsewhere; objects written so far are complete "
                              "and a re-run skips them",
                errno.EDQUOT: "free space within the quota or extract elsewhere",
                errno.EFBIG: "the file system (or ulimit -f) does not allow a file this large; extract elsewhere",
                errno.EROFS: "the file system is read-only; extract elsewhere",
                errno.EACCES: "make it writable for this user, or extract elsewhere",
                errno.EPERM: "make it writable for this user, or extract elsewhere"}.get(
                    exc.errno, "check the path, or extract elsewhere")
        raise LocalFileError(f"cannot {doing} {path}: {reason}", hint=hint) from exc


class DirWriter:
    """Objects written into a local directory, never outside it (the module says how)."""

    def __init__(self, root: Path, prefix: str, original_keys: bool, overwrite: bool,
                 metadata_file: Path | None = None):
        with _local(root, "create the directory"):
            root.mkdir(parents=True, exist_ok=True)
        with _local(root, "open the directory"):
            self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        with _local(metadata_file or "", "write the metadata file"):
            self.metadata = open(metadata_file, "w", encoding="utf-8") if metadata_file is not None else None
        self.metadata_path = metadata_file
        self.prefix = prefix
        self.original_keys = original_keys
        self.overwrite = overwrite
        self.conflicts: list[str] = []
        self.target = str(root)
        self.stream = StreamCoordinator(f"the extract to {root}")  # its stop: a cancel, or the reading thread's failure

    def _open_dir(self, parts: list[str]) -> int:
        """Open (creating) the directory ``parts`` under the root, never through a symlink."""
        fd = os.dup(self.root_fd)
        for i, part in enumerate(parts):
            try:
                with _local(os.path.join(self.target, *parts[:i + 1]), "create the directory"):
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
            except BaseException:
                os.close(fd)
                raise
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                os.close(fd)
                raise DestinationConflict(f"refusing to write through {'/'.join(parts)!r} in {self.target}: "
                                          f"it is not a plain directory ({exc.strerror}); a symlink there "
                                          "could lead outside the target", hint="extract into an empty directory") from exc
            os.close(fd)
            fd = child
        return fd

    def begin(self, record: dict):
        name, is_dir = member_name(relative_key(record["key"], self.prefix, self.original_keys), record["size"])
        parts = [safe_component(p) for p in name.rstrip("/").split("/") if p]
        if not parts:
            self.describe(record, ".")
            return None  # the prefix's own folder marker: the root itself
        path = "/".join(parts)
        if is_dir:
            os.close(self._open_dir(parts))
            self.describe(record, path + "/")
            return MadeDirectory()
        dir_fd = self._open_dir(parts[:-1])
        existing = self._existing(dir_fd, parts[-1], record)
        if existing == "same":
            os.close(dir_fd)
            self.describe(record, path)
            return None
        if existing == "different" and not self.overwrite:
            os.close(dir_fd)
            self.conflicts.append(os.path.join(self.target, *parts))
            return Discard()
        try:
            return _LocalFile(dir_fd, os.path.join(self.target, *parts), record, lambda: self.describe(record, path))
        except BaseException:
            os.close(dir_fd)
            raise

    def describe(self, record: dict, path: str) -> None:
        """One line of the metadata file for an object now in the directory at ``path``."""
        if self.metadata is not None:
            with _local(self.metadata_path or "", "write the metadata file"):
                self.metadata.write(json.dumps({"path": path, **attributes.portable(record)}, ensure_ascii=False) + "\n")

    @staticmethod
    def _existing(dir_fd: int, name: str, record: dict) -> str | None:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError:
            return "different"  # a symlink or something else: never read through it
        with os.fdopen(fd, "rb") as f:
            if os.fstat(f.fileno()).st_size != record["size"]:
                return "different"
            digest = hashlib.sha256()
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        return "same" if digest.hexdigest() == record["sha256"] else "different"

    def close(self, failing: bool = False) -> None:
        os.close(self.root_fd)
        if self.metadata is not None:
            with _local(self.metadata_path or "", "write the metadata file"):
                self.metadata.close()


class _LocalFile:
    """Written to a temporary name beside the target, renamed over it once the hash matched."""

    written = True

    def __init__(self, dir_fd: int, path: str, record: dict, written):
        self.dir_fd, self.path, self.record, self.on_written = dir_fd, path, record, written
        self.name = os.path.basename(path)
        self.tmp = f".{self.name[:200]}.s3arch-partial-{os.getpid()}"
        with _local(path, "write"):
            fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        self.file = os.fdopen(fd, "wb")

    def write(self, data: bytes) -> None:
        with _local(self.path, "write"):
            self.file.write(data)

    def finish(self, ok: bool) -> None:
        try:
            with _local(self.path, "write"):
                try:
                    self.file.close()
                except OSError:
                    if ok:
                        raise
                if ok:
                    mtime = parse_s3_time(self.record["last_modified"]).timestamp()
                    os.utime(self.tmp, (mtime, mtime), dir_fd=self.dir_fd, follow_symlinks=False)
                    os.rename(self.tmp, self.name, src_dir_fd=self.dir_fd, dst_dir_fd=self.dir_fd)
                    self.on_written()
        except BaseException:
            ok = False
            raise
        finally:
            if not ok:
                try:
                    os.unlink(self.tmp, dir_fd=self.dir_fd)
                except OSError:
                    pass  # a partial file the next run replaces; the error that matters is raised
            os.close(self.dir_fd)
