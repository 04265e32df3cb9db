import hashlib
import json
import os
from pathlib import Path

import pytest
import torch

from charrnn.config import VAL_MAX_CHARS, split_point
from charrnn.data import corpus as corpus_cache
from charrnn.data.corpus import (
    StreamBatches,
    cache_name,
    cached_ids,
    corpus_name,
    encode_corpus,
    read_corpus,
    scan_corpus,
    split_ids,
)
from charrnn.data.vocab import UnknownCharactersError, Vocab
from charrnn.errors import CharrnnError
from charrnn.models.pretrained import SHIPPED_FOLDER


def test_stream_layout_targets_and_continuation_and_too_short_a_text_names_its_minimum():
    ids = torch.arange(23)
    batches = StreamBatches(ids, batch_size=3, seq_len=3)
    # L = (23 - 1) // 3 = 7 characters per stream; steps of 3, 3 and 1 columns.
    assert (batches.stream_len, len(batches)) == (7, 3)
    x0, y0 = batches[0]
    assert x0.tolist() == [[0, 1, 2], [7, 8, 9], [14, 15, 16]]
    assert y0.tolist() == [[1, 2, 3], [8, 9, 10], [15, 16, 17]]
    x2, y2 = batches[2]
    assert x2.tolist() == [[6], [13], [20]]
    assert y2.tolist() == [[7], [14], [21]]
    assert x0.dtype == torch.int64
    ids = torch.arange(1000)  # consecutive steps continue each stream
    batches = StreamBatches(ids, batch_size=4, seq_len=10)
    joined = torch.cat([batches[i][0] for i in range(len(batches))], dim=1)
    assert torch.equal(joined, ids[: 4 * batches.stream_len].view(4, -1))
    with pytest.raises(CharrnnError, match="needs at least 33"):
        StreamBatches(torch.arange(20), batch_size=4, seq_len=8)


def test_split_matches_nanogpt_and_encode_corpus_records_it(small_corpus: Path):
    assert split_point(1_115_394, 0.1) == 1_003_854
    assert split_point(1_115_394, 0.1, VAL_MAX_CHARS) == 1_003_854  # tiny Shakespeare is under the cap
    split = split_ids(torch.arange(100), split_point(100, 0.1))
    assert len(split.train) == 90 and split.val[0] == 90
    # A large corpus holds out at most the cap.
    assert split_point(100_000_000, 0.1, VAL_MAX_CHARS) == 100_000_000 - VAL_MAX_CHARS
    assert split_point(100_000_000, 0.1, None) == 90_000_000
    assert split_point(1000, 0.5, 10) == 990
    encoded = encode_corpus(small_corpus, "small", 0.25)
    assert encoded.info.chars == len(encoded.ids)
    assert encoded.info.split_point == int(len(encoded.ids) * 0.75)
    assert Path(encoded.info.path).is_absolute()
    capped = encode_corpus(small_corpus, "small", 0.25, val_max_chars=100)
    assert capped.info.split_point == len(encoded.ids) - 100
    assert encode_corpus(small_corpus, "small", 0.25, val_max_chars=100, split_at=7).info.split_point == 7


def test_an_empty_file_or_directory_is_no_corpus_and_a_file_unread_is_named_by_its_path_not_a_role(tmp_path):
    """One reader takes corpora, primes and texts: its errors name the file, the caller's option its use."""
    with pytest.raises(CharrnnError, match="no \\*.txt"):
        read_corpus(tmp_path)
    (tmp_path / "corpus.txt").write_bytes(b"")
    with pytest.raises(CharrnnError, match="is empty"):
        read_corpus(tmp_path / "corpus.txt")
    bad = tmp_path / "prime.txt"
    bad.write_bytes(b"ok\xff")
    not_text = r"^\S*prime\.txt is not UTF-8 text \(invalid byte 0xff at offset 2\)$"
    with pytest.raises(CharrnnError, match=not_text):
        read_corpus(bad)
    with pytest.raises(CharrnnError, match=r"^\S*missing\.txt does not exist$"):
        read_corpus(tmp_path / "missing.txt")


# ---------------------------------------------------------------------------- the encoded corpus cache

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


def test_a_directory_corpus_is_its_text_files_in_order_and_a_corpus_named_by_stem_or_folder(tmp_path: Path):
    write(tmp_path / "b.txt", "second 🙂")
    write(tmp_path / "a.txt", "first é ")
    write(tmp_path / "skip.md", "ignored")
    assert read_corpus(tmp_path) == "first é second 🙂"
    encoded = encode_corpus(tmp_path, "dir", 0.25)
    assert encoded.vocab.decode(encoded.ids) == "first é second 🙂"
    assert encoded.info.sha256 == hashlib.sha256("first é second 🙂".encode()).hexdigest()
    (tmp_path / "poems").mkdir()
    assert corpus_name(tmp_path / "poems") == "poems"
    assert corpus_name(tmp_path / "poems" / "odes.txt") == "odes"
    assert corpus_name(tmp_path / "tinyshakespeare" / "input.txt") == "tinyshakespeare"  # char-rnn's layout
    assert corpus_name(Path("input.txt")) == "input"  # no folder to name it by


@pytest.mark.parametrize(("content", "chunk_bytes", "message"), [
    ("é".encode() * 10 + b"\xff" + b"abc", 3, r"invalid byte 0xff at offset 20"),
    (b"abc" + "🙂".encode()[:2], 2, "offset 3"),  # a multibyte character cut short at the end
])
def test_invalid_utf8_is_reported_at_its_offset_in_the_file(tmp_path: Path, content, chunk_bytes, message):
    (tmp_path / "bad.txt").write_bytes(content)
    with pytest.raises(CharrnnError, match=message):
        scan_corpus(tmp_path / "bad.txt", chunk_bytes=chunk_bytes)


