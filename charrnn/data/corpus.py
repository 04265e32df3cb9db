"""Corpora: encoding once, reading, splitting, and truncated-BPTT stream batches.

A corpus is a UTF-8 file, or a directory's sorted ``*.txt`` files concatenated. It is encoded once
(docs/how-it-works.md, "Corpora of any size"): :func:`scan_corpus` hashes and counts the text chunk by chunk;
:func:`cached_ids` writes its ids to a file named by content and vocabulary, which training memory-maps once
its SHA-256 matches the one beside it. Deleting the cache is always safe. The validation split is the corpus's
contiguous tail, as in nanoGPT's character-level recipe, so the two report comparable numbers."""

from __future__ import annotations

import codecs
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from charrnn.config import partial_eval_chars, split_point
from charrnn.data.datasets import DATA_DIR_ENV, local_copy
from charrnn.data.vocab import UnknownCharactersError, Vocab, code_points
from charrnn.errors import CharrnnError, option
from charrnn.models.pretrained import refuse_writing_in_model_folders
from charrnn.utils.files import (
    file_sha256,
    read_regular,
    reason,
    remove_stale_temporaries,
    replace_text,
    replacing,
)

# ---------------------------------------------------------------------------- the encoded corpus cache

CACHE_DIR_ENV = "CHARRNN_CACHE_DIR"
CHUNK_BYTES = 1 << 22  # 4 MiB of text per chunk: bounded memory, large enough to vectorise well
IN_MEMORY_LIMIT_BYTES = 1 << 28  # ids of texts up to this size are kept in memory if the cache is unwritable


def default_cache_dir() -> Path:
    """``$CHARRNN_CACHE_DIR``, else ``$XDG_CACHE_HOME/charrnn``, else ``~/.cache/charrnn``."""
    if given := os.environ.get(CACHE_DIR_ENV):
        return Path(given)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "charrnn"


def corpus_files(path: Path) -> list[Path]:
    """The files of a corpus (or a prime, a text to score): itself, or a directory's sorted ``*.txt``; regular
    ones only (a FIFO or device may hang or never end; a stream cannot be scanned, then encoded)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise CharrnnError(f"{path} does not exist") from None
    except OSError as exc:
        raise unreadable_corpus_error(path, exc) from None
    if stat.S_ISDIR(info.st_mode):
        files = sorted(p for p in path.glob("*.txt") if p.is_file())
        if not files:
            raise CharrnnError(f"directory {path} holds no *.txt files")
        return files
    if not stat.S_ISREG(info.st_mode):
        raise CharrnnError(f"{path} is not a regular file (a pipe or a device); "
                           f"save the text to a file and give that")
    return [path]


def unreadable_corpus_error(file: Path, exc: OSError) -> CharrnnError:
    return CharrnnError(f"cannot read {file}: {reason(exc)}")


def not_utf8_error(file: Path, byte: int, offset: int) -> CharrnnError:
    return CharrnnError(f"{file} is not UTF-8 text (invalid byte 0x{byte:02x} at offset {offset})")


def _chunks(files: list[Path], chunk_bytes: int) -> Iterator[tuple[bytes, torch.Tensor]]:
    """Each chunk of each file as its raw bytes and the code points it completes; ASCII skips decoding."""
    for file in files:
        decoder = codecs.getincrementaldecoder("utf-8")()
        offset = 0
        try:
            handle = open(file, "rb")
        except OSError as exc:
            raise unreadable_corpus_error(file, exc) from None
        with handle:
            while True:
                try:
                    raw = handle.read(chunk_bytes)
                except OSError as exc:
                    raise unreadable_corpus_error(file, exc) from None
                final = len(raw) < chunk_bytes
                pending = len(decoder.getstate()[0])
                if raw and not pending and raw.isascii():
                    points = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
                else:
                    try:
                        points = code_points(decoder.decode(raw, final))  # int32
                    except UnicodeDecodeError as exc:
                        at = offset - pending + exc.start
                        raise not_utf8_error(file, exc.object[exc.start], at) from None
                yield raw, points
                offset += len(raw)
                if final:
                    break


@dataclass(frozen=True)
class CorpusScan:
    """What one pass over a corpus learns: its files, content hash, length and character counts."""

    files: tuple[Path, ...]  # the files read, in order
    sha256: str  # hash of the concatenated bytes (the UTF-8 text)
    chars: int  # number of code points
    counts: torch.Tensor  # (max code point + 1,) int64: occurrences of each code point

    def present(self) -> torch.Tensor:
        """The code points that occur, sorted: ``(V,) int64``."""
        return torch.nonzero(self.counts).flatten()

    def vocab(self) -> Vocab:
        """The corpus's own vocabulary: its characters in code-point order."""
        return Vocab(tuple(chr(point) for point in self.present().tolist()))

    def char_counts(self) -> dict[str, int]:
        """Each character that occurs, with its number of occurrences."""
        return {chr(point): int(self.counts[point]) for point in self.present().tolist()}


