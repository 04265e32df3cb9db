import math

import pytest
import torch

import charrnn
from charrnn.config import EVAL_SLICE, EVAL_WARMUP, ModelConfig
from charrnn.data.corpus import checkpoint_validation_ids
from charrnn.errors import CharrnnError
from charrnn.models import evaluate as evaluation
from charrnn.models.evaluate import (
    EvalResult,
    StreamLayout,
    evaluate,
    layout_nll,
    scoring_seconds,
    stream_layout,
)
from charrnn.models.model import CharRNN


@pytest.fixture
def toy_model() -> CharRNN:
    torch.manual_seed(3)
    return CharRNN(ModelConfig(vocab_size=4, cell="gru", num_layers=2, hidden_size=5, embed_size=3))


def nll_by_hand(model: CharRNN, ids: torch.Tensor, first: int, last: int, context_from: int) -> list[float]:
    """−ln p of ids[first..last] (inclusive), each predicted from ids[context_from:t] read from zeros."""
    nlls = []
    with torch.no_grad():
        for t in range(first, last + 1):
            logits, _ = model(ids[context_from:t].unsqueeze(0))
            probs = torch.softmax(logits[0, -1].double(), dim=-1)
            nlls.append(-math.log(probs[ids[t]].item()))
    return nlls


def test_one_stream_is_exp_of_mean_nll_by_hand_and_past_a_floats_range_infinite(toy_model, monkeypatch):
    monkeypatch.setattr(evaluation, "EVAL_CHUNK", 3)  # the state carried across 4 chunks
    ids = torch.tensor([0, 1, 2, 3, 3, 2, 1, 0, 0, 2, 1])
    mean = sum(nll_by_hand(toy_model, ids, 1, 10, 0)) / 10
    result = evaluate(toy_model, ids, single_stream=True)
    assert result == EvalResult(pytest.approx(mean, rel=1e-6), pytest.approx(mean / math.log(2), rel=1e-6),
                                pytest.approx(math.exp(mean), rel=1e-6), 10)
    assert EvalResult.from_total(700.0, 1).perplexity == pytest.approx(math.exp(700.0))
    huge = EvalResult.from_total(1000.0, 1)
    assert huge.perplexity == math.inf and huge.nats_per_char == 1000.0


def test_many_streams_score_each_slice_after_its_warm_up_computed_by_hand(toy_model, monkeypatch):
    # 20 predicted characters in slices of 6 (the last of 2), each read after 3 characters of warm-up
    # (the first from the text's start), two streams at a time, in chunks of 2 steps.
    monkeypatch.setattr(evaluation, "EVAL_CHUNK", 2)
    torch.manual_seed(0)
    ids = torch.randint(0, 4, (21,))
    layout = StreamLayout(scored=20, slice_chars=6, warmup=3, streams_at_once=2)
    assert layout.streams == 4 and [list(batch) for batch in layout.batches()] == [[0, 1], [2, 3]]
    assert layout.positions == 20 + 3 * 3
    expected = nll_by_hand(toy_model, ids, 1, 6, 0)
    for first in (7, 13, 19):
        expected += nll_by_hand(toy_model, ids, first, min(first + 5, 20), first - 1 - 3)
    total, chars = layout_nll(toy_model, ids, layout)
    assert chars == 20 and total == pytest.approx(sum(expected), rel=1e-6)


def test_the_default_layout_and_one_stream_for_a_text_within_one_slice_or_a_reservoir(toy_model):
    layout = StreamLayout.for_text(10 * EVAL_SLICE + 1)
    assert (layout.streams, layout.warmup, layout.slice_chars) == (10, EVAL_WARMUP, EVAL_SLICE)
    assert StreamLayout.for_text(10 * EVAL_SLICE + 1, single_stream=True).streams == 1
    ids = torch.randint(0, 4, (EVAL_SLICE + 1,))
    assert stream_layout(toy_model, len(ids)).streams == 1
    assert evaluate(toy_model, ids).nats_per_char == pytest.approx(
        evaluate(toy_model, ids, single_stream=True).nats_per_char, rel=1e-6)
    torch.manual_seed(0)  # an echo state reservoir is always read as one stream
    model = CharRNN(ModelConfig(vocab_size=4, cell="esn", num_layers=1, hidden_size=8, embed_size=3))
    layout = stream_layout(model, 10 * EVAL_SLICE)
    assert layout.streams == 1 and layout.warmup == 0
    ids = torch.randint(0, 4, (3 * EVAL_SLICE,))
    assert evaluate(model, ids) == evaluate(model, ids, single_stream=True)


