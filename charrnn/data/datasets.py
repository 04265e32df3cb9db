"""Built-in datasets: download, verify by checksum, and cache under the data directory.

``CHARRNN_DATA_MIRROR`` replaces the origin (any URL urllib reads, ``file://`` too): many machines have no
route to it. A download takes its name only once verified; a failed one leaves no file or new directory."""

from __future__ import annotations

import os
import urllib.error
import urllib.request
from contextlib import suppress
from dataclasses import asdict, dataclass
from itertools import takewhile
from pathlib import Path
from typing import Any

from charrnn.errors import CharrnnError, option
from charrnn.models.pretrained import refuse_writing_in_model_folders
from charrnn.utils.files import NotRegularFile, file_sha256, read_regular, reason, replacing

MIRROR_ENV = "CHARRNN_DATA_MIRROR"
DATA_DIR_ENV = "CHARRNN_DATA_DIR"


@dataclass(frozen=True)
class DatasetSource:
    """Where a built-in dataset comes from, and what it must be."""

    name: str  # the name users type, e.g. "tinyshakespeare"
    relative_path: str  # path under both the origin base URL and the data directory
    origin: str  # public base URL the relative path is appended to
    sha256: str  # hex digest the downloaded file must have
    chars: int  # number of characters (code points) of the decoded text


DATASETS: dict[str, DatasetSource] = {
    "tinyshakespeare": DatasetSource(
        name="tinyshakespeare", relative_path="tinyshakespeare/input.txt",
        origin="https://raw.githubusercontent.com/karpathy/char-rnn/master/data",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", chars=1_115_394),
}
DEFAULT_DATASET = "tinyshakespeare"


@dataclass(frozen=True)
class Dataset:
    """A built-in dataset in the local cache (:func:`fetch`)."""

    name: str  # its name, e.g. tinyshakespeare
    path: Path  # the verified file
    downloaded: bool  # False: a verified copy was already there
    chars: int  # its length in characters
    kept: Path | None = None  # where a different file found at ``path`` was set aside (force only)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "path": str(self.path), "kept": self.kept and str(self.kept)}


def default_data_dir() -> Path:
    """``$CHARRNN_DATA_DIR`` if set, else ``./data``."""
    return Path(os.environ.get(DATA_DIR_ENV) or "data")


def local_copy(sha256: str) -> tuple[str, Path] | None:
    """The known dataset whose text has ``sha256``: its name and place in the data directory."""
    for dataset in DATASETS.values():
        if dataset.sha256 == sha256:
            return dataset.name, default_data_dir() / dataset.relative_path
    return None


def _verify(path: Path, dataset: DatasetSource) -> str | None:
    """Return why ``path`` is not the expected file, or ``None`` when it is."""
    actual = file_sha256(path)
    if actual != dataset.sha256:
        return f"SHA-256 {actual[:12]}… does not match the expected {dataset.sha256[:12]}…"
    try:
        chars = len(read_regular(path).decode("utf-8"))
    except UnicodeDecodeError:
        return "not UTF-8"
    if chars != dataset.chars:
        return f"{chars:,} characters instead of {dataset.chars:,}"
    return None


def _cached_copy_problem(target: Path, dataset: DatasetSource) -> str | None:
    """Why the file at ``target`` is not the verified dataset: None if it is, "absent" if nothing is there."""
    if not target.exists():
        return "a symbolic link to nothing" if target.is_symlink() else "absent"
    try:
        return _verify(target, dataset)
    except NotRegularFile:
        return "not a regular file"
    except OSError as exc:
        raise CharrnnError(f"cannot read the cached copy {target}: {reason(exc)}") from None


def _set_aside(target: Path, problem: str) -> Path:
    """Rename the differing file at ``target`` to a free name beside it and return that name."""
    for number in range(1, 1000):
        kept = target.with_name(f"{target.name}.kept-{number}")
        if not kept.exists() and not kept.is_symlink():
            try:
                os.link(target, kept, follow_symlinks=False)
                os.unlink(target)
            except OSError as exc:
                raise CharrnnError(f"cannot set aside {target} ({problem}): {reason(exc)}; nothing was "
                                   f"changed") from None
            return kept
    raise CharrnnError(f"cannot set aside {target}: too many kept copies beside it")


def _make_parents(directory: Path) -> list[Path]:
    """Create ``directory`` and its missing parents; return those created, deepest first."""
    missing = list(takewhile(lambda candidate: not candidate.exists(), (directory, *directory.parents)))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(missing)
        raise CharrnnError(f"cannot create {directory}: {reason(exc)}") from None
    return missing


def _remove_empty(directories: list[Path]) -> None:
    with suppress(OSError):  # the first that is not empty, and so its parents, stay
        for directory in directories:
            directory.rmdir()


def dataset_path(name: str, data_dir: Path | None = None) -> Path:
    """Where dataset ``name`` is kept in ``data_dir`` (default: :func:`default_data_dir`), fetched or not."""
    return (data_dir or default_data_dir()) / DATASETS[name].relative_path


def fetch(name: str, data_dir: Path | None = None, force: bool = False) -> Dataset:
    """Make sure dataset ``name`` is cached and verified; a differing file there is refused, or with ``force``
    kept as ``input.txt.kept-1``. A failed or unverified download leaves no file, and no directory it made."""
    if name not in DATASETS:
        raise CharrnnError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    dataset = DATASETS[name]
    given = data_dir is not None
    target = dataset_path(name, data_dir)
    refuse_writing_in_model_folders(target, option("data_dir") if given else DATA_DIR_ENV, "directory", given,
                                    shown=data_dir or default_data_dir())
    if target.is_dir():
        raise CharrnnError(f"cannot store {dataset.name} at {target}: it is a directory")
    problem = _cached_copy_problem(target, dataset)
    if problem is None and not force:
        return Dataset(name, target, False, dataset.chars)
    if problem not in (None, "absent") and not force:
        raise CharrnnError(f"{target} is there but is not {dataset.name} ({problem}); it is never replaced: "
                           f"move it away, or fetch with force (charrnn data get --force) to keep it under a "
                           f"new name and download")
    url = f"{(os.environ.get(MIRROR_ENV) or dataset.origin).rstrip('/')}/{dataset.relative_path}"
    created = _make_parents(target.parent)
    kept = _set_aside(target, problem) if problem not in (None, "absent") else None
    try:
        _download(dataset, url, target)
    except BaseException:
        if kept is not None:
            os.replace(kept, target)
        _remove_empty(created)
        raise
    return Dataset(name, target, True, dataset.chars, kept)


def _download(dataset: DatasetSource, url: str, target: Path) -> None:
    """Fetch ``url`` into ``target`` through a temporary sibling, verified before it takes the name."""
    with replacing(target, lambda exc: f"cannot write {target}: {reason(exc)}") as tmp_name:
        try:
            response = urllib.request.urlopen(url, timeout=60)
        except (urllib.error.URLError, OSError, ValueError) as exc:
            cause = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            raise CharrnnError(f"could not download {dataset.name} from {url}: {cause} (offline? set "
                               f"{MIRROR_ENV} to a base URL that holds {dataset.relative_path})") from None
        with response, open(tmp_name, "wb") as out:
            try:
                for block in iter(lambda: response.read(1 << 20), b""):
                    out.write(block)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                raise CharrnnError(f"the download of {dataset.name} from {url} broke off: "
                                   f"{getattr(exc, 'reason', None) or exc}") from None
        problem = _verify(Path(tmp_name), dataset)
        if problem is not None:
            raise CharrnnError(f"refused the download of {dataset.name} from {url}: {problem}; deleted it")
