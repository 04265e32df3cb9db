"""Corpora: reading, splitting, and truncated-BPTT stream batches.

A corpus is a UTF-8 file, or a directory's sorted ``*.txt`` files concatenated. The validation split is
its contiguous tail, as in nanoGPT's character-level recipe, so the two report comparable numbers."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from charrnn.config import partial_eval_chars, split_point
from charrnn.data.cache import (
    cached_ids,
    corpus_files,
    not_utf8_error,
    scan_corpus,
    unreadable_corpus_error,
)
from charrnn.data.datasets import DATA_DIR_ENV, local_copy
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, option


def corpus_name(path: Path) -> str:
    """A short name for run directories: the file's stem or the directory's name."""
    return path.name if path.is_dir() else path.stem


def read_corpus(path: Path) -> str:
    """A corpus file, or a directory's sorted ``*.txt`` files, as one string: for short texts (primes,
    texts to inspect). Corpora go through :func:`encode_corpus`, which never holds the whole text."""
    parts = []
    for file in corpus_files(path):
        try:
            raw = file.read_bytes()
        except OSError as exc:
            raise unreadable_corpus_error(file, exc) from None
        try:
            parts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise not_utf8_error(file, raw[exc.start], exc.start) from None
    text = "".join(parts)
    if not text:
        raise CharrnnError(f"{path} is empty: it holds no text")
    return text


@dataclass(frozen=True)
class Split:
    train: torch.Tensor  # (N_train,) ids of the training text
    val: torch.Tensor  # (N_val,) ids of the held-out tail


def split_ids(ids: torch.Tensor, first_val_index: int) -> Split:
    return Split(train=ids[:first_val_index], val=ids[first_val_index:])


def scored_validation(val_ids: torch.Tensor, eval_chars: int | None) -> tuple[torch.Tensor, int | None]:
    """The validation text every evaluation scores, and how many characters it predicts when that is only
    the split's start (TrainConfig.eval_chars; None: all of it)."""
    part = partial_eval_chars(eval_chars, len(val_ids) - 1)
    return (val_ids if part is None else val_ids[: part + 1]), part


@dataclass(frozen=True)
class CorpusInfo:
    path: str  # absolute path the corpus was read from
    name: str  # short name, used for the default run directory
    chars: int  # total characters
    sha256: str  # hash of the UTF-8 text, to recognise the same corpus later
    val_frac: float  # validation fraction used for the split
    split_point: int  # index of the first validation character (val_frac, up to TrainConfig.val_max_chars)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class EncodedCorpus:
    vocab: Vocab  # the sorted code points of the whole corpus
    ids: torch.Tensor  # (N,) ids of the whole corpus, in vocab.id_dtype, memory-mapped from the cache
    info: CorpusInfo  # where it came from and how it is split


def encode_corpus(
    path: Path, name: str, val_frac: float, vocab: Vocab | None = None, extend_vocab: bool = False,
    expected_sha256: str | None = None, val_max_chars: int | None = None, split_at: int | None = None,
) -> EncodedCorpus:
    """Encode a corpus through the id cache, recording the split: the tail ``val_frac``, at most
    ``val_max_chars``, unless ``split_at`` gives it. A given ``vocab`` refuses other characters unless
    ``extend_vocab`` appends them (ids never move); else the corpus's own is used. ``expected_sha256``
    (resuming) refuses any other text before it is encoded."""
    scan = scan_corpus(path)
    if expected_sha256 is not None and scan.sha256 != expected_sha256:
        raise CharrnnError(f"{path} is not the text this run was trained on; resuming needs the same corpus")
    if vocab is None:
        vocab = scan.vocab()
    elif extend_vocab:
        vocab = vocab.extended(scan.vocab().chars)
    ids = cached_ids(scan, vocab)
    info = CorpusInfo(str(path.resolve()), name, scan.chars, scan.sha256, val_frac,
                      split_point(scan.chars, val_frac, val_max_chars) if split_at is None else split_at)
    return EncodedCorpus(vocab, ids, info)


def _located(corpus: dict[str, Any]) -> tuple[Path, tuple[str, Path] | None]:
    """The path a corpus record names, and where nothing is there and its text is a known dataset's, that
    dataset's name and place in the data directory."""
    recorded = Path(corpus["path"])
    return recorded, None if recorded.exists() else local_copy(corpus["sha256"])


