import hashlib
import os
from pathlib import Path

import pytest
import torch

from charrnn.data import cache as corpus_cache
from charrnn.data.cache import cache_name, cached_ids, scan_corpus
from charrnn.data.corpus import encode_corpus
from charrnn.data.vocab import UnknownCharactersError, Vocab
from charrnn.errors import CharrnnError

# Two-, three- and four-byte characters, so that small chunks split them.
MIXED = "Café naïve — 語 🙂 end.\n" * 50


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 5, 7, 64, 1 << 20])
def test_chunked_encoding_equals_whole_text_encoding(tmp_path: Path, chunk_bytes: int):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus, chunk_bytes=chunk_bytes)
    vocab = Vocab.from_text(MIXED)
    assert scan.vocab() == vocab
    assert scan.chars == len(MIXED)
    assert scan.sha256 == hashlib.sha256(MIXED.encode("utf-8")).hexdigest()
    ids = cached_ids(scan, vocab, cache_dir=tmp_path / "cache", chunk_bytes=chunk_bytes)
    assert torch.equal(ids, vocab.encode(MIXED))


def test_directory_corpus_is_its_files_in_sorted_order(tmp_path: Path):
    write(tmp_path / "b.txt", "second 🙂")
    write(tmp_path / "a.txt", "first é ")
    encoded = encode_corpus(tmp_path, "dir", 0.25)
    assert encoded.vocab.decode(encoded.ids) == "first é second 🙂"
    assert encoded.info.sha256 == hashlib.sha256("first é second 🙂".encode()).hexdigest()


def test_invalid_utf8_is_reported_at_its_offset_in_the_file(tmp_path: Path):
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes("é".encode() * 10 + b"\xff" + b"abc")
    with pytest.raises(CharrnnError, match=r"invalid byte 0xff at offset 20"):
        scan_corpus(corpus, chunk_bytes=3)


def test_a_truncated_multibyte_character_at_the_end_is_invalid(tmp_path: Path):
    corpus = tmp_path / "cut.txt"
    corpus.write_bytes(b"abc" + "🙂".encode()[:2])
    with pytest.raises(CharrnnError, match="offset 3"):
        scan_corpus(corpus, chunk_bytes=2)


def test_second_use_maps_the_cached_file_without_encoding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    first = encode_corpus(corpus, "mixed", 0.1)

    def fail(*args, **kwargs):
        raise AssertionError("encoded again")

    monkeypatch.setattr(corpus_cache, "_encode_to_file", fail)
    second = encode_corpus(corpus, "mixed", 0.1)
    assert torch.equal(first.ids, second.ids)


def test_cache_is_keyed_by_content_and_vocabulary(tmp_path: Path):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus)
    own = scan.vocab()
    wider = Vocab(("x",) + own.chars)
    assert cache_name(scan, own, False) != cache_name(scan, wider, False)
    cache = tmp_path / "cache"
    assert torch.equal(cached_ids(scan, wider, cache_dir=cache), wider.encode(MIXED))
    assert torch.equal(cached_ids(scan, own, cache_dir=cache), own.encode(MIXED))
    assert len(list(cache.glob("*.uint8"))) == 2  # beside each, its .sha256
    write(corpus, MIXED + "!")
    assert cache_name(scan_corpus(corpus), own, False) != cache_name(scan, own, False)


def test_a_cache_file_of_the_wrong_size_is_rebuilt(tmp_path: Path):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus)
    vocab = scan.vocab()
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / cache_name(scan, vocab, False)).write_bytes(b"\x00" * 10)
    assert torch.equal(cached_ids(scan, vocab, cache_dir=cache), vocab.encode(MIXED))


@pytest.mark.parametrize("damage", ["same-size edit", "no digest", "symlink"])
def test_a_cache_file_is_trusted_only_by_its_content_hash(tmp_path: Path, damage: str):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus)
    vocab = scan.vocab()
    cache = tmp_path / "cache"
    expected = vocab.encode(MIXED)
    assert torch.equal(cached_ids(scan, vocab, cache_dir=cache), expected)
    path = cache / cache_name(scan, vocab, False)
    if damage == "same-size edit":
        path.write_bytes(bytes(reversed(path.read_bytes())))
    elif damage == "no digest":
        path.with_name(path.name + ".sha256").unlink()
    else:
        elsewhere = tmp_path / "elsewhere"
        path.rename(elsewhere)
        path.symlink_to(elsewhere)
    assert torch.equal(cached_ids(scan, vocab, cache_dir=cache), expected)
    assert not path.is_symlink()


