"""Writing files so that nothing the user had is lost or half-written (docs/files.md).

Each write goes to a temporary sibling, fsynced and renamed over the target. Files charrnn owns are
replaced whole (:func:`replace_file`); a user's output is written as what it is (:func:`atomic_write`)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from charrnn.errors import CharrnnError, OptionConflict, first_line

Row = TypeVar("Row")  # what a log's reader makes of one of its rows

TEMPORARY_PREFIX = ".charrnn-"
TEMPORARY_GLOB = f"{TEMPORARY_PREFIX}*.tmp"


def current_umask() -> int:
    """The process's umask, read without changing it where the system allows."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
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


class FileTooLarge(OSError):
    """A file larger than anything charrnn could need from it: refused before it is read."""


@contextlib.contextmanager
def open_regular(path: Path, dir_fd: int | None = None) -> Iterator[BinaryIO]:
    """Open regular file ``path`` (in ``dir_fd`` if given) to read; else :class:`NotRegularFile`."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK, dir_fd=dir_fd)  # a FIFO: refused, never waited on
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


def read_at_most(handle: BinaryIO, most_bytes: int | None) -> bytes:
    """The rest of regular file ``handle``; :class:`FileTooLarge`, before any read, past ``most_bytes``."""
    if most_bytes is None:
        return handle.read()
    size = os.fstat(handle.fileno()).st_size
    data = b"" if size > most_bytes else handle.read(most_bytes + 1)  # one byte more: it may have grown
    if len(data) > most_bytes or size > most_bytes:
        held = max(size, len(data))
        raise FileTooLarge(f"it holds {held:,} bytes, more than the {most_bytes:,} it can need")
    return data


def read_regular(path: Path, most_bytes: int | None = None) -> bytes:
    """The bytes of regular file ``path``, at most ``most_bytes`` (:func:`read_at_most`)."""
    with open_regular(path) as handle:
        return read_at_most(handle, most_bytes)


# A read of a folder's files that a swap came between starts again on the new folder, up to this many times.
FOLDER_READ_TRIES = 3


@contextlib.contextmanager
def opened_in_folder(folder: Path, names: Sequence[str]) -> Iterator[dict[str, BinaryIO]]:
    """Regular files ``names`` of ``folder``, opened through a descriptor of the folder itself, so an export
    renaming a new folder over the name cannot mix old files with new; an OSError names ``folder/name``."""
    for attempt in range(1, FOLDER_READ_TRIES + 1):
        directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        with contextlib.ExitStack() as stack:
            stack.callback(os.close, directory)
            try:
                handles = {name: stack.enter_context(open_regular(name, directory)) for name in names}
            except OSError as exc:
                # A folder emptied after a swap took its name: the name now holds the new one, whole.
                if isinstance(exc, FileNotFoundError) and attempt < FOLDER_READ_TRIES \
                        and not _still_at(folder, directory):
                    continue
                raise OSError(exc.errno, exc.strerror, str(Path(folder) / exc.filename)) from None
            yield handles
            return


def _still_at(folder: Path, directory: int) -> bool:
    """Whether name ``folder`` still leads to the directory open as ``directory``."""
    try:
        return os.path.samestat(os.stat(folder), os.fstat(directory))
    except OSError:
        return False


def stat_or_none(path: Path, failing: str) -> os.stat_result | None:
    """``os.stat(path)``, None where nothing exists; another failure is ``failing: <reason>``."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise CharrnnError(f"{failing}: {reason(exc)}") from None