def corpus_location(corpus: dict[str, Any]) -> Path:
    """Where a checkpoint's corpus record would be read on this machine: its path, or where nothing is
    there and the text is a known dataset's (another machine's checkpoint, the shipped model), the data
    directory's place for that dataset, whatever is there."""
    recorded, known = _located(corpus)
    return recorded if known is None else known[1]


def corpus_path(corpus: dict[str, Any]) -> Path:
    """:func:`corpus_location`, checked to exist, and for a data directory's copy to hold the same text
    (a recorded path's text is the caller's to check)."""
    recorded, known = _located(corpus)
    if known is None:
        if not recorded.exists():
            raise CharrnnError(f"the training corpus {corpus['path']} is gone")
        return recorded
    name, path = known
    where = f"(the data directory is ./data, or ${DATA_DIR_ENV})"
    if not path.is_file():
        raise CharrnnError(f"the training corpus, {name}, is not at {path}: `charrnn data get {name}` "
                           f"fetches it {where}")
    if scan_corpus(path).sha256 != corpus["sha256"]:
        raise CharrnnError(f"{path} is not the text of {name} (it was changed): `charrnn data get {name} "
                           f"--force` fetches it again {where}")
    return path


def checkpoint_validation_ids(corpus: dict[str, Any] | None, vocab: Vocab) -> torch.Tensor:
    """The validation split a checkpoint (``corpus``: its corpus record, or None) was trained with, as
    ids, checking the corpus is unchanged. Errors say what is missing; callers add what to do instead."""
    return checkpoint_split(corpus, vocab).val


def checkpoint_split(corpus: dict[str, Any] | None, vocab: Vocab) -> Split:
    """Both splits a checkpoint was trained with, as ids (see :func:`checkpoint_validation_ids`)."""
    if corpus is None:
        raise CharrnnError("the checkpoint records no training corpus")
    path = corpus_path(corpus)
    scan = scan_corpus(path)
    if scan.sha256 != corpus["sha256"]:
        raise CharrnnError(f"the training corpus {path} has changed since training, so its validation split "
                           f"is unknown")
    return split_ids(cached_ids(scan, vocab), corpus["split_point"])


class StreamBatches:
    """Truncated-BPTT batches over ``B`` parallel streams of ``L = (N - 1) // B`` characters (textbook
    notes §3). Row ``b`` of every batch continues stream ``b``, so one step's last hidden state is the
    next step's first. For a text ``a b c … x`` with B = 3, T = 2::

        stream 0: a b | c d | e f | g      step 0 takes columns 0-1,
        stream 1: h i | j k | l m | n      step 1 columns 2-3, ...
        stream 2: o p | q r | s t | u      the last step may be shorter.

    Targets are the inputs shifted by one (``g``'s is ``h``); an epoch is ``ceil(L / T)`` steps."""

    def __init__(self, ids: torch.Tensor, batch_size: int, seq_len: int):
        minimum = batch_size * seq_len + 1
        if len(ids) < minimum:
            raise CharrnnError(
                f"the training split has {len(ids):,} characters; one batch of {option('batch_size')} "
                f"{batch_size} × {option('seq_len')} {seq_len} needs at least {minimum:,} (use a longer "
                f"corpus or smaller {option('batch_size')}/{option('seq_len')})"
            )
        self.batch_size = batch_size
        self.seq_len = seq_len
        self.stream_len = (len(ids) - 1) // batch_size
        used = batch_size * self.stream_len
        self.inputs = ids[:used].view(batch_size, self.stream_len)  # (B, L)
        self.targets = ids[1 : used + 1].view(batch_size, self.stream_len)  # (B, L)

    def __len__(self) -> int:
        """Steps per epoch."""
        return -(-self.stream_len // self.seq_len)

    def __getitem__(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of step ``step`` within the epoch: two ``(B, T') int64``."""
        if not 0 <= step < len(self):
            raise IndexError(step)
        start = step * self.seq_len
        end = min(start + self.seq_len, self.stream_len)
        return self.inputs[:, start:end].long(), self.targets[:, start:end].long()
