"""The one model object: what it writes and scores is what the functions beneath it give."""

import subprocess
import sys

import pytest
import torch

from charrnn.config import SampleConfig
from charrnn.errors import ConfigError, ConfigTypeError
from charrnn.generation.beam import beams_for
from charrnn.generation.sample import collect_samples, generate
from charrnn.models.evaluate import evaluate
from charrnn.training.checkpoint import load_model


@pytest.fixture
def trained(tiny_checkpoint):
    return load_model(tiny_checkpoint)


def test_it_knows_its_checkpoint_and_its_sampled_texts_are_the_samplers_own(trained, tiny_checkpoint):
    assert trained.checkpoint == tiny_checkpoint and trained.payload["vocab"] == list(trained.vocab.chars)
    assert not trained.network.training
    config = SampleConfig(length=50, seed=4, num_samples=3, temperature=0.9)
    written = trained.write("ROMEO:", config)
    assert written.texts == collect_samples(generate(trained.network, trained.vocab, config, "ROMEO:"), "", 3)
    assert written.seed == 4 and written.log_probs is None and written.stopped is None
    one = SampleConfig(length=50, seed=4, temperature=0.9)
    assert "".join(trained.characters("ROMEO:", one)) == trained.write("ROMEO:", one).texts[0]


def test_a_sample_without_a_seed_reports_the_one_it_drew_and_a_stream_is_one_seeded_text(trained):
    drawn = trained.write("ROMEO:", SampleConfig(length=40))
    assert drawn.seed is not None
    assert trained.write("ROMEO:", SampleConfig(length=40, seed=drawn.seed)).texts == drawn.texts
    assert trained.write("ROMEO:", SampleConfig(length=40, greedy=True)).seed is None
    for config, refusal in ((SampleConfig(length=5, seed=1, num_samples=3), "a stream is one sampled text"),
                            (SampleConfig(length=5, beam_width=3), "a stream is one sampled text"),
                            (SampleConfig(length=5), "needs a seed")):
        with pytest.raises(ConfigError, match=refusal):
            trained.characters("R", config)


def test_beams_are_the_searchs_own_best_first(trained):
    config = SampleConfig(length=30, beam_width=4, num_samples=2, stop_at="\n")
    written = trained.write("JULIET:", config)
    beams = beams_for(trained.network, trained.vocab, "JULIET:", config)[:2]
    assert written.texts == [beam.text for beam in beams]
    assert written.log_probs == [beam.log_prob for beam in beams]
    assert written.stopped == [beam.stopped for beam in beams]
    assert written.log_probs == sorted(written.log_probs, reverse=True)


def test_a_score_is_the_evaluators_own_whatever_the_caches_id_type(trained):
    """A vocabulary over 256 symbols is cached as uint16 (or uint32), which torch gives no min or max."""
    ids = trained.vocab.encode("".join(trained.vocab.chars) * 20).long()
    assert trained.score(ids, single_stream=True) == evaluate(trained.network, ids, single_stream=True)
    for dtype in (torch.int64, torch.uint8, torch.uint16, torch.uint32):
        assert trained.score(ids.to(dtype)) == evaluate(trained.network, ids), dtype
    with pytest.raises(ConfigError, match=f"ids must hold ids from 0 to {len(trained.vocab) - 1}"):
        trained.score(torch.tensor([0, len(trained.vocab)]))


@pytest.mark.parametrize("ids", ["ROMEO", torch.zeros(3, 4, dtype=torch.long), torch.zeros(5)])
def test_a_score_of_anything_but_character_ids_is_refused(trained, ids):
    with pytest.raises(ConfigTypeError, match="ids must be a 1-D tensor of character ids"):
        trained.score(ids)


def test_a_stop_string_it_cannot_write_ends_nothing(trained):
    """Compare may pass a stop string a model cannot write: it runs to its length (sample refuses one)."""
    never = next(chr(code) for code in range(0x4E00, 0x9FFF) if chr(code) not in trained.vocab.chars)
    stopped = trained.write("R", SampleConfig(length=30, seed=1, stop_at=never))
    assert stopped.texts == trained.write("R", SampleConfig(length=30, seed=1)).texts


def test_importing_it_imports_no_torch():
    code = "import sys, charrnn.generation.trained; print('torch' in sys.modules)"
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert printed.stdout.strip() == "False"
