"""The model that comes with charrnn: a small LSTM trained on tiny Shakespeare, named ``shakespeare``.

A checkpoint argument may give the name unless something of that name exists (the user's own comes first).
It is a model folder whose 16-bit weights load into float32; scripts/retrain_shipped_model.py retrains it
(docs/shipped-model.md)."""

from __future__ import annotations

import os
from pathlib import Path

from charrnn.errors import CharrnnError, OptionConflict
from charrnn.utils.files import model_folder_holding, real_path, within_folder

SHIPPED_MODELS = ("shakespeare",)  # the names a checkpoint argument may give instead of a path
# The folder of the models that come with charrnn: nothing ever writes there.
SHIPPED_FOLDER = Path(__file__).parent / "weights"


def shipped_path(name: str) -> Path:
    """Where the shipped model ``name`` lives inside the installed package."""
    return SHIPPED_FOLDER / name


def resolve_shipped(path: Path) -> Path:
    """``path``, or the shipped model it names when nothing at all (not even a broken link) is there."""
    return shipped_path(str(path)) if str(path) in SHIPPED_MODELS and not os.path.lexists(path) else path


def run_name(path: Path) -> str:
    """The name reports give a checkpoint's run: its directory's, or a model folder's own (shipped too)."""
    resolved = real_path(path)
    return resolved.name if resolved.is_dir() else resolved.parent.name


def refuse_writing_in_model_folders(path: Path, named: str, instead: str, by_option: bool = True,
                                    shown: Path | None = None) -> None:
    """Refuse writing ``path`` in the shipped models' folder or inside a model folder, through links too (only
    an export writes there); ``named``: the option or variable that gave ``shown`` (default ``path``)."""
    folder = SHIPPED_FOLDER if within_folder(path, SHIPPED_FOLDER) else model_folder_holding(path)
    if folder is None:
        return
    where = (f"inside the model folder {folder}, which holds its own files alone" if folder != SHIPPED_FOLDER
             else "in the folder of the model that comes with charrnn, which is never written")
    message = f"{named} {shown or path} is {where}; choose another {instead}"
    raise (OptionConflict if by_option else CharrnnError)(message)  # by an option: a usage error
