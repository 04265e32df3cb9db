"""One training run per directory: an operating-system lock on ``.charrnn.lock``.

Two processes writing the same checkpoints would overwrite each other's work. The
lock is ``flock`` on the lock file, held for the life of the run: the kernel
grants it to one process at a time and releases it when that process ends, however
it ends, so a crashed run never blocks the next one and a recycled PID means
nothing. The file also holds the holder's PID, for the message a competitor sees.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from charrnn.errors import CharrnnError, escape
from charrnn.utils.files import reason

LOCK_NAME = ".charrnn.lock"


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
                holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                os.close(fd)
                who = f" (PID {holder})" if holder.isdigit() else ""
                raise CharrnnError(
                    f"another training{who} is writing to {escape(str(self.path.parent))} and holds its lock "
                    f"{escape(str(self.path))}; wait for it or choose another {{out_dir}}", names_options=True
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
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._fd is None:
            return
        # Removed while still locked, so no competitor can lock the file after it is gone.
        self.path.unlink(missing_ok=True)
        os.close(self._fd)
        self._fd = None
