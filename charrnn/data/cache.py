"""Encoding a corpus once: a streaming, vectorised encoder and a content-addressed id cache
(docs/how-it-works.md, "Corpora of any size"). :func:`scan_corpus` hashes and counts the text chunk by
chunk; :func:`cached_ids` writes its ids to a file named by content and vocabulary, which training
memory-maps once its SHA-256 matches the one beside it. Deleting the cache is always safe."""

from __future__ import annotations

import codecs
import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from charrnn.data.vocab import UnknownCharactersError, Vocab, code_points
from charrnn.errors import CharrnnError
from charrnn.models.pretrained import refuse_writing_in_shipped
from charrnn.utils.files import (
    file_sha256,
    read_regular,
    reason,
    remove_stale_temporaries,
    replace_text,
    replacing,
)

CACHE_DIR_ENV = "CHARRNN_CACHE_DIR"
CHUNK_BYTES = 1 << 22  # 4 MiB of text per chunk: bounded memory, large enough to vectorise well
IN_MEMORY_LIMIT_BYTES = 1 << 28  # ids of texts up to this size are kept in memory if the cache is unwritable


def default_cache_dir() -> Path:
    """``$CHARRNN_CACHE_DIR``, else ``$XDG_CACHE_HOME/charrnn``, else ``~/.cache/charrnn``."""
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "charrnn"


def corpus_files(path: Path) -> list[Path]:
    """The files a corpus (or a prime, or a text to score) consists of: the file itself, or a directory's
    sorted ``*.txt``. Only regular files: a FIFO or device would hang or never end, and a stream cannot be
    read twice (to scan, then encode). Errors name the path; the caller's option names its role."""
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


def _largest_id(ids: torch.Tensor) -> int:
    """The largest id, a chunk at a time: torch has no max for uint16 (vocabularies over 256), and
    converting a whole memory-mapped corpus at once would hold it all in memory."""
    step = CHUNK_BYTES
    return max(int(ids[start:start + step].to(torch.int32).max()) for start in range(0, len(ids), step))


def _file_chunks(file: Path, chunk_bytes: int) -> Iterator[tuple[bytes, torch.Tensor]]:
    """Each chunk of ``file`` as its raw bytes and the code points it completes (a character split
    across chunks counts in the second). ASCII chunks skip decoding: their bytes are their code points
    (``uint8``); others give ``int32``."""
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
            if not pending and raw.isascii():
                points = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else \
                    torch.empty(0, dtype=torch.uint8)
            else:
                try:
                    points = code_points(decoder.decode(raw, final))
                except UnicodeDecodeError as exc:
                    raise not_utf8_error(file, exc.object[exc.start], offset - pending + exc.start) from None
            yield raw, points
            offset += len(raw)
            if final:
                return


def _chunks(files: list[Path], chunk_bytes: int) -> Iterator[tuple[bytes, torch.Tensor]]:
    for file in files:
        yield from _file_chunks(file, chunk_bytes)


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
        if not len(points):
            continue
        chunk_counts = torch.bincount(points, minlength=len(counts))
        if len(chunk_counts) > len(counts):
            chunk_counts[: len(counts)] += counts
            counts = chunk_counts
        else:
            counts += chunk_counts
        chars += len(points)
    if chars == 0:
        raise CharrnnError(f"{path} is empty: it holds no text")
    return CorpusScan(tuple(files), digest.hexdigest(), chars, counts)


def cache_name(scan: CorpusScan, vocab: Vocab, dropped_unknown: bool) -> str:
    """``<content sha256>-<vocabulary digest>[-known].<dtype>``: one file per text and vocabulary
    (``-known``: characters outside the vocabulary were left out)."""
    dtype = str(vocab.id_dtype).removeprefix("torch.")
    return f"{scan.sha256}-{vocab.digest()[:16]}{'-known' if dropped_unknown else ''}.{dtype}"


def cached_ids(scan: CorpusScan, vocab: Vocab, skip_unknown: bool = False, cache_dir: Path | None = None,
               chunk_bytes: int = CHUNK_BYTES) -> torch.Tensor:
    """The corpus's ids under ``vocab``, ``(N,)``: a read-only memory map of the cached encoding, made
    on the first call. A character outside the vocabulary is an error unless ``skip_unknown`` leaves it
    out. Where the cache cannot be written, ids up to ``IN_MEMORY_LIMIT_BYTES`` are kept in memory."""
    unknown = vocab.outside(scan.char_counts())
    if unknown and not skip_unknown:
        raise UnknownCharactersError(unknown)
    length = scan.chars - sum(unknown.values())
    if length == 0:
        return torch.empty(0, dtype=vocab.id_dtype)
    cache_dir = cache_dir or default_cache_dir()
    refuse_writing_in_shipped(cache_dir, CACHE_DIR_ENV, "directory", by_option=False)
    path = cache_dir / cache_name(scan, vocab, dropped_unknown=bool(unknown))
    itemsize = vocab.id_dtype.itemsize
    if _verified(path, length * itemsize):
        ids = torch.from_file(str(path), shared=False, size=length, dtype=vocab.id_dtype)
        if _largest_id(ids) < len(vocab):  # a file and digest edited together are still never trusted
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
    """Whether the cached ids at ``path`` are whole and unchanged: a regular file of ``size`` bytes whose
    SHA-256 is the one recorded beside it when it was written. Anything else is rebuilt."""
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
