"""One training run per directory: ``flock`` on ``.charrnn.lock``, which the kernel releases however the
process ends, so a crashed run never blocks the next. The file holds the PID for a competitor's message;
it is never written through a link, and a file there that is not a lock file is refused, never
truncated (docs/files.md)."""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from charrnn.errors import CharrnnError, option
from charrnn.utils.files import reason

LOCK_NAME = ".charrnn.lock"
PID_RECORD_BYTES = 20  # the PID, space-padded, and a newline
LARGEST_LOCK_BYTES = 64  # anything larger at the lock's name is not a charrnn lock


def _holds_a_lock_record(fd: int, size: int) -> bool:
    """Whether the open file is empty or holds what a run lock writes: a process id and a newline."""
    if size == 0:
        return True
    if size > LARGEST_LOCK_BYTES:
        return False
    record = os.pread(fd, size, 0)
    fields = record.split()
    return record.endswith(b"\n") and len(fields) == 1 and fields[0].isdigit()


class RunLock:
    """Hold ``out_dir/.charrnn.lock`` for the life of a ``with`` block."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / LOCK_NAME
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        while True:
            try:
                # O_NOFOLLOW: a link planted at the lock's name is refused, never followed into a file
                fd = os.open(self.path, os.O_CREAT | os.O_RDWR | os.O_NOFOLLOW, 0o666)
            except OSError as exc:
                raise CharrnnError(f"cannot create the run lock {self.path}: {reason(exc)}") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, PID_RECORD_BYTES, 0).decode("ascii", "replace").strip()
                os.close(fd)
                who = f" (PID {holder})" if holder.isdigit() else ""
                raise CharrnnError(
                    f"another training{who} is writing to {self.path.parent} and holds its lock {self.path}; "
                    f"wait for it or choose another {option('out_dir')}"
                ) from None
            # The holder before us may have removed the file while we waited to lock it: a lock
            # on that removed file guards nothing, so start again on the file now at the path.
            try:
                same_file = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same_file = False
            if same_file:
                break
            os.close(fd)
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or not _holds_a_lock_record(fd, info.st_size):
            os.close(fd)
            raise CharrnnError(f"{self.path} is not a charrnn run lock (another file, or a link to one, has "
                               f"its name); move it away or choose another {option('out_dir')}")
        try:
            os.pwrite(fd, f"{os.getpid():<{PID_RECORD_BYTES - 1}}\n".encode("ascii"), 0)
        except OSError as exc:
            os.close(fd)
            raise CharrnnError(f"cannot write the run lock {self.path}: {reason(exc)}") from None
        self._fd = fd
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is None:
            return
        # Removed while still locked, so no competitor can lock the file after it is gone. A lock
        # file that cannot be removed is harmless: the next run takes it over.
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass
        os.close(self._fd)
        self._fd = None
