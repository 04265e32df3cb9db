"""One training run per directory: a lock file holding the writer's PID.

Two processes writing the same checkpoints would overwrite each other's work. A
lock left by a process that no longer exists (killed, machine restarted) is stale
and is taken over.
"""

from __future__ import annotations

import os
from pathlib import Path

from charrnn.errors import CharrnnError

LOCK_NAME = ".charrnn.lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunLock:
    """Hold ``out_dir/.charrnn.lock`` for the life of a ``with`` block."""

    def __init__(self, out_dir: Path):
        self.path = Path(out_dir) / LOCK_NAME

    def __enter__(self) -> RunLock:
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and holder != os.getpid() and _alive(holder):
                    raise CharrnnError(
                        f"another training (PID {holder}) is writing to {self.path.parent}; "
                        f"wait for it or choose another --out"
                    ) from None
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as handle:
                handle.write(f"{os.getpid()}\n")
            return self
        raise CharrnnError(f"could not lock {self.path.parent} for training")

    def _holder(self) -> int | None:
        try:
            return int(self.path.read_text().strip())
        except (OSError, ValueError):
            return None

    def __exit__(self, *exc_info: object) -> None:
        if self._holder() == os.getpid():
            self.path.unlink(missing_ok=True)
