import math

import pytest
import torch

from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError
from charrnn.models.evaluate import evaluate
from charrnn.models.model import CharRNN


@pytest.fixture
def toy_model() -> CharRNN:
    torch.manual_seed(3)
    return CharRNN(ModelConfig(vocab_size=4, cell="gru", num_layers=2, hidden_size=5, embed_size=3))


def test_perplexity_is_exp_of_mean_nll_computed_by_hand(toy_model):
    ids = torch.tensor([0, 1, 2, 3, 3, 2, 1, 0, 0, 2, 1])
    nlls = []
    with torch.no_grad():
        for t in range(1, len(ids)):
            logits, _ = toy_model(ids[:t].unsqueeze(0))  # re-read the prefix from scratch
            probs = torch.softmax(logits[0, -1].double(), dim=-1)
            nlls.append(-math.log(probs[ids[t]].item()))
    mean = sum(nlls) / len(nlls)
    result = evaluate(toy_model, ids, chunk_len=3)  # state carried across 4 chunks
    assert result.chars == 10
    assert result.nats_per_char == pytest.approx(mean, rel=1e-6)
    assert result.perplexity == pytest.approx(math.exp(mean), rel=1e-6)
    assert result.bits_per_char == pytest.approx(mean / math.log(2), rel=1e-6)


def test_chunking_does_not_change_the_result(toy_model):
    ids = torch.randint(0, 4, (500,))
    whole = evaluate(toy_model, ids, chunk_len=10_000)
    for chunk_len in (1, 7, 128):
        assert evaluate(toy_model, ids, chunk_len=chunk_len).nats_per_char == pytest.approx(
            whole.nats_per_char, rel=1e-6
        )


def test_restores_training_mode(toy_model):
    toy_model.train()
    evaluate(toy_model, torch.tensor([0, 1, 2]))
    assert toy_model.training


def test_needs_two_characters(toy_model):
    with pytest.raises(CharrnnError, match="at least 2"):
        evaluate(toy_model, torch.tensor([1]))
