"""The Python API: the command line's results, from Python, with the same checks."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import charrnn
from charrnn.cli.main import cli
from charrnn.data.vocab import UnknownCharactersError
from charrnn.errors import CharrnnError, ConfigError
from charrnn.training.plan import OptionConflict


def test_load_then_sample_gives_the_commands_text(tiny_run):
    model = charrnn.load(tiny_run)  # a run directory means its best.pt
    assert model.checkpoint == tiny_run / "best.pt"
    text = model.sample("ROMEO:", length=80, temperature=0.8, seed=1)
    printed = CliRunner().invoke(cli, ["sample", str(tiny_run / "best.pt"), "--prime", "ROMEO:",
                                       "--length", "80", "--temperature", "0.8", "--seed", "1"])
    assert printed.exit_code == 0 and printed.stdout == text + "\n"
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 80
    assert model.sample("ROMEO:", length=80, temperature=0.8, seed=1) == text


def test_sampling_options_are_the_sample_configs(tiny_checkpoint):
    model = charrnn.load(tiny_checkpoint)
    greedy = model.sample("J", length=30, greedy=True)
    assert greedy == model.sample("J", length=30, top_k=1, seed=5)
    with pytest.raises(ConfigError, match="temperature must be"):
        model.sample("J", temperature=0)
    with pytest.raises(TypeError):
        model.sample("J", tempreature=0.5)


def test_perplexity_equals_eval_perplexity(tiny_checkpoint, tmp_path):
    text = "JULIET:\nCafé 3 — naïve 語 🙂, line 3 of the tiny play.\n\n" * 3
    path = tmp_path / "held_out.txt"
    path.write_text(text, encoding="utf-8")
    printed = CliRunner().invoke(cli, ["eval-perplexity", str(tiny_checkpoint), str(path), "--json"])
    score = charrnn.load(tiny_checkpoint).perplexity(text)
    assert score.to_dict() == json.loads(printed.stdout)
    assert score.chars == len(text) - 1 and score.bits_per_char > 0
    with pytest.raises(UnknownCharactersError, match="Ω"):
        charrnn.load(tiny_checkpoint).perplexity("Ωmega")


def test_train_from_python_then_resume(small_corpus, tmp_path):
    out = tmp_path / "run"
    options = {"hidden_size": 16, "embed_size": 8, "num_layers": 1, "batch_size": 4, "seq_len": 16}
    first = charrnn.train(small_corpus, out_dir=out, device="cpu", max_steps=6, **options)
    assert first.steps == 6 and first.out_dir == out and (out / "best.pt").exists()
    with pytest.raises(CharrnnError, match="already holds a training run"):
        charrnn.train(small_corpus, out_dir=out, max_steps=6, **options)
    resumed = charrnn.train(resume=out, max_steps=10)
    assert resumed.steps == 10
    assert charrnn.load(out / "last.pt").payload["step"] == 10


def test_train_from_python_gets_the_commands_checks(small_corpus, tmp_path, tiny_run):
    with pytest.raises(ConfigError, match="unknown training option 'hidden'"):
        charrnn.train(small_corpus, hidden=16)
    with pytest.raises(OptionConflict):
        charrnn.train(small_corpus, resume=tiny_run, init_from=tiny_run)
    with pytest.raises(ConfigError, match="batch_size must be at least 1"):
        charrnn.train(small_corpus, out_dir=tmp_path / "x", batch_size=0)
    if not torch.cuda.is_available():
        with pytest.raises(CharrnnError, match="no CUDA GPU"):
            charrnn.train(small_corpus, device="cuda")
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_importing_charrnn_imports_no_torch_until_the_api_is_used():
    code = ("import sys, charrnn; before = 'torch' in sys.modules; charrnn.load; "
            "print(before, 'torch' in sys.modules)")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert printed.stdout.split() == ["False", "True"]
    with pytest.raises(AttributeError, match="no attribute 'lod'"):
        charrnn.lod  # noqa: B018


def test_the_readme_examples_run(tmp_path, monkeypatch):
    """The README's Python examples, against tiny runs in the places they name."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    loading = readme.split("```python\n", 1)[1].split("```", 1)[0]
    training = readme.split("import charrnn\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    corpus = "ROMEO: some held-out text, and more of it.\n" * 60
    (tmp_path / "my_corpus.txt").write_text(corpus, encoding="utf-8")
    tiny = {"hidden_size": 16, "embed_size": 8, "num_layers": 1, "batch_size": 4, "seq_len": 16}
    charrnn.train("my_corpus.txt", out_dir="checkpoints/tinyshakespeare", max_steps=4, device="cpu", **tiny)
    namespace: dict = {}
    exec(compile(loading, "README.md", "exec"), namespace)
    assert namespace["text"].startswith("ROMEO:") and len(namespace["text"]) == len("ROMEO:") + 200
    assert namespace["score"].chars == len("some held-out text") - 1
    # The training example, made tiny: every option it names still reaches the run.
    shrunk = training.replace("hidden_size=128, epochs=5", "hidden_size=16, epochs=0.1, embed_size=8, "
                              "batch_size=4, seq_len=16").replace("epochs=10", "epochs=0.2")
    assert shrunk != training
    exec(compile("import charrnn\n" + shrunk, "README.md", "exec"), {})
    assert charrnn.load("runs/mine/last.pt").payload["progress_epochs"] == pytest.approx(0.2, abs=0.03)
