"""Built-in datasets: download, verify by checksum, and cache under the data directory.

The download origin is overridable with ``CHARRNN_DATA_MIRROR`` (any URL urllib
understands, ``file://`` included), because many machines that train models have
no route to the public origin. A file is written under a temporary name, checked,
and only then moved into place, so a failed or tampered download never leaves a
file that looks valid.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from charrnn.errors import CharrnnError

MIRROR_ENV = "CHARRNN_DATA_MIRROR"
DATA_DIR_ENV = "CHARRNN_DATA_DIR"


@dataclass(frozen=True)
class Dataset:
    name: str  # the name users type, e.g. "tinyshakespeare"
    relative_path: str  # path under both the origin base URL and the data directory
    origin: str  # public base URL the relative path is appended to
    sha256: str  # hex digest the downloaded file must have
    chars: int  # number of characters (code points) of the decoded text


DATASETS: dict[str, Dataset] = {
    "tinyshakespeare": Dataset(
        name="tinyshakespeare",
        relative_path="tinyshakespeare/input.txt",
        origin="https://raw.githubusercontent.com/karpathy/char-rnn/master/data",
        sha256="86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
        chars=1_115_394,
    ),
}
DEFAULT_DATASET = "tinyshakespeare"


def default_data_dir() -> Path:
    """``$CHARRNN_DATA_DIR`` if set, else ``./data``."""
    return Path(os.environ.get(DATA_DIR_ENV) or "data")


def dataset_url(dataset: Dataset) -> str:
    base = os.environ.get(MIRROR_ENV) or dataset.origin
    return f"{base.rstrip('/')}/{dataset.relative_path}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify(path: Path, dataset: Dataset) -> str | None:
    """Return why ``path`` is not the expected file, or ``None`` when it is."""
    actual = _sha256(path)
    if actual != dataset.sha256:
        return f"SHA-256 {actual[:12]}… does not match the expected {dataset.sha256[:12]}…"
    chars = len(path.read_text(encoding="utf-8"))
    if chars != dataset.chars:
        return f"{chars:,} characters instead of {dataset.chars:,}"
    return None


def get_dataset(name: str, data_dir: Path | None = None, force: bool = False) -> tuple[Path, bool]:
    """Make sure dataset ``name`` is in the cache; return its path and whether it was downloaded.

    A cached file that fails verification is downloaded again. A download that fails
    verification is deleted and reported.
    """
    if name not in DATASETS:
        raise CharrnnError(f"unknown dataset {name!r}; known: {', '.join(sorted(DATASETS))}")
    dataset = DATASETS[name]
    target = (data_dir or default_data_dir()) / dataset.relative_path
    if target.exists() and not force and _verify(target, dataset) is None:
        return target, False

    url = dataset_url(dataset)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CharrnnError(f"cannot create {target.parent}: {exc.strerror or exc}") from None
    fd, tmp_name = tempfile.mkstemp(prefix=".download-", dir=target.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(url, timeout=60) as response:
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        problem = _verify(tmp, dataset)
        if problem is not None:
            raise CharrnnError(f"refused the download of {name} from {url}: {problem}; deleted it")
        os.replace(tmp, target)
    except UnicodeDecodeError:
        raise CharrnnError(f"refused the download of {name} from {url}: not UTF-8; deleted it") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
        raise CharrnnError(
            f"could not download {name} from {url}: {reason}"
            f" (offline? set {MIRROR_ENV} to a base URL that holds {dataset.relative_path})"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    return target, True
