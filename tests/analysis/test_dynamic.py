"""Dynamic evaluation: the static score at a zero step, real gains on repeated text, nothing changed."""

import copy
import json
import random

import pytest
import torch

from charrnn.analysis.dynamic import dynamic_evaluate, gradient_rms
from charrnn.config import DynamicConfig
from charrnn.data.corpus import checkpoint_split
from charrnn.errors import ConfigError
from charrnn.models.evaluate import evaluate
from charrnn.training.checkpoint import load_model

from helpers import run_cli


@pytest.fixture(scope="module")
def loaded(tiny_run):
    return load_model(tiny_run / "best.pt")


@pytest.fixture(scope="module")
def split(loaded):
    return checkpoint_split(loaded.payload["corpus"], loaded.vocab)


def test_a_zero_step_gives_the_static_score_and_the_model_handed_in_is_never_changed(loaded, split):
    before = {name: tensor.clone() for name, tensor in loaded.network.state_dict().items()}
    rms = gradient_rms(loaded.network, split.train, segment_len=25)
    static = evaluate(loaded.network, split.val)
    frozen = dynamic_evaluate(loaded.network, split.val, rms, DynamicConfig(learning_rate=0, segment_len=25))
    assert frozen.chars == static.chars
    assert frozen.nats_per_char == pytest.approx(static.nats_per_char, rel=1e-6)
    dynamic_evaluate(loaded.network, split.val, rms, DynamicConfig(learning_rate=1e-2, segment_len=25))
    after = loaded.network.state_dict()
    assert all(torch.equal(before[name], after[name]) for name in before)
    assert all(param.grad is None for param in loaded.network.parameters())


def test_a_repeated_novel_passage_scores_much_better_dynamically(loaded, split):
    rng = random.Random(0)
    passage = "".join(rng.choice(loaded.vocab.chars[:40]) for _ in range(400))  # nothing it has seen
    ids = loaded.vocab.encode(passage * 4)
    rms = gradient_rms(loaded.network, split.train, segment_len=20)
    static = evaluate(loaded.network, ids)
    adapted = dynamic_evaluate(loaded.network, ids, rms, DynamicConfig(learning_rate=3e-3, decay=0,
                                                                     segment_len=20))
    assert adapted.nats_per_char < static.nats_per_char - 0.5, (static, adapted)


def test_the_command_reports_both_scores_leaves_the_checkpoint_alone_and_checks_the_settings(tiny_run):
    checkpoint = tiny_run / "best.pt"
    before = checkpoint.read_bytes(), checkpoint.stat().st_mtime_ns
    table = run_cli("eval-perplexity", checkpoint, "--dynamic", "--segment-len", "25")
    assert table.exit_code == 0, table.output
    assert "dynamic nats/char" in table.stdout and "segments of 25" in table.stdout
    printed = run_cli("eval-perplexity", checkpoint, "--dynamic", "--dynamic-lr", "0", "--json", "--device",
                      "cpu")  # a GPU's batched scoring rounds otherwise
    record = json.loads(printed.stdout)
    assert record["dynamic"]["learning_rate"] == 0
    assert record["dynamic"]["nats_per_char"] == pytest.approx(record["nats_per_char"], rel=1e-6)
    assert (checkpoint.read_bytes(), checkpoint.stat().st_mtime_ns) == before
    refused = run_cli("eval-perplexity", checkpoint, "--dynamic", "--dynamic-lr", "-1")
    assert refused.exit_code == 2
    assert "Invalid value for '--dynamic-lr': must be 0 (the static score) or positive" in refused.stderr
    with pytest.raises(ConfigError, match="segment_len must be at least 1"):
        DynamicConfig(segment_len=0)


def test_without_the_training_corpus_dynamic_evaluation_says_why(tiny_run, tmp_path):
    payload = torch.load(tiny_run / "best.pt", weights_only=True)
    payload["corpus"] = {**payload["corpus"], "path": str(tmp_path / "gone.txt")}
    moved = tmp_path / "moved.pt"
    torch.save(payload, moved)
    text = tmp_path / "text.txt"
    text.write_text("ROMEO:\nline 3 of the tiny play.\n" * 5, encoding="utf-8")
    result = run_cli("eval-perplexity", moved, text, "--dynamic")
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        f"Error: dynamic evaluation scales its steps by gradients on the training split: the training corpus "
        f"{tmp_path / 'gone.txt'} is gone"]


def test_compare_reports_the_dynamic_score_beside_the_static_one(tiny_run, tmp_path):
    checkpoint = str(tiny_run / "best.pt")
    report = tmp_path / "report.md"
    printed = run_cli("compare", checkpoint, "--length", "20", "--dynamic", "--segment-len", "25", "--json",
                      "--markdown", report)
    assert printed.exit_code == 0, printed.output
    [entry] = json.loads(printed.stdout)
    alone = run_cli("eval-perplexity", checkpoint, "--dynamic", "--segment-len", "25", "--json", "--device",
                    "cpu")  # where compare runs by default
    assert entry["dynamic"]["nats_per_char"] == json.loads(alone.stdout)["dynamic"]["nats_per_char"]
    assert "dynamic nats/char" in report.read_text(encoding="utf-8")
    table = run_cli("compare", checkpoint, "--length", "20", "--dynamic")
    assert "dynamic nats/char" in table.stdout
    plain = json.loads(run_cli("compare", checkpoint, "--length", "20", "--json").stdout)
    assert plain[0]["dynamic"] is None


@pytest.mark.cuda
def test_on_cuda_it_adapts_as_on_the_cpu_and_leaves_cudnn_on(loaded, split):
    """cuDNN takes no gradients in eval mode: adapting runs on PyTorch's kernels, then cuDNN is back on."""
    config = DynamicConfig(learning_rate=1e-3, segment_len=25)
    on_cpu = dynamic_evaluate(loaded.network, split.val[:2000], gradient_rms(loaded.network, split.train, 25,
                                                                           max_chars=5000), config)
    model = copy.deepcopy(loaded.network).to("cuda")
    rms = gradient_rms(model, split.train, 25, max_chars=5000)
    on_gpu = dynamic_evaluate(model, split.val[:2000], rms, config)
    assert torch.backends.cudnn.enabled
    assert on_gpu.nats_per_char == pytest.approx(on_cpu.nats_per_char, rel=1e-3)