def test_the_ids_map_the_cache_file_which_a_second_use_maps_without_encoding(tmp_path: Path, monkeypatch,
                                                                              corpus_cache_dir: Path):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    first = encode_corpus(corpus, "mixed", 0.1)
    name = cache_name(scan_corpus(corpus), first.vocab, False)  # the ids are a memory map of the cache file
    assert (corpus_cache_dir / name).stat().st_size == len(MIXED)
    assert str(corpus_cache_dir / name) in Path("/proc/self/maps").read_text()

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


@pytest.mark.parametrize("damage", ["wrong size", "same-size edit", "no digest", "symlink",
                                    "ids and digest edited"])
def test_a_cache_file_is_trusted_only_by_its_content_hash(tmp_path: Path, damage: str):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus)
    vocab = scan.vocab()
    cache = tmp_path / "cache"
    expected = vocab.encode(MIXED)
    assert torch.equal(cached_ids(scan, vocab, cache_dir=cache), expected)
    path = cache / cache_name(scan, vocab, False)
    if damage == "wrong size":
        path.write_bytes(b"\x00" * 10)
    elif damage == "same-size edit":
        path.write_bytes(bytes(reversed(path.read_bytes())))
    elif damage == "no digest":
        path.with_name(path.name + ".sha256").unlink()
    elif damage == "ids and digest edited":  # ids far outside the vocabulary, under a digest that matches
        path.write_bytes(b"\xff" * path.stat().st_size)
        path.with_name(path.name + ".sha256").write_text(hashlib.sha256(path.read_bytes()).hexdigest())
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


def test_a_wide_vocabulary_is_stored_as_uint16_and_read_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The second use checks the cached uint16 ids (torch has no max for uint16), chunk by chunk."""
    text = "".join(chr(0x4E00 + i) for i in range(400)) * 30
    corpus = write(tmp_path / "cjk.txt", text)
    first = encode_corpus(corpus, "cjk", 0.1)
    assert first.ids.dtype == torch.uint16 and first.vocab.decode(first.ids) == text
    monkeypatch.setattr(corpus_cache, "CHUNK_BYTES", 1000)
    monkeypatch.setattr(corpus_cache, "_encode_to_file", lambda *args, **kwargs: pytest.fail("encoded again"))
    second = encode_corpus(corpus, "cjk", 0.1)
    assert second.ids.dtype == torch.uint16 and torch.equal(first.ids.int(), second.ids.int())


def test_an_unwritable_cache_encodes_small_texts_in_memory_and_names_the_variable_for_large_ones(
        tmp_path: Path, monkeypatch):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")
    scan = scan_corpus(corpus)
    ids = cached_ids(scan, scan.vocab(), cache_dir=blocker / "cache")
    assert scan.vocab().decode(ids) == MIXED
    monkeypatch.setattr(corpus_cache, "IN_MEMORY_LIMIT_BYTES", 10)
    with pytest.raises(CharrnnError, match="cannot write the corpus cache .*CHARRNN_CACHE_DIR"):
        cached_ids(scan, scan.vocab(), cache_dir=blocker / "cache")


def test_an_edit_after_the_scan_or_a_failed_encoding_leaves_nothing_cached(tmp_path: Path, monkeypatch):
    corpus = write(tmp_path / "mixed.txt", MIXED)
    scan = scan_corpus(corpus)
    corpus.write_text(MIXED.replace("a", "b", 1), encoding="utf-8")  # same length, same vocabulary
    cache = tmp_path / "cache"
    with pytest.raises(CharrnnError, match="changed while it was being read"):
        cached_ids(scan, scan.vocab(), cache_dir=cache)
    assert list(cache.iterdir()) == []
    scan = scan_corpus(write(corpus, MIXED))

    def broken_lookup(self, points):
        raise KeyboardInterrupt

    monkeypatch.setattr(Vocab, "lookup", broken_lookup)
    with pytest.raises(KeyboardInterrupt):
        cached_ids(scan, scan.vocab(), cache_dir=cache)
    assert list(cache.iterdir()) == []


def test_a_corpus_that_is_not_a_regular_file_is_refused_at_once(tmp_path: Path):
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "a.txt").symlink_to(tmp_path / "b.txt")
    (tmp_path / "b.txt").symlink_to(tmp_path / "a.txt")
    refusals = {tmp_path / "pipe": "is not a regular file", Path("/dev/zero"): "is not a regular file",
                tmp_path / "a.txt": "symbolic links"}
    for path, message in refusals.items():
        with pytest.raises(CharrnnError, match=message):
            scan_corpus(path)


@pytest.mark.parametrize(("cache", "fragment"), [
    ("model", "is inside the model folder"),
    ("model/cache/deeper", "is inside the model folder"),
    ("link/cache", "is inside the model folder"),
    (str(SHIPPED_FOLDER / "shakespeare"), "is in the folder of the model that comes with charrnn"),
])
def test_a_cache_directory_among_models_is_refused_and_nothing_written(tmp_path: Path, monkeypatch, cache,
                                                                       fragment):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"format": "charrnn-model"}), encoding="utf-8")
    (tmp_path / "link").symlink_to(model, target_is_directory=True)
    monkeypatch.setenv("CHARRNN_CACHE_DIR", str(tmp_path / cache))
    scan = scan_corpus(write(tmp_path / "mixed.txt", MIXED))
    shipped_before = sorted(SHIPPED_FOLDER.rglob("*"))
    with pytest.raises(CharrnnError, match=f"CHARRNN_CACHE_DIR .*{fragment}"):
        cached_ids(scan, scan.vocab())
    assert [path.name for path in model.iterdir()] == ["config.json"]
    assert sorted(SHIPPED_FOLDER.rglob("*")) == shipped_before