def scan_corpus(path: Path, chunk_bytes: int = CHUNK_BYTES) -> CorpusScan:
    """One streaming pass over a corpus: hash, UTF-8 check and code-point counts, in bounded memory."""
    files = corpus_files(path)
    digest = hashlib.sha256()
    counts = torch.zeros(128, dtype=torch.int64)
    chars = 0
    for raw, points in _chunks(files, chunk_bytes):
        digest.update(raw)
        grown = torch.bincount(points, minlength=len(counts))  # longer where a larger code point came
        grown[: len(counts)] += counts
        counts = grown
        chars += len(points)
    if chars == 0:
        raise CharrnnError(f"{path} is empty: it holds no text")
    return CorpusScan(tuple(files), digest.hexdigest(), chars, counts)


def cache_name(scan: CorpusScan, vocab: Vocab, dropped_unknown: bool) -> str:
    """``<content sha256>-<vocabulary digest>[-known].<dtype>`` (``-known``: unknown characters left out)."""
    dtype = str(vocab.id_dtype).removeprefix("torch.")
    return f"{scan.sha256}-{vocab.digest()[:16]}{'-known' if dropped_unknown else ''}.{dtype}"


def cached_ids(scan: CorpusScan, vocab: Vocab, skip_unknown: bool = False, cache_dir: Path | None = None,
               chunk_bytes: int = CHUNK_BYTES) -> torch.Tensor:
    """The corpus's ids under ``vocab``, ``(N,)``: a read-only memory map of the cached encoding, made on the
    first call (in memory up to ``IN_MEMORY_LIMIT_BYTES`` where the cache is unwritable)."""
    unknown = vocab.outside(scan.char_counts())
    if unknown and not skip_unknown:
        raise UnknownCharactersError(unknown)
    length = scan.chars - sum(unknown.values())
    if length == 0:
        return torch.empty(0, dtype=vocab.id_dtype)
    cache_dir = cache_dir or default_cache_dir()
    path = cache_dir / cache_name(scan, vocab, dropped_unknown=bool(unknown))
    refuse_writing_in_model_folders(path, CACHE_DIR_ENV, "directory", by_option=False, shown=cache_dir)
    itemsize = vocab.id_dtype.itemsize
    if _verified(path, length * itemsize):
        ids = torch.from_file(str(path), shared=False, size=length, dtype=vocab.id_dtype)
        # A file and digest edited together are still never trusted. The largest id is found chunk by chunk:
        # torch has no max for uint16, and a whole memory-mapped corpus converted at once would sit in memory.
        largest = max(int(ids[start : start + CHUNK_BYTES].to(torch.int32).max())
                      for start in range(0, length, CHUNK_BYTES))
        if largest < len(vocab):
            return ids
    try:
        _encode_to_file(scan, vocab, path, length, chunk_bytes)
    except CacheUnwritable:
        if length * itemsize > IN_MEMORY_LIMIT_BYTES:
            raise
        ids = torch.empty(length, dtype=vocab.id_dtype)
        _encode_into(scan, vocab, ids, chunk_bytes)
        return ids
    return torch.from_file(str(path), shared=False, size=length, dtype=vocab.id_dtype)


def _digest_path(path: Path) -> Path:
    return path.with_name(f"{path.name}.sha256")


def _verified(path: Path, size: int) -> bool:
    """Whether ``path`` holds whole cached ids: a file of ``size`` bytes hashing to the digest beside it."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or path.stat().st_size != size:
            return False
        return read_regular(_digest_path(path)).decode("ascii").strip() == file_sha256(path)
    except (OSError, UnicodeDecodeError):
        return False


class CacheUnwritable(CharrnnError):
    """The cache directory or file cannot be created or written."""


def _encode_into(scan: CorpusScan, vocab: Vocab, out: torch.Tensor, chunk_bytes: int) -> None:
    """Fill ``out`` with the corpus's ids, re-reading it; the bytes must still hash to ``scan.sha256``,
    so a file edited since the scan is an error, never a cache entry under the old text's name."""
    digest = hashlib.sha256()
    position = 0
    dropping = len(out) < scan.chars  # characters outside the vocabulary are left out
    for raw, points in _chunks(list(scan.files), chunk_bytes):
        digest.update(raw)
        ids = vocab.lookup(points)
        if dropping:
            ids = ids[ids >= 0]
        if position + len(ids) > len(out):
            break
        out[position : position + len(ids)] = ids
        position += len(ids)
    if position != len(out) or digest.hexdigest() != scan.sha256:
        raise CharrnnError(f"{scan.files[0]} changed while it was being read; "
                           f"nothing was cached, so run again once it stays unchanged")