@contextlib.contextmanager
def replacing(path: Path, failure: Callable[[OSError], str],
              error: type[CharrnnError] = CharrnnError) -> Iterator[str]:
    """Yield an empty temporary sibling of ``path``, renamed over it (its mode, fsynced) if the block works;
    on failure removed, ``path`` left as it was, and an ``OSError`` becomes ``error(failure(exc))``."""
    tmp_name = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-{path.name}.", suffix=".tmp",
                                        dir=path.parent)
        os.close(fd)
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
    with replacing(given, _failure_message(given)) as tmp_name, open(tmp_name, "wb") as handle:
        write(handle)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write a user's output ``path`` as what it is: a link followed, a file with hard links replaced under
    this name, a device or FIFO written through, a directory refused. A failure leaves what was there."""
    given = Path(path)
    target = real_path(given) if given.is_symlink() else given  # links followed, even dangling ones
    if target.is_symlink():  # realpath gives up on a loop and returns one of its links
        raise CharrnnError(f"cannot write {given}: {os.strerror(errno.ELOOP)}")
    info = stat_or_none(target, f"could not write {given}")
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise CharrnnError(f"could not write {given}: it is a directory")
    if info is not None and not stat.S_ISREG(info.st_mode):  # a device node, FIFO or socket: as ``>`` would
        try:
            with open(target, "wb") as handle:
                write(handle)
        except OSError as exc:
            raise CharrnnError(f"could not write {given}: {reason(exc)}") from None
        return
    with replacing(target, _failure_message(given)) as tmp_name, open(tmp_name, "wb") as handle:
        write(handle)


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


# A row of a run's log is far shorter (a recorded sample of a million characters included): a longer one is
# no row charrnn wrote, refused before it fills memory.
LOG_ROW_MOST_BYTES = 2**26


def read_log(path: Path, parse: Callable[[str], Row]) -> list[Row]:
    """Each non-blank row of JSON-lines log ``path`` through ``parse``, row by row; an unreadable log, a row
    over :data:`LOG_ROW_MOST_BYTES` or one ``parse`` refuses (ValueError) is a CharrnnError naming it."""
    rows, offset = [], 0
    try:
        with open_regular(path) as handle:
            # Split at line feeds only: a row's JSON may hold characters that ``str.splitlines`` would also
            # split at (U+2028, U+0085, a form feed) inside its strings.
            for number, raw in enumerate(iter(lambda: handle.readline(LOG_ROW_MOST_BYTES + 1), b""), 1):
                if len(raw) > LOG_ROW_MOST_BYTES:
                    raise CharrnnError(f"{path} line {number} is longer than any row charrnn writes "
                                       f"({LOG_ROW_MOST_BYTES:,} bytes); remove that line to read the others")
                try:  # a byte-order mark is not part of the first row
                    line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise CharrnnError(f"{path} line {number} is not UTF-8 text (invalid byte at offset "
                                       f"{offset + exc.start}); remove that line to read the "
                                       f"others") from None
                offset += len(raw)
                if not line.strip():
                    continue
                try:
                    rows.append(parse(line.rstrip("\n")))
                except ValueError as exc:
                    separator = "" if str(exc).startswith(":") else " "
                    raise CharrnnError(f"{path} line {number}{separator}{exc}; remove that line to read the "
                                       f"others") from None
    except OSError as exc:
        raise CharrnnError(f"cannot read {path}: {reason(exc)}") from None
    return rows


# A JSON object charrnn keeps (a run's or a model folder's config.json) is a few kilobytes.
JSON_OBJECT_MOST_BYTES = 2**20
# Far deeper than anything charrnn writes; deeper JSON would exhaust the parser's recursion.
JSON_MOST_DEPTH = 64
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_BRACKET = re.compile(r"[][{}]")
_NESTING = {"[": 1, "{": 1, "]": -1, "}": -1}


def read_json_object(path: Path, most_bytes: int = JSON_OBJECT_MOST_BYTES) -> dict[str, Any] | None:
    """The JSON object in UTF-8 regular file ``path``; None if missing, unreadable, too large or no object."""
    return json_object_or_why(path, most_bytes)[0]


def json_object_or_why(path: Path, most_bytes: int = JSON_OBJECT_MOST_BYTES,
                       ) -> tuple[dict[str, Any] | None, str]:
    """:func:`read_json_object`'s object, or None and why, as said of the file ("is missing")."""
    try:
        value = parse_json(read_regular(path, most_bytes).decode("utf-8"))
    except FileNotFoundError:
        return None, "is missing"
    except OSError as exc:
        return None, f"cannot be read ({reason(exc)})"
    except ValueError as exc:  # UnicodeDecodeError is one; parse_json's own say what the file "is"
        said = first_line(exc)
        return None, said if said.startswith(("is ", "holds ")) else f"is not JSON ({said})"
    return (value, "") if isinstance(value, dict) else (None, "is not a JSON object")