@pytest.mark.slow
def test_many_streams_land_close_to_one_stream_and_chunking_changes_nothing(toy_model, monkeypatch):
    torch.manual_seed(1)
    ids = torch.randint(0, 4, (5 * EVAL_SLICE + 100,))
    many, one = evaluate(toy_model, ids), evaluate(toy_model, ids, single_stream=True)
    assert many.chars == one.chars == len(ids) - 1
    assert abs(many.nats_per_char - one.nats_per_char) < 1e-6  # an untrained model forgets in a few steps
    monkeypatch.setattr(evaluation, "EVAL_CHUNK", 7)
    assert evaluate(toy_model, ids).nats_per_char == pytest.approx(many.nats_per_char, rel=1e-6)
    assert evaluate(toy_model, ids, single_stream=True).nats_per_char == pytest.approx(one.nats_per_char,
                                                                                       rel=1e-6)


def test_a_pass_costs_the_fastest_timing_of_a_few_steps_run_untimed_first_and_scaled(toy_model, monkeypatch):
    ids = torch.randint(0, 4, (40 * EVAL_SLICE + 1,))
    readings = iter([5.0, 5.7, 6.0, 6.5, 7.0, 7.6])  # the fastest of three timings counts: 0.5 s
    layout = stream_layout(toy_model, len(ids))
    timed = 40 * evaluation.SCORING_PROBE_STEPS
    predicted = scoring_seconds(toy_model, ids, lambda: next(readings))
    assert predicted == pytest.approx(0.5 * layout.positions / timed)
    short = iter([1.0, 1.25])  # a text no longer than the timed part is scored whole
    assert scoring_seconds(toy_model, ids[:50], lambda: next(short)) == 0.25
    # The timed steps run once untimed first: a kernel's first call at a width is slow, and timed, it read a
    # pass three times too slow.
    events = []
    forward = toy_model.forward
    monkeypatch.setattr(toy_model, "forward", lambda idx, *rest: events.append(tuple(idx.shape)) or
                        forward(idx, *rest))
    scoring_seconds(toy_model, torch.randint(0, 4, (40 * EVAL_SLICE + 1,)), lambda: events.append("clock")
                    or 0.0)
    shape = (40, evaluation.SCORING_PROBE_STEPS)
    assert events == [shape] + ["clock", shape, "clock"] * evaluation.SCORING_PROBE_REPEATS


def test_it_restores_training_mode_and_needs_two_characters(toy_model):
    toy_model.train()
    evaluate(toy_model, torch.tensor([0, 1, 2]))
    assert toy_model.training
    with pytest.raises(CharrnnError, match="at least 2"):
        evaluate(toy_model, torch.tensor([1]))


@pytest.mark.slow
@pytest.mark.parametrize("kind", [{"cell": "lstm"}, {"cell": "gru"}, {"cell": "rnn"}, {"layer_norm": True},
                                  {"skip_connections": True}])
def test_on_a_trained_model_many_streams_land_within_the_bound_of_one(data_mirror, tmp_path, kind):
    """The documented bound: on tiny Shakespeare's validation split, many streams land within 1e-4 of one."""
    shakespeare = charrnn.get_dataset(data_dir=tmp_path / "data").path
    charrnn.train(shakespeare, out_dir=tmp_path / "run", max_steps=150, hidden_size=64, batch_size=32,
                  seq_len=64, learning_rate=5e-3, eval_chars=30_000, **kind)
    model = charrnn.load(tmp_path / "run" / "best.pt")
    ids = checkpoint_validation_ids(model.payload["corpus"], model.vocab)[:30_001]
    many, one = evaluate(model.network, ids), evaluate(model.network, ids, single_stream=True)
    assert one.nats_per_char < 2.6  # it learned something
    assert abs(many.nats_per_char - one.nats_per_char) <= 1e-4