def test_unknown_characters_are_an_error_or_skipped(tmp_path: Path):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus)
    ascii_only = Vocab.from_text("".join(c for c in MIXED if c.isascii()))
    with pytest.raises(UnknownCharactersError, match="'🙂' \\(U\\+1F642\\) ×50"):
        cached_ids(scan, ascii_only, cache_dir=tmp_path)
    kept = cached_ids(scan, ascii_only, skip_unknown=True, cache_dir=tmp_path)
    assert ascii_only.decode(kept) == "".join(c for c in MIXED if c.isascii())


def test_wide_vocabulary_is_stored_as_uint16(tmp_path: Path):
    text = "".join(chr(0x4E00 + i) for i in range(400)) * 3
    encoded = encode_corpus(write(tmp_path / "cjk.txt", text), "cjk", 0.1)
    assert encoded.ids.dtype == torch.uint16
    assert encoded.vocab.decode(encoded.ids) == text


def test_a_wide_vocabulary_s_cache_is_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The second use checks the cached uint16 ids (torch has no max for uint16), chunk by chunk."""
    text = "".join(chr(0x4E00 + i) for i in range(400)) * 30
    corpus = write(tmp_path / "cjk.txt", text)
    first = encode_corpus(corpus, "cjk", 0.1)
    monkeypatch.setattr(corpus_cache, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(corpus_cache, "_encode_to_file", lambda *args, **kwargs: pytest.fail("encoded again"))
    second = encode_corpus(corpus, "cjk", 0.1)
    assert second.ids.dtype == torch.uint16 and torch.equal(first.ids.int(), second.ids.int())


def test_ids_are_a_memory_map_of_the_cache_file(tmp_path: Path, corpus_cache_dir: Path):
    encoded = encode_corpus(write(tmp_path / "mixed.txt", MIXED), "mixed", 0.1)
    name = cache_name(scan_corpus(tmp_path / "mixed.txt"), encoded.vocab, False)
    assert (corpus_cache_dir / name).stat().st_size == len(MIXED)
    assert str(corpus_cache_dir / name) in Path("/proc/self/maps").read_text()


def test_an_unwritable_cache_encodes_small_texts_in_memory(tmp_path: Path):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    scan = scan_corpus(corpus)
    ids = cached_ids(scan, scan.vocab(), cache_dir=blocker / "cache")
    assert scan.vocab().decode(ids) == MIXED


def test_an_unwritable_cache_names_the_variable_for_large_texts(tmp_path: Path, monkeypatch):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    monkeypatch.setattr(corpus_cache, "IN_MEMORY_LIMIT_BYTES", 10)
    scan = scan_corpus(corpus)
    with pytest.raises(CharrnnError, match="cannot write the corpus cache .*CHARRNN_CACHE_DIR"):
        cached_ids(scan, scan.vocab(), cache_dir=blocker / "cache")


def test_a_same_length_edit_between_scan_and_encoding_is_never_cached(tmp_path: Path):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus)
    corpus.write_text(MIXED.replace("a", "b", 1), encoding="utf-8")  # same length, same vocabulary
    cache = tmp_path / "cache"
    with pytest.raises(CharrnnError, match="changed while it was being read"):
        cached_ids(scan, scan.vocab(), cache_dir=cache)
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_corpus_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path, kind):
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    else:
        path = Path("/dev/zero")
    with pytest.raises(CharrnnError, match="is not a regular file"):
        scan_corpus(path)


def test_a_symlink_loop_corpus_is_named_as_such(tmp_path: Path):
    (tmp_path / "a.txt").symlink_to(tmp_path / "b.txt")
    (tmp_path / "b.txt").symlink_to(tmp_path / "a.txt")
    with pytest.raises(CharrnnError, match="symbolic links"):
        scan_corpus(tmp_path / "a.txt")


def test_a_failed_encoding_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus)
    cache = tmp_path / "cache"

    def broken_lookup(self, points):
        raise KeyboardInterrupt

    monkeypatch.setattr(Vocab, "lookup", broken_lookup)
    with pytest.raises(KeyboardInterrupt):
        cached_ids(scan, scan.vocab(), cache_dir=cache)
    assert list(cache.iterdir()) == []
