"""Durable checkpoints on disk: one file per session, under a name made from its resume key.

The engine decides what is written and when (`ecotone.kernel.snapshotting`); this store only
puts bytes in place, in the engine's worker threads. What it is given is already sealed and
bound to the resume key (`ecotone.kernel.sealing`): a file cut short, altered, copied under
another key's name or written by a server with another key fails the seal and is refused,
never half restored.

Rules kept here:

* A write is atomic: the bytes go to a temporary file in the same directory, are flushed to
  the disk (`fsync`), and replace the session's file in one `rename`; the directory is then
  synced, so after a crash the file holds either the last checkpoint or the one before.
* A file's name is a hash of the resume key (the key itself is the capability to resume: it
  never appears on disk).
* The directory is made if missing, readable by its owner only (mode 700).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

SUFFIX = ".ckpt"


class CheckpointDir:
    """Checkpoints in one directory, shared by the servers that resume each other's sessions.

    Args:
        path: The directory (made, mode 700, if missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _file(self, key: str) -> Path:
        digest = hashlib.sha256(b"ecotone-checkpoint:" + key.encode()).hexdigest()[:40]
        return self.path / f"{digest}{SUFFIX}"

    def write(self, key: str, blob: bytes) -> None:
        """Put `blob` in place as the checkpoint of `key`, atomically."""
        target = self._file(key)
        fd, temporary = tempfile.mkstemp(dir=self.path, prefix=".tmp-", suffix=SUFFIX)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(blob)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        directory = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def read(self, key: str) -> bytes:
        """The checkpoint of `key`.

        Raises:
            FileNotFoundError: There is none.
        """
        return self._file(key).read_bytes()

    def delete(self, key: str) -> None:
        """Remove the checkpoint of `key` (none: nothing to do)."""
        with contextlib.suppress(FileNotFoundError):
            self._file(key).unlink()

    def __len__(self) -> int:
        return sum(1 for _ in self.path.glob(f"*{SUFFIX}"))