def parse_json(text: str | bytes) -> Any:
    """``text`` parsed as JSON; a syntax error or nesting deeper than :data:`JSON_MOST_DEPTH` (measured
    before the parser's recursion meets it) is a ValueError, for the caller to name its file."""
    if isinstance(text, bytes):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    text = text.removeprefix("\ufeff")  # a byte order mark, which JSON's readers may ignore
    if text.count("[") + text.count("{") > JSON_MOST_DEPTH:
        brackets = _JSON_BRACKET.findall(_JSON_STRING.sub("", text))  # those inside strings do not count
        if max(accumulate(map(_NESTING.__getitem__, brackets)), default=0) > JSON_MOST_DEPTH:
            raise ValueError(f"is nested more than {JSON_MOST_DEPTH} levels deep")
    try:
        return json.loads(text)
    except RecursionError:  # a call stack already deep when the parser started
        raise ValueError("is nested too deeply to read") from None
    except ValueError as exc:
        if isinstance(exc, json.JSONDecodeError):
            raise
        raise ValueError("holds a number too long to read") from None  # Python's advice is for programmers


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
        with contextlib.suppress(PermissionError):  # exists, owned by someone else
            os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def remove_stale_temporaries(directory: Path) -> None:
    """Delete the temporaries (by charrnn's names alone) that ended processes left in ``directory``."""
    for leftover in Path(directory).glob(TEMPORARY_GLOB):
        pid = _pid_of(leftover)
        if pid is None or (pid != os.getpid() and process_alive(pid)):
            continue  # not a name charrnn gives its temporaries (a user's file), or a live process's
        leftover.unlink(missing_ok=True)


def same_file(first: Path, second: Path) -> bool:
    """Whether writing ``first`` would replace ``second``: the same file through any link, or path."""
    with contextlib.suppress(OSError):
        return os.path.samefile(first, second)
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
    """Whether a folder with something in it stands at ``path`` (``named``: the option that gave it); a file,
    a link, the current directory, or a folder in which ``foreign`` names what must stay, is refused."""
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
    if held and (listed := foreign(path)):
        raise error(f"{shown} holds what an export did not write ({', '.join(listed[:3])}"
                    f"{', ...' if len(listed) > 3 else ''}); choose a new or empty folder")
    return bool(held)


# An export's temporary folders beside its target: the new folder being written (after a swap, the earlier
# one until it is removed), and the earlier one set aside between two renames. Their names carry the
# target's (as a digest), so that what a killed export set aside goes back under the right name.
STAGING, ASIDE = "new", "old"


def _name_digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogateescape")).hexdigest()[:16]


def _export_temporaries(directory: Path, kind: str, name: str = "*") -> list[Path]:
    digest = name if name == "*" else _name_digest(name)
    return [path for path in Path(directory).glob(f"{TEMPORARY_PREFIX}*-{kind}-{digest}-*")
            if _pid_of(path) is not None and path.is_dir() and not path.is_symlink()]


@contextlib.contextmanager
def _exports_locked(directory: Path, wait: bool) -> Iterator[bool]:
    """Yield whether the exports' lock on ``directory`` is held (a flock: the system drops it as its holder
    dies, so a reused PID never looks alive); without ``wait`` not while an export runs, nor without locks."""
    with contextlib.ExitStack() as stack:
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
            stack.callback(os.close, fd)
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            held = True
        except OSError:
            held = False
        yield held


def _settle(given: Path) -> None:
    """With the exports' lock held (no export under way): put back the latest folder a killed export set
    aside from ``given`` if nothing took the name; remove its other asides and every staging folder."""
    for staging in _export_temporaries(given.parent, STAGING):
        shutil.rmtree(staging, ignore_errors=True)
    asides = sorted(_export_temporaries(given.parent, ASIDE, given.name),
                    key=lambda path: path.stat().st_ctime, reverse=True)
    for aside in asides:
        if not any(aside.iterdir()):  # set aside before the earlier folder was moved into it
            aside.rmdir()
        else:
            _put_back_or_remove(given, aside)
    if asides:
        fsync_directory(given.parent)


