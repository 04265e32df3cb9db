"""Never write over what is read: the one check every command makes before it writes a file or a run.

A path read stands for more than itself: a checkpoint or run directory for its run's files and corpus,
another directory for its text files (docs/files.md, "Outputs are checked against inputs")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from charrnn.errors import OptionConflict, option
from charrnn.training.manifest import EPOCH_CHECKPOINT_GLOB, read_header
from charrnn.training.model_folder import (
    is_model_folder,
    read_folder_config,
    refuse_writing_in_a_model_folder,
)
from charrnn.training.rundir import RUN_FILES
from charrnn.training.runlock import LOCK_NAME
from charrnn.utils.files import (
    TEMPORARY_GLOB,
    TEMPORARY_PREFIX,
    real_path,
    refuse_writing_in_shipped,
    same_file,
    within_folder,
)

RESERVED = (*RUN_FILES, LOCK_NAME)  # the names a run directory keeps for its own files


def refuse_writing_over_reads(target: Path, name: str, reads: dict[str, Any],
                              run_directory: bool = False) -> None:
    """Refuse, before any work, writing ``target`` (option ``name``; with ``run_directory``, the files a run
    writes there) over anything in ``reads`` (option name → a path, paths or None; shipped names resolved),
    by path or link, or inside a corpus directory read. A file at a name a run directory keeps is refused
    too, and nothing is written in the shipped models' folder."""
    what = "run directory" if run_directory else "file"
    refuse_writing_in_shipped(target, option(name), what)
    refuse_writing_in_a_model_folder(target, option(name), what)
    writes = _run_files(target) if run_directory else [target]
    corpora_of: dict[Path, Path | None] = {}  # each checkpoint's corpus, its header read once
    for read_name, given in reads.items():
        for each in given if isinstance(given, list | tuple) else [given]:
            if each is None:
                continue
            path = Path(each)
            read = f"{option(read_name)} {path}"
            parts = _stands_for(path, corpora_of)
            for file, part in parts.items():
                replaced = next((write for write in writes if same_file(write, file)), None)
                if replaced is None:
                    continue
                shown = read if file == path else f"{file}, {part.format(read)}"
                if run_directory:
                    raise OptionConflict(f"{option(name)} {target} would replace {replaced}, which is "
                                         f"{shown}: choose another {what}")
                raise OptionConflict(f"{option(name)} {target} is {shown}: writing it would destroy what is "
                                     f"read; choose another {what}")
            corpora = [file for file, part in parts.items() if part == CORPUS and file.is_dir()]
            inside = next((corpus for corpus in corpora if within_folder(target, corpus)), None)
            if inside is not None:
                whose = "" if inside == path else f" that {read} was trained on"
                raise OptionConflict(f"{option(name)} {target} is inside the corpus directory "
                                     f"{inside}{whose}: writing there would change what is read; choose "
                                     f"another {what}")
    if not run_directory:
        _refuse_a_run_directorys_name(target, name)


def _run_files(out_dir: Path) -> list[Path]:
    """The files a run in ``out_dir`` writes, with its epoch checkpoints and the temporaries of ended
    processes it clears away (:func:`~charrnn.utils.files.remove_stale_temporaries`) there already."""
    files = [out_dir / reserved for reserved in RESERVED]
    if out_dir.is_dir():
        files += sorted(out_dir.glob(EPOCH_CHECKPOINT_GLOB)) + sorted(out_dir.glob(TEMPORARY_GLOB))
    return files


CORPUS = "the corpus {} was trained on"  # the part a checkpoint's corpus plays in what it stands for


def _stands_for(path: Path, corpora_of: dict[Path, Path | None]) -> dict[Path, str]:
    """What reading ``path`` reads, each file with the part it plays (a phrase about the path, "{}"): for a
    checkpoint or run directory, the run files there and each one's corpus (``corpora_of`` caches them);
    another directory is a corpus (:data:`CORPUS`) with its text files."""
    folder = path if path.is_dir() else path.parent if path.suffix == ".pt" else None
    neighbours = sorted(folder.iterdir()) if folder is not None and folder.is_dir() else []
    if is_model_folder(path):
        corpus = _trained_on(read_folder_config(path))
        return {path: "{}", **{file: "in the model folder {}" for file in neighbours},
                **({corpus: CORPUS} if corpus is not None else {})}
    run_files = [file for file in neighbours if file.suffix == ".pt" or file.name in RUN_FILES]
    if path.is_dir() and not run_files:
        return {path: CORPUS, **{text: "a text of {}" for text in sorted(path.rglob("*.txt"))}}
    parts = {path: "{}", **{file: "in the run directory of {}" for file in run_files if file != path}}
    for file in run_files:
        if file not in corpora_of:
            corpora_of[file] = _trained_on(read_header(file)) if file.suffix == ".pt" else None
        corpus = corpora_of[file]
        if corpus is not None:
            parts.setdefault(corpus, CORPUS)
    return parts


def _trained_on(header: dict[str, Any] | None) -> Path | None:
    """The corpus a checkpoint's header or a model folder's config names; None if it names none."""
    from charrnn.data.corpus import corpus_location

    corpus = (header or {}).get("corpus")
    path = corpus.get("path") if isinstance(corpus, dict) else None
    if not isinstance(path, str) or not path:
        return None
    # Where it would be read: for a corpus recorded elsewhere, the data directory's copy of its dataset.
    return corpus_location(corpus) if isinstance(corpus.get("sha256"), str) else Path(path)


def _refuse_a_run_directorys_name(target: Path, name: str) -> None:
    """Refuse an output that would land, through any link, on a name a run directory keeps for itself
    (its checkpoints, records, lock and temporaries)."""
    for landing in dict.fromkeys([target, real_path(target)]):
        folder = landing.parent
        if not any((folder / reserved).exists() for reserved in RESERVED):
            continue
        if landing.suffix == ".pt" or landing.name in RESERVED or landing.name.startswith(TEMPORARY_PREFIX):
            raise OptionConflict(f"{option(name)} {target} would be {landing}, a name the run directory "
                                 f"{folder} keeps for its own files; choose another file")
