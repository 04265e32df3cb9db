from pathlib import Path

import pytest
import torch

from charrnn.config import VAL_MAX_CHARS, split_point
from charrnn.data.corpus import StreamBatches, encode_corpus, read_corpus, split_ids
from charrnn.errors import CharrnnError


def test_stream_layout_and_targets():
    ids = torch.arange(23)
    batches = StreamBatches(ids, batch_size=3, seq_len=3)
    # L = (23 - 1) // 3 = 7 characters per stream; steps of 3, 3 and 1 columns.
    assert batches.stream_len == 7
    assert len(batches) == 3
    x0, y0 = batches[0]
    assert x0.tolist() == [[0, 1, 2], [7, 8, 9], [14, 15, 16]]
    assert y0.tolist() == [[1, 2, 3], [8, 9, 10], [15, 16, 17]]
    x2, y2 = batches[2]
    assert x2.tolist() == [[6], [13], [20]]
    assert y2.tolist() == [[7], [14], [21]]
    assert x0.dtype == torch.int64


def test_consecutive_steps_continue_each_stream():
    ids = torch.arange(1000)
    batches = StreamBatches(ids, batch_size=4, seq_len=10)
    joined = torch.cat([batches[i][0] for i in range(len(batches))], dim=1)
    assert torch.equal(joined, ids[: 4 * batches.stream_len].view(4, -1))


def test_too_short_for_one_batch_names_minimum():
    with pytest.raises(CharrnnError, match="needs at least 33"):
        StreamBatches(torch.arange(20), batch_size=4, seq_len=8)


def test_split_matches_nanogpt():
    assert split_point(1_115_394, 0.1) == 1_003_854
    assert split_point(1_115_394, 0.1, VAL_MAX_CHARS) == 1_003_854  # tiny Shakespeare is under the cap
    split = split_ids(torch.arange(100), split_point(100, 0.1))
    assert len(split.train) == 90 and split.val[0] == 90


def test_directory_corpus_is_sorted_concatenation(tmp_path: Path):
    (tmp_path / "b.txt").write_text("second", encoding="utf-8")
    (tmp_path / "a.txt").write_text("first ", encoding="utf-8")
    (tmp_path / "skip.md").write_text("ignored", encoding="utf-8")
    assert read_corpus(tmp_path) == "first second"


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "does not exist"), (b"", "is empty"), (b"ok \xff\xfe bad", "not UTF-8")],
)
def test_bad_corpora(tmp_path: Path, content, message):
    path = tmp_path / "corpus.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(CharrnnError, match=message):
        read_corpus(path)


def test_empty_directory(tmp_path: Path):
    with pytest.raises(CharrnnError, match="no \\*.txt"):
        read_corpus(tmp_path)


def test_a_large_corpus_holds_out_at_most_the_cap():
    assert split_point(100_000_000, 0.1, VAL_MAX_CHARS) == 100_000_000 - VAL_MAX_CHARS
    assert split_point(100_000_000, 0.1, None) == 90_000_000
    assert split_point(1000, 0.5, 10) == 990


def test_encode_corpus_records_split(small_corpus: Path):
    encoded = encode_corpus(small_corpus, "small", 0.25)
    assert encoded.info.chars == len(encoded.ids)
    assert encoded.info.split_point == int(len(encoded.ids) * 0.75)
    assert Path(encoded.info.path).is_absolute()
    capped = encode_corpus(small_corpus, "small", 0.25, val_max_chars=100)
    assert capped.info.split_point == len(encoded.ids) - 100
    assert encode_corpus(small_corpus, "small", 0.25, val_max_chars=100, split_at=7).info.split_point == 7


def test_a_file_that_cannot_be_read_as_text_is_named_by_its_path_not_a_role(tmp_path):
    """The same reader takes corpora, primes and texts to score: its errors name the file, and the
    caller's option says what it was for."""
    bad = tmp_path / "prime.txt"
    bad.write_bytes(b"ok\xff")
    not_text = r"^\S*prime\.txt is not UTF-8 text \(invalid byte 0xff at offset 2\)$"
    with pytest.raises(CharrnnError, match=not_text):
        read_corpus(bad)
    with pytest.raises(CharrnnError, match=r"^\S*missing\.txt does not exist$"):
        read_corpus(tmp_path / "missing.txt")