def settle_folder(path: Path) -> None:
    """Make name ``path`` (a link: where it leads) hold a whole folder, whenever an export to it was killed,
    clearing what killed exports left beside it; one under way is awaited only if it left the name empty."""
    given = Path(os.path.realpath(path))
    if not _export_temporaries(given.parent, "*"):
        return
    empty = not os.path.lexists(given) and bool(_export_temporaries(given.parent, ASIDE, given.name))
    with _exports_locked(given.parent, wait=empty) as held:
        if held:
            with contextlib.suppress(OSError):  # a folder this user cannot change: it is read as it stands
                _settle(given)


def replace_folder(path: Path, files: dict[str, bytes], foreign: Callable[[Path], list[str]]) -> None:
    """Make folder ``path`` hold exactly ``files`` (name → contents), all or nothing: written and fsynced in a
    temporary sibling (the earlier folder's mode) that then takes the name, in one swap where the system can,
    else by two renames. What is at ``path`` gives way only if empty or ``foreign`` names nothing; a failure
    leaves it; a stop signal waits for the swap. Exports take turns (:func:`settle_folder`: what one left)."""
    from charrnn.utils.interrupt import signals_deferred

    given = Path(path)
    digest = _name_digest(given.name)
    with _exports_locked(given.parent, wait=True) as held:
        staging = aside = None
        try:
            if held:
                _settle(given)
            previous = folder_in_the_way(given, foreign)
            staging = Path(tempfile.mkdtemp(prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-{STAGING}-{digest}-",
                                            dir=given.parent))
            mode = stat_or_none(given, f"could not write {given}")
            os.chmod(staging, stat.S_IMODE(mode.st_mode) if mode is not None else 0o777 & ~current_umask())
            for name, contents in files.items():
                with open(staging / name, "wb") as handle:
                    handle.write(contents)
                    handle.flush()
                    os.fsync(handle.fileno())
            fsync_directory(staging)
            with signals_deferred():
                if previous and _exchange(staging, given):
                    earlier, staging = staging, None  # the swap left the earlier folder at the staging name
                    shutil.rmtree(earlier, ignore_errors=True)
                else:  # two renames: a reader may find the name empty between them
                    if previous:  # set aside, never deleted before the new folder stands
                        aside = Path(tempfile.mkdtemp(
                            prefix=f"{TEMPORARY_PREFIX}{os.getpid()}-{ASIDE}-{digest}-", dir=given.parent))
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


def _exchange(first: Path, second: Path) -> bool:
    """Swap ``first`` and ``second`` in one step no reader falls between (renameat2); False if it cannot."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:
        return False
    at_cwd, exchange = -100, 2  # renameat2's AT_FDCWD (paths from the working directory), RENAME_EXCHANGE
    if renameat2(at_cwd, os.fsencode(first), at_cwd, os.fsencode(second), exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _put_back_or_remove(given: Path, aside: Path | None) -> None:
    """The folder set aside goes back if no new one stands at ``given``, else it is removed."""
    if aside is not None and not os.path.lexists(given):
        os.replace(aside, given)
    elif aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


# ---------------------------------------------------------------------------- model folders
# Recognised here, below every module that writes, by what its config.json says it is (docs/model-folder.md).
MODEL_FOLDER_FORMAT = "charrnn-model"


def read_folder_config(path: Path) -> dict[str, Any] | None:
    """Model folder ``path``'s config.json; None when charrnn did not write it or it cannot be read."""
    config = read_json_object(Path(path) / "config.json")
    return config if config is not None and config.get("format") == MODEL_FOLDER_FORMAT else None


def model_folder_holding(path: Path) -> Path | None:
    """The model folder (a parent, through links too) that ``path`` would be written inside, or None."""
    for place in dict.fromkeys([Path(path), real_path(path)]):
        for parent in place.parents:
            if read_folder_config(parent) is not None:
                return parent
    return None
