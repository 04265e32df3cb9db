"""Fault injection at every file-system mutation (the method of SQLite's crash tests and ALICE).

:class:`Mutations` patches the calls through which a process changes files under one directory, and records
them, or makes the k-th fail with an ``OSError`` (ENOSPC or EIO), or SIGKILLs the process there."""

from __future__ import annotations

import builtins
import errno
import io
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


@dataclass
class Mutations:
    root: Path  # only mutations of paths under this directory are counted
    fail_at: int | None = None  # 1-based index of the mutation to fail (None: only record)
    error: int = errno.ENOSPC  # the errno of the injected failure
    kill: bool = False  # SIGKILL the process at ``fail_at`` instead of raising
    log: list[str] = field(default_factory=list)  # "call path" for each mutation seen
    _fds: set[int] = field(default_factory=set)
    _saved: list[tuple[Any, str, Any]] = field(default_factory=list)

    def _under(self, path: Any) -> bool:
        try:
            return os.path.abspath(os.fsdecode(path)).startswith(str(self.root))
        except TypeError:
            return False

    def _mutation(self, call: str, path: Any) -> None:
        self.log.append(f"{call} {path}")
        if self.fail_at is not None and len(self.log) == self.fail_at:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise OSError(self.error, os.strerror(self.error), str(path))

    def _patch(self, owner: Any, name: str, replacement: Callable[..., Any]) -> None:
        self._saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def __enter__(self) -> Mutations:
        self.root = Path(os.path.abspath(self.root))
        original_open = builtins.open
        os_open = os.open

        def checked_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            writing = any(flag in mode for flag in "wax+")
            if writing and not isinstance(file, int) and self._under(file):
                self._mutation("open", file)
                return Watched(original_open(file, mode, *args, **kwargs), self, file)
            return original_open(file, mode, *args, **kwargs)

        def checked_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if flags & WRITE_FLAGS and self._under(path):
                self._mutation("os.open", path)
                fd = os_open(path, flags, *args, **kwargs)
                self._fds.add(fd)
                return fd
            return os_open(path, flags, *args, **kwargs)

        def watch(name: str, counted: Callable[..., bool]) -> None:
            """``os.name`` is a mutation where ``counted(*its positional arguments)``."""
            original = getattr(os, name)

            def checked(*args: Any, **kwargs: Any) -> Any:
                if args and counted(*args):
                    self._mutation(name, args[0])
                return original(*args, **kwargs)

            self._patch(os, name, checked)

        self._patch(builtins, "open", checked_open)
        self._patch(io, "open", checked_open)
        self._patch(os, "open", checked_os_open)
        for name in ("unlink", "remove", "rmdir", "mkdir", "truncate", "chmod"):
            watch(name, lambda path, *_: self._under(path))
        for name in ("replace", "rename", "link", "symlink"):
            watch(name, lambda *paths: any(self._under(path) for path in paths[:2]))
        for name in ("write", "pwrite", "ftruncate", "posix_fallocate"):
            watch(name, lambda fd, *_: fd in self._fds)
        # fsync of any file or directory under the root, however it was opened
        watch("fsync", lambda fd: fd in self._fds or self._fd_under(fd))
        return self

    def _fd_under(self, fd: int) -> bool:
        try:
            return self._under(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return False

    def __exit__(self, *exc_info: object) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)


class Watched:
    """A file opened for writing under the root: its first ``write`` and its ``close`` (where buffered bytes
    reach the disk) are mutations. The writes between fail as the first would (the file is left incomplete),
    so they are no injection points of their own: torch.save alone makes hundreds."""

    def __init__(self, file: Any, mutations: Mutations, path: Any):
        self._file, self._mutations, self._path = file, mutations, path
        self._written = False

    def write(self, data: Any) -> int:
        if not self._written:
            self._written = True
            self._mutations._mutation("write", self._path)
        return self._file.write(data)

    def close(self) -> None:
        try:
            if self._written and not self._file.closed:
                self._mutations._mutation("close", self._path)
        finally:
            self._file.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._file, name)

    def __enter__(self) -> Watched:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __iter__(self) -> Any:
        return iter(self._file)


def snapshot(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (links not followed), by path relative to it."""
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(Path(root).rglob("*"))
            if path.is_file() and not path.is_symlink()}
