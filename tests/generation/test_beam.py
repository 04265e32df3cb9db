import itertools
import math

import pytest
import torch

from charrnn.config import ModelConfig, SampleConfig
from charrnn.data.vocab import Vocab
from charrnn.generation.beam import beam_search, length_normaliser
from charrnn.generation.sample import RepeatGuard, generate, repeat_followers
from charrnn.models.model import CharRNN
from charrnn.training.checkpoint import load_model


def score_text(model: CharRNN, vocab: Vocab, prime: str, text: str) -> float:
    """Total log-probability of ``text`` after ``prime``, recomputed with the fused module."""
    ids = vocab.encode(prime + text).long().unsqueeze(0)
    with torch.no_grad():
        logits, _ = model(ids[:, :-1])
    log_probs = torch.log_softmax(logits[0].double(), dim=-1)
    targets = ids[0, 1:]
    picked = log_probs[torch.arange(len(targets)), targets]
    return float(picked[len(prime) - 1 :].sum())


def slow_reference(model: CharRNN, vocab: Vocab, prime: str, width: int, length: int):
    """One beam at a time through nn.LSTM: the textbook loop, written for clarity, not speed."""
    ids = vocab.encode(prime).long().unsqueeze(0)
    with torch.no_grad():
        _, state = model(ids[:, :-1])
    beams = [(0.0, [], state, int(ids[0, -1]))]
    for _ in range(length):
        candidates = []
        for score, text, state, last in beams:
            with torch.no_grad():
                logits, new_state = model(torch.tensor([[last]]), state)
            log_probs = torch.log_softmax(logits[0, -1].double(), dim=-1)
            for symbol in range(len(vocab)):
                candidates.append((score + float(log_probs[symbol]), text + [symbol], new_state, symbol))
        candidates.sort(key=lambda c: -c[0])
        beams = candidates[:width]
    return [(vocab.decode(text), score) for score, text, _, _ in beams]


@pytest.fixture
def toy():
    torch.manual_seed(11)
    model = CharRNN(ModelConfig(vocab_size=3, cell="lstm", num_layers=2, hidden_size=6, embed_size=3)).eval()
    with torch.no_grad():
        model.head.weight.mul_(4)  # sharper distributions, so sequences are far from tied
    return model, Vocab(("a", "b", "c"))


@pytest.mark.parametrize("rule", [{}, {"no_repeat": 8}])
def test_width_one_equals_greedy_with_or_without_the_no_repeat_rule(tiny_checkpoint, rule):
    loaded = load_model(tiny_checkpoint)
    (beam,) = beam_search(loaded.network, loaded.vocab, "ROMEO:", width=1, length=200, **rule)
    greedy = "".join(c[0] for c in generate(loaded.network, loaded.vocab,
                                            SampleConfig(length=200, greedy=True, **rule), "ROMEO:"))
    assert beam.text == greedy


def test_a_wide_beam_finds_the_brute_force_optimum_and_a_stop_string_freezes_a_beam_with_its_score(toy):
    model, vocab = toy
    every = {"".join(seq): score_text(model, vocab, "a", "".join(seq))
             for seq in itertools.product("abc", repeat=4)}
    beams = beam_search(model, vocab, "a", width=81, length=4)
    best = max(every, key=every.get)
    assert beams[0].text == best
    assert beams[0].log_prob == pytest.approx(every[best], abs=1e-5)
    assert sorted(b.text for b in beams) == sorted(every)
    assert math.fsum(math.exp(b.log_prob) for b in beams) == pytest.approx(1.0, abs=1e-5)
    beams = beam_search(model, vocab, "a", width=9, length=6, stop_at="b")  # a stop freezes a beam's score
    for beam in beams:
        if beam.stopped:
            assert beam.text.endswith("b") and beam.text.count("b") == 1
            assert beam.log_prob == pytest.approx(score_text(model, vocab, "a", beam.text), abs=1e-5)
        else:
            assert "b" not in beam.text and len(beam.text) == 6
    assert any(b.stopped for b in beams)
    assert [b.log_prob for b in beams] == sorted((b.log_prob for b in beams), reverse=True)
    assert beam_search(model, vocab, "a", width=3, length=0)[0].text == ""  # a length of zero


@pytest.mark.parametrize("cell", ["lstm", "gru", "rnn"])
def test_batched_equals_one_beam_at_a_time(cell):
    torch.manual_seed(5)
    model = CharRNN(ModelConfig(vocab_size=5, cell=cell, num_layers=2, hidden_size=8, embed_size=4)).eval()
    vocab = Vocab(tuple("abcde"))
    fast = beam_search(model, vocab, "abc", width=4, length=7)
    slow = slow_reference(model, vocab, "abc", width=4, length=7)
    assert [b.text for b in fast] == [text for text, _ in slow]
    for beam, (_, score) in zip(fast, slow, strict=True):
        assert beam.log_prob == pytest.approx(score, abs=1e-5)


