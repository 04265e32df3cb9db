"""Writing files so that nothing the user had is lost or half-written (docs/files.md).

Each write goes to a temporary sibling, fsynced and renamed over the target. Files charrnn owns are
replaced whole (:func:`replace_file`); a user's output is written as what it is (:func:`atomic_write`)."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from charrnn.errors import CharrnnError, OptionConflict

Row = TypeVar("Row")  # what a log's reader makes of one of its rows

TEMPORARY_PREFIX = ".charrnn-"
TEMPORARY_GLOB = f"{TEMPORARY_PREFIX}*.tmp"


def current_umask() -> int:
    """The process's umask, read without changing it where the system allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# What to do about an error whose own words do not say it, after them.
ADVICE = {errno.EFBIG: "the shell's file-size limit stops it (ulimit -f): raise it and run it again"}


def reason(exc: OSError) -> str:
    """An OSError in the few words a user needs (``No space left on device``), plus :data:`ADVICE`."""
    said = exc.strerror or str(exc)
    return f"{said} ({ADVICE[exc.errno]})" if exc.errno in ADVICE else said


class NotRegularFile(OSError):
    """A FIFO, device, socket or directory where charrnn reads a file it keeps."""


@contextmanager
def open_regular(path: Path) -> Iterator[BinaryIO]:
    """Open ``path`` for reading if it is a regular file (links followed), else raise
    :class:`NotRegularFile`. A FIFO is opened without waiting, so it is refused rather than hanging."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def file_sha256(path: Path) -> str:
    """The SHA-256 of regular file ``path``, read in blocks."""
    with open_regular(path) as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_regular(path: Path) -> bytes:
    """The bytes of regular file ``path`` (see :func:`open_regular`)."""
    with open_regular(path) as handle:
        return handle.read()


def stat_or_none(path: Path, failing: str) -> os.stat_result | None:
    """``os.stat(path)``, None where nothing exists; another failure is ``failing: <reason>``."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CharrnnError(f"{failing}: {reason(exc)}") from None


def resolve_destination(path: Path) -> Path:
    """The file a write to ``path`` should change: symbolic links followed, even dangling ones; a loop of
    links is a :class:`CharrnnError`."""
    path = Path(path)
    if not path.is_symlink():
        return path
    resolved = real_path(path)
    if resolved.is_symlink():  # realpath gives up on a loop and returns one of its links
        raise CharrnnError(f"cannot write {path}: {os.strerror(errno.ELOOP)}")
    return resolved


def temporary_sibling(path: Path) -> str:
    """Create an empty temporary file beside ``path`` and return its name."""
    fd, name = tempfile.mkstemp(prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-{path.name}.", suffix=".tmp",
                                dir=path.parent)
    os.close(fd)
    return name


