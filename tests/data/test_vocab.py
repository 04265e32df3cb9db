import pytest
import torch

from charrnn.data.vocab import UnknownCharactersError, Vocab, code_points, id_dtype
from charrnn.errors import CharrnnError


def test_a_round_trip_with_non_ascii_ids_in_code_point_order_and_emoji_and_cjk_one_symbol_each():
    text = "Héllo, 世界! 🙂 naïve café\n\ttab"
    vocab = Vocab.from_text(text)
    ids = vocab.encode(text)
    assert vocab.decode(ids) == text and len(ids) == len(text)  # one id per code point, not per byte
    vocab = Vocab.from_text("cab🙂é")
    assert vocab.chars == ("a", "b", "c", "é", "🙂")
    assert vocab.encode("🙂a").tolist() == [4, 0]
    vocab = Vocab.from_text("語🙂語")
    assert len(vocab) == 2 and vocab.chars == ("語", "🙂")  # code point order: U+8A9E before U+1F642
    ids = vocab.encode("🙂語🙂")
    assert ids.tolist() == [1, 0, 1] and vocab.decode(ids.tolist()) == "🙂語🙂"
    wide = Vocab.from_text("".join(chr(0x4E00 + i) for i in range(300)) + "🙂")  # more than 256: uint16 ids
    text = "".join(wide.chars[::-1])
    assert wide.encode(text).dtype == torch.uint16 and wide.decode(wide.encode(text)) == text


@pytest.mark.parametrize("size, dtype", [(1, torch.uint8), (256, torch.uint8), (257, torch.uint16),
                                         (65_536, torch.uint16), (65_537, torch.uint32)])
def test_smallest_id_dtype(size: int, dtype: torch.dtype):
    assert id_dtype(size) == dtype


def test_extended_vocabulary_keeps_every_id_and_appends_and_duplicates_are_refused():
    vocab = Vocab.from_text("cab")
    wider = vocab.extended("zebra!")
    assert wider.chars == ("a", "b", "c", "!", "e", "r", "z")
    assert wider.encode("abc").tolist() == vocab.encode("abc").tolist()
    assert wider.decode(wider.encode("zebra!cab")) == "zebra!cab"
    assert wider.encode("!z").tolist() == [3, 6]
    assert Vocab.from_list(wider.to_list()) == wider  # the order survives a checkpoint
    with pytest.raises(CharrnnError, match="unique"):
        Vocab(("a", "a"))
    vocab = Vocab.from_text("abc")
    assert vocab.outside({"a": 3, "z": 2, "é": 1}) == {"z": 2, "é": 1}
    with pytest.raises(UnknownCharactersError) as raised:
        vocab.encode("abzzé")
    assert raised.value.unknown == {"z": 2, "é": 1} and "'z' (U+007A) ×2" in str(raised.value)
    assert vocab.decode(vocab.encode("a?b!c", skip_unknown=True)) == "abc"  # or skipped
    points = torch.tensor([ord("a"), ord("z"), 0x1F642, ord("b")], dtype=torch.int32)
    assert vocab.lookup(points).tolist() == [0, -1, -1, 1]  # the table marks them
    assert code_points("").shape == (0,)