@pytest.mark.cuda
def test_beam_search_on_cuda_finds_the_cpu_beams(tiny_checkpoint):
    cpu_beams, gpu_beams = (beam_search(loaded.network, loaded.vocab, "ROMEO:", 4, 40)
                            for loaded in (load_model(tiny_checkpoint), load_model(tiny_checkpoint, "cuda")))
    assert [b.text for b in gpu_beams] == [b.text for b in cpu_beams]
    assert [b.log_prob for b in gpu_beams] == pytest.approx([b.log_prob for b in cpu_beams], abs=1e-3)


def test_scores_are_the_texts_and_length_penalty_zero_is_the_plain_total_and_ranks_are_normalised(
        tiny_checkpoint):
    loaded = load_model(tiny_checkpoint)
    for beam in beam_search(loaded.network, loaded.vocab, "JULIET:\n", width=5, length=40):
        rescored = score_text(loaded.network, loaded.vocab, "JULIET:\n", beam.text)
        assert beam.log_prob == pytest.approx(rescored, abs=1e-4)
    plain = beam_search(loaded.network, loaded.vocab, "ROMEO:", 6, 60, "\n")
    zero = beam_search(loaded.network, loaded.vocab, "ROMEO:", 6, 60, "\n", length_penalty=0.0)
    assert [(b.text, b.log_prob) for b in plain] == [(b.text, b.log_prob) for b in zero]
    for alpha in (1.0, 2.0):
        beams = beam_search(loaded.network, loaded.vocab, "ROMEO:", 6, 60, "\n", length_penalty=alpha)
        normalised = [b.log_prob / length_normaliser(torch.tensor(len(b.text)), alpha).item() for b in beams]
        assert normalised == sorted(normalised, reverse=True)
        for beam in beams:  # scores stay the true totals
            rescored = score_text(loaded.network, loaded.vocab, "ROMEO:", beam.text)
            assert beam.log_prob == pytest.approx(rescored, abs=1e-3)


def test_min_length_keeps_stop_strings_from_ending_short_texts(tiny_checkpoint):
    loaded = load_model(tiny_checkpoint)
    # Without it, a line break ends beams and samples early: "ROMEO:" ends a line of the corpus.
    short = beam_search(loaded.network, loaded.vocab, "ROMEO:", 4, 80, "\n")
    assert any(beam.stopped and len(beam.text) < 25 for beam in short)
    beams = beam_search(loaded.network, loaded.vocab, "ROMEO:", 4, 80, "\n", min_length=25)
    assert all(len(beam.text) >= 25 or not beam.stopped for beam in beams)

    def sampled(min_length: int) -> list[str]:
        config = SampleConfig(length=80, stop_at="\n", min_length=min_length, seed=1, num_samples=3)
        steps = generate(loaded.network, loaded.vocab, config, "ROMEO:")
        return ["".join(chars) for chars in zip(*steps, strict=True)]

    assert any(len(text) < 25 for text in sampled(0))
    assert all(len(text) >= 25 for text in sampled(25))


def allowed_by_the_rule(text: str, start: int, n: int, vocab: Vocab) -> bool:
    """Whether each character after ``start`` completes no earlier run of ``n`` (unless every one would)."""
    for end in range(start, len(text)):
        earlier, tail = text[:end], text[end - n + 1 : end]
        if end < n - 1:
            continue
        seen = {earlier[i + n - 1] for i in range(end - n + 1) if earlier[i : i + n - 1] == tail}
        if text[end] in seen and len(seen) < len(vocab):
            return False
    return True


def test_beam_search_with_the_rule_returns_the_most_probable_allowed_continuation(toy):
    """Exhaustive: every continuation of 6 characters over 3 symbols, scored and filtered by hand."""
    model, vocab = toy
    prime, length, n = "ab", 6, 3
    every = ["".join(t) for t in itertools.product(vocab.chars, repeat=length)]
    allowed = sorted(((score_text(model, vocab, prime, t), t) for t in every
                      if allowed_by_the_rule(prime + t, len(prime), n, vocab)), reverse=True)
    unconstrained = max(every, key=lambda t: score_text(model, vocab, prime, t))
    assert allowed[0][1] != unconstrained  # the rule changes the answer here
    beams = beam_search(model, vocab, prime, width=len(every), length=length, no_repeat=n)
    assert [b.text for b in beams] == [t for _, t in allowed]  # every allowed one, best first
    assert beams[0].log_prob == pytest.approx(allowed[0][0], abs=1e-6)  # float32 logits, two paths


def test_the_rule_reads_the_same_from_a_text_as_from_its_index():
    generator = torch.Generator().manual_seed(5)
    for _ in range(200):
        ids = torch.randint(0, 3, (int(torch.randint(0, 30, (1,), generator=generator)),),
                            generator=generator).tolist()
        n = int(torch.randint(2, 5, (1,), generator=generator))
        text = "".join("abc"[i] for i in ids)
        assert repeat_followers(text, n) == {"abc"[i] for i in RepeatGuard(n, ids).banned()}, (text, n)