@contextmanager
def replacing(path: Path, failure: Callable[[OSError], str],
              error: type[CharrnnError] = CharrnnError) -> Iterator[str]:
    """Yield the name of an empty temporary sibling of regular file ``path``; when the block succeeds,
    give it ``path``'s mode (or the umask's), fsync it and rename it over ``path``. On failure the
    temporary is removed and ``path`` left as it was; an ``OSError`` becomes ``error(failure(exc))``."""
    tmp_name = None
    try:
        tmp_name = temporary_sibling(path)
        yield tmp_name
        try:
            mode = stat.S_IMODE(os.stat(path).st_mode)
        except FileNotFoundError:
            mode = 0o666 & ~current_umask()
        os.chmod(tmp_name, mode)
        with open(tmp_name, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
        tmp_name = None
        fsync_directory(Path(path).parent)
    except BaseException as exc:
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise error(failure(exc)) from None
        raise


def fsync_directory(directory: Path) -> None:
    """Flush ``directory``'s entries, so a rename in it survives a power cut."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _failure_message(given: Path) -> Callable[[OSError], str]:
    return lambda exc: f"could not write {given}: {reason(exc)}; any previous {given.name} is intact"


def replace_file(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Replace ``path`` whole, whatever is at that name: a link there is replaced, not what it led to.
    A directory is refused; a failure is a :class:`CharrnnError` that leaves the previous file intact."""
    given = Path(path)
    if given.is_dir() and not given.is_symlink():
        raise CharrnnError(f"could not write {given}: it is a directory")
    with replacing(given, _failure_message(given)) as tmp_name:
        with open(tmp_name, "wb") as handle:
            write(handle)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write a user's output ``path`` as what it is: a symbolic link is followed, a file with hard links
    replaced under this name, a device or FIFO written through, a directory refused. A failure is a
    :class:`CharrnnError` that leaves what was there before."""
    given = Path(path)
    target = resolve_destination(given)
    failure = _failure_message(given)
    info = stat_or_none(target, f"could not write {given}")
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise CharrnnError(f"could not write {given}: it is a directory")
    if info is not None and not stat.S_ISREG(info.st_mode):
        _write_through(given, target, write)
        return
    with replacing(target, failure) as tmp_name:
        with open(tmp_name, "wb") as handle:
            write(handle)


def _write_through(given: Path, target: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write straight into a device node, FIFO or socket, as ``>`` in a shell would."""
    try:
        with open(target, "wb") as handle:
            write(handle)
    except OSError as exc:
        raise CharrnnError(f"could not write {given}: {reason(exc)}") from None


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def json_text(value: Any, **options: Any) -> str:
    """``value`` as JSON that every parser accepts: an infinite or NaN number becomes ``null``."""

    def finite(item: Any) -> Any:
        if isinstance(item, float) and not math.isfinite(item):
            return None
        if isinstance(item, dict):
            return {key: finite(inner) for key, inner in item.items()}
        if isinstance(item, list | tuple):
            return [finite(inner) for inner in item]
        return item

    return json.dumps(finite(value), allow_nan=False, **options)


def log_lines(text: str) -> list[str]:
    """The rows of a JSON-lines log: split at line feeds only. A row's JSON may hold characters that
    ``str.splitlines`` would also split at (U+2028, U+0085, a form feed) inside its strings."""
    return text.split("\n")


def read_log(path: Path, parse: Callable[[str], Row]) -> list[Row]:
    """Each non-blank row of JSON-lines log ``path`` through ``parse``; an unreadable log, or a row that
    ``parse`` refuses with a ValueError (saying why), is a :class:`CharrnnError` naming it."""
    try:
        data = read_regular(path)
        text = data.decode("utf-8-sig")  # a byte-order mark is not part of the first row
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise CharrnnError(f"{path} line {line} is not UTF-8 text (invalid byte at offset {exc.start}); "
                           f"remove that line to read the others") from None
    except OSError as exc:
        raise CharrnnError(f"cannot read {path}: {reason(exc)}") from None
    rows = []
    for number, line in enumerate(log_lines(text), start=1):
        if not line.strip():
            continue
        try:
            rows.append(parse(line))
        except ValueError as exc:
            separator = "" if str(exc).startswith(":") else " "
            raise CharrnnError(f"{path} line {number}{separator}{exc}; remove that line to read the "
                               f"others") from None
    return rows


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The JSON object in UTF-8 regular file ``path``; None when it is missing, unreadable or not an
    object."""
    try:
        value = parse_json(read_regular(path).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def parse_json(text: str | bytes) -> Any:
    """``text`` parsed as JSON; anything that is not JSON a reader can take (a syntax error, nesting
    deeper than the parser's recursion allows) is a ValueError, for the caller to name its file."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("is nested too deeply to read") from None


def replace_text(path: Path, text: str) -> None:
    replace_file(path, lambda handle: handle.write(text.encode("utf-8")))


def write_json(path: Path, value: Any) -> None:
    """A file charrnn owns, as indented JSON, replaced whole (:func:`replace_file`)."""
    replace_text(path, json_text(value, indent=2, sort_keys=True) + "\n")


def append_line(path: Path, line: str) -> None:
    """Add one line to a text file charrnn owns: the file is replaced whole, never half-appended."""
    try:
        existing = read_regular(path) if path.exists() else b""
    except OSError as exc:
        raise CharrnnError(f"cannot read {path}: {reason(exc)}") from None
    replace_file(path, lambda handle: handle.write(existing + line.encode("utf-8") + b"\n"))


def _pid_of(temporary: Path) -> int | None:
    digits = temporary.name.removeprefix(TEMPORARY_PREFIX).split("-", 1)[0]
    return int(digits) if digits.isdigit() else None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temporaries(directory: Path) -> None:
    """Delete the temporaries that ended charrnn processes left in ``directory``: only charrnn's own
    names, and only of processes no longer running."""
    for leftover in Path(directory).glob(TEMPORARY_GLOB):
        pid = _pid_of(leftover)
        if pid is None or (pid != os.getpid() and process_alive(pid)):
            continue  # not a name charrnn gives its temporaries (a user's file), or a live process's
        leftover.unlink(missing_ok=True)


def same_file(first: Path, second: Path) -> bool:
    """Whether writing ``first`` would replace ``second``: the same file through any link (same device
    and inode), or, when one does not exist yet, the same resolved path."""
    try:
        return os.path.samefile(first, second)
    except OSError:
        pass
    try:
        return Path(first).resolve() == Path(second).resolve()
    except (OSError, RuntimeError):  # a symbolic link loop: it leads to no file at all
        return os.path.abspath(first) == os.path.abspath(second)


def real_path(path: Path) -> Path:
    """``path`` with every link followed as far as they lead (a loop stops it; ``Path.resolve`` raises)."""
    return Path(os.path.realpath(path))


def within_folder(path: Path, folder: Path) -> bool:
    """Whether ``path`` is ``folder`` or anything in it, through links too."""
    folder, resolved = real_path(folder), real_path(path)
    return resolved == folder or folder in resolved.parents


def folder_in_the_way(path: Path, foreign: Callable[[Path], list[str]], named: str = "") -> bool:
    """Whether a folder stands at ``path`` with something in it, which may give way only where ``foreign``
    names nothing in it that must stay; a file, a link, the current directory or such a folder is refused
    (``named``: the option that gave ``path``)."""
    shown = f"{named} {path}".strip()
    error = OptionConflict if named else CharrnnError
    if os.path.islink(path):
        raise error(f"{shown} is a symbolic link; give the folder itself")
    info = stat_or_none(path, f"could not write {path}")
    if info is not None and not stat.S_ISDIR(info.st_mode):
        raise error(f"{shown} is a file; give a folder (a new one, or an empty one)")
    if info is not None and within_folder(Path.cwd(), path):
        raise error(f"{shown} is the current directory or holds it; give another folder")
    try:
        held = sorted(entry.name for entry in path.iterdir()) if info is not None else []
    except OSError as exc:
        raise CharrnnError(f"cannot read the folder {shown}: {reason(exc)}") from None
    listed = foreign(path) if held else []
    if listed:
        raise error(f"{shown} holds what an export did not write ({', '.join(listed[:3])}"
                    f"{', ...' if len(listed) > 3 else ''}); choose a new or empty folder")
    return bool(held)


def replace_folder(path: Path, files: dict[str, bytes], foreign: Callable[[Path], list[str]]) -> None:
    """Make folder ``path`` hold exactly ``files`` (name → contents), all or nothing: they are written
    and fsynced in a temporary sibling folder that is then renamed into place, with the mode of the folder
    it replaces. What is at ``path`` may give way only if it is an empty folder or ``foreign`` names nothing;
    a failure leaves it as it was, and a stop signal waits until the swap is done."""
    from charrnn.utils.interrupt import signals_deferred

    given = Path(path)
    previous = folder_in_the_way(given, foreign)
    staging = aside = None
    try:
        staging = Path(tempfile.mkdtemp(prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-", dir=given.parent))
        mode = stat_or_none(given, f"could not write {given}")
        os.chmod(staging, stat.S_IMODE(mode.st_mode) if mode is not None else 0o777 & ~current_umask())
        for name, contents in files.items():
            with open(staging / name, "wb") as handle:
                handle.write(contents)
                handle.flush()
                os.fsync(handle.fileno())
        fsync_directory(staging)
        with signals_deferred():
            if previous:  # set aside, never deleted before the new folder stands
                aside = Path(tempfile.mkdtemp(prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-old-",
                                              dir=given.parent))
                os.replace(given, aside)
            os.replace(staging, given)  # over nothing, or an empty folder
            staging = None
            _put_back_or_remove(given, aside)
            aside = None
            fsync_directory(given.parent)
    except OSError as exc:
        raise CharrnnError(f"could not write {given}: {reason(exc)}; what was there is intact") from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        _put_back_or_remove(given, aside)


def _put_back_or_remove(given: Path, aside: Path | None) -> None:
    """The folder set aside goes back if no new one stands at ``given``, else it is removed."""
    if aside is not None and not os.path.lexists(given):
        os.replace(aside, given)
    elif aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