def _encode_to_file(scan: CorpusScan, vocab: Vocab, path: Path, length: int, chunk_bytes: int) -> None:
    """Encode the corpus into ``path`` through a temporary sibling, so no reader sees half a file. The
    space is reserved first: filling a memory map on a full disk would kill the process."""

    def failure(exc: OSError) -> str:
        return (f"cannot write the corpus cache {path}: {reason(exc)} "
                f"(set {CACHE_DIR_ENV} to a writable directory with room)")

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path.parent)
    except OSError as exc:
        raise CacheUnwritable(failure(exc)) from None
    with replacing(path, failure, CacheUnwritable) as tmp_name:
        with open(tmp_name, "r+b") as handle:
            os.posix_fallocate(handle.fileno(), 0, length * vocab.id_dtype.itemsize)
        out = torch.from_file(tmp_name, shared=True, size=length, dtype=vocab.id_dtype)
        try:
            _encode_into(scan, vocab, out, chunk_bytes)
        finally:
            del out  # unmaps, so the fsync that follows covers every id
    try:  # written after the ids are in place: ids without a matching digest are never trusted
        replace_text(_digest_path(path), file_sha256(path) + "\n")
    except (OSError, CharrnnError) as exc:
        raise CacheUnwritable(failure(exc) if isinstance(exc, OSError) else str(exc)) from None


# ------------------------------------------------------------------------ corpora, their split and batches

def corpus_name(path: Path) -> str:
    """A short name for run directories and model cards: the file's stem or the directory's name, and for
    char-rnn's layout (``data/NAME/input.txt``) its directory's name."""
    if path.is_dir():
        return path.name
    if path.name == "input.txt" and path.parent.name not in ("", ".", ".."):
        return path.parent.name
    return path.stem


def read_corpus(path: Path) -> str:
    """A corpus as one string, for short texts (primes, texts to inspect); never for corpora to train on."""
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


def encode_corpus(path: Path, name: str, val_frac: float, vocab: Vocab | None = None,
                  extend_vocab: bool = False, expected_sha256: str | None = None,
                  val_max_chars: int | None = None, split_at: int | None = None) -> EncodedCorpus:
    """Encode a corpus through the id cache, split at ``split_at`` or the tail ``val_frac`` (``val_max_chars``
    at most). A given ``vocab`` refuses other characters unless ``extend_vocab`` appends them (ids stay)."""
    scan = scan_corpus(path)
    if expected_sha256 is not None and scan.sha256 != expected_sha256:
        raise CharrnnError(f"{path} is not the text this run was trained on; resuming needs the same corpus")
    if vocab is None:
        vocab = scan.vocab()
    elif extend_vocab:
        vocab = vocab.extended(scan.vocab().chars)
    split = split_point(scan.chars, val_frac, val_max_chars) if split_at is None else split_at
    return EncodedCorpus(vocab, cached_ids(scan, vocab),
                         CorpusInfo(str(path.resolve()), name, scan.chars, scan.sha256, val_frac, split))


def corpus_location(corpus: dict[str, Any]) -> Path:
    """Where a checkpoint's corpus record is read here: its path, or where nothing is there and the text is a
    known dataset's (another machine's run, the shipped model), the data directory's place for it."""
    recorded = Path(corpus["path"])
    known = None if recorded.exists() else local_copy(corpus["sha256"])
    return recorded if known is None else known[1]


def corpus_path(corpus: dict[str, Any]) -> Path:
    """:func:`corpus_location`, checked to exist and, for a data directory's copy, to hold the same text."""
    recorded = Path(corpus["path"])
    if recorded.exists():
        return recorded
    if (known := local_copy(corpus["sha256"])) is None:
        raise CharrnnError(f"the training corpus {corpus['path']} is gone")
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
    """The validation ids a checkpoint (``corpus``: its corpus record, or None) was trained with."""
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
            raise CharrnnError(f"the training split has {len(ids):,} characters; one batch of "
                               f"{option('batch_size')} {batch_size} × {option('seq_len')} {seq_len} needs "
                               f"at least {minimum:,} (use a longer corpus or smaller "
                               f"{option('batch_size')}/{option('seq_len')})")
        self.batch_size, self.seq_len = batch_size, seq_len
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
