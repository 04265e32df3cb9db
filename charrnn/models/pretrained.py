"""The model that comes with charrnn: a small LSTM trained on tiny Shakespeare, named ``shakespeare``.

Every command and API call that reads a checkpoint accepts the name (``charrnn sample shakespeare``,
``charrnn.load("shakespeare")``, ``--init-from shakespeare``) where nothing of that name exists: a file,
directory or link called ``shakespeare`` in the current directory is the user's own, and always comes
first. The file holds 16-bit weights, loaded into float32; ``scripts/retrain_shipped_model.py``
retrains it from scratch and records the corpus, settings and score in it (docs/shipped-model.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from charrnn.errors import OptionConflict, escape

SHIPPED_MODELS = ("shakespeare",)  # the names a checkpoint argument may give instead of a path
_FOLDER = Path(__file__).with_name("weights")


def shipped_path(name: str) -> Path:
    """Where the shipped model ``name`` lives inside the installed package."""
    return _FOLDER / f"{name}.pt"


def resolve_shipped(path: Path) -> Path:
    """``path`` itself, or the shipped model it names when nothing at all (not even a broken link) is
    at ``path``."""
    if str(path) in SHIPPED_MODELS and not os.path.lexists(path):
        return shipped_path(str(path))
    return path


def shipped_name(path: Path) -> str | None:
    """The name of the shipped model at ``path``, or None when ``path`` is not one."""
    resolved = _real(path)
    if resolved.parent == _real(_FOLDER) and resolved.stem in SHIPPED_MODELS:
        return resolved.stem
    return None


def run_name(path: Path) -> str:
    """The name reports give a checkpoint's run: its directory's, or a shipped model's own name."""
    return shipped_name(path) or _real(path).parent.name


def within_shipped(path: Path) -> bool:
    """Whether ``path`` is the shipped models' folder or anything in it (through links too): charrnn never
    writes there, whatever a command reads."""
    folder, resolved = _real(_FOLDER), _real(path)
    return resolved == folder or folder in resolved.parents


def refuse_writing_in_shipped(path: Path, option: str, instead: str) -> None:
    """Refuse ``path``, given as ``option``, when it is in the shipped models' folder
    (:func:`within_shipped`); ``instead`` says what to choose."""
    if within_shipped(path):
        raise OptionConflict(f"{{{option}}} {escape(str(path))} is in the folder of the model that comes "
                             f"with charrnn, which is never written; choose another {instead}")


def _real(path: Path) -> Path:
    """``path`` with every link followed, as far as they lead (a loop of links ends the following rather
    than raising, as ``Path.resolve`` does)."""
    return Path(os.path.realpath(path))
