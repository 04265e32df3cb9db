"""The Python API: the command line's results, from Python, with the same checks."""

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import SMALL_TEXT

import charrnn
from charrnn.api import TrainObserver, check_output
from charrnn.data.datasets import DATA_DIR_ENV
from charrnn.data.vocab import UnknownCharactersError
from charrnn.errors import CharrnnError, ConfigError, ConfigTypeError, OptionConflict, TrainingInterrupted
from charrnn.generation import sample as sampling

from helpers import TINY_RUN, run_cli


def test_load_then_sample_gives_the_commands_text_and_draws_seeds_several_texts_beams_and_options(tiny_run):
    model = charrnn.load(tiny_run)  # a run directory means its best.pt
    assert model.checkpoint == tiny_run / "best.pt"
    samples = model.sample("ROMEO:", length=80, temperature=0.8, seed=1)
    printed = run_cli("sample", tiny_run / "best.pt", "--prime", "ROMEO:", "--length", "80", "--temperature",
                      "0.8", "--seed", "1")
    assert printed.exit_code == 0 and printed.stdout == samples.text + "\n"
    assert samples.text.startswith("ROMEO:") and len(samples.text) == len("ROMEO:") + 80
    assert (samples.seed, samples.seed_drawn) == (1, False)
    assert model.sample("ROMEO:", length=80, temperature=0.8, seed=1) == samples
    # A drawn seed; several texts; beams; options.
    drawn = model.sample("J", 40)  # a drawn seed is reported and draws the same text again
    assert drawn.seed_drawn and isinstance(drawn.seed, int)
    assert model.sample("J", 40, seed=drawn.seed).text == drawn.text
    streamed = model.stream("J", 40, seed=drawn.seed)
    assert streamed.prime + "".join(streamed) == drawn.text
    two = model.sample("J", 20, seed=4, num_samples=2)
    assert len(two.texts) == 2 and all(text.startswith("J") for text in two.texts)
    beams = model.sample("J", 10, beam_width=3, num_samples=2)
    assert len(beams.texts) == 2 and beams.seed is None and not beams.seed_drawn
    assert beams.log_probs[0] >= beams.log_probs[1]
    assert beams.records()[0] == {"text": beams.texts[0], "log_prob": beams.log_probs[0],
                                  "stopped": beams.stopped[0]}
    greedy = model.sample("J", length=30, greedy=True)
    assert greedy.text == model.sample("J", length=30, top_k=1, seed=5).text
    with pytest.raises(ConfigError, match="temperature must be"):  # the options are the SampleConfig's
        model.sample("J", temperature=0)
    with pytest.raises(TypeError):
        model.sample("J", tempreature=0.5)


def test_perplexity_equals_eval_perplexity(tiny_checkpoint, tmp_path):
    text = "JULIET:\nCafé 3 — naïve 語 🙂, line 3 of the tiny play.\n\n" * 3
    path = tmp_path / "held_out.txt"
    path.write_text(text, encoding="utf-8")
    # charrnn.load runs on the CPU; eval-perplexity on a GPU when there is one, which rounds differently
    printed = run_cli("eval-perplexity", tiny_checkpoint, path, "--json", "--device", "cpu")
    model = charrnn.load(tiny_checkpoint)
    from_file, from_text = model.perplexity(file=path), model.perplexity(text)
    assert printed.exit_code == 0, printed.output
    expected = {**json.loads(printed.stdout), "seconds": None}
    assert {**from_file.to_dict(), "seconds": None} == expected
    assert from_text.score == from_file.score and from_text.text == "text"
    assert from_text.chars == len(text) - 1 and from_text.bits_per_char > 0
    split = model.perplexity()  # the validation split, skipping unknowns, and dynamically
    assert split.text.startswith("validation split of ") and split.score.to_dict()["nats_per_char"] > 0
    with pytest.raises(UnknownCharactersError, match=r"'Ω'.*use skip_unknown to score the rest"):
        model.perplexity("ROMEO Ω")
    skipped = model.perplexity("ROMEO Ω", skip_unknown=True)
    assert skipped.skipped == {"Ω": 1} and skipped.score == model.perplexity("ROMEO ").score
    adapted = model.perplexity(dynamic=True, dynamic_lr=0.0)  # a step of 0 is the static score
    assert adapted.dynamic.nats_per_char == pytest.approx(split.nats_per_char, abs=1e-6)
    assert adapted.to_dict()["dynamic"]["learning_rate"] == 0.0


def test_train_from_python_then_resume_and_ctrl_c_saves_a_resumable_checkpoint(small_corpus, tmp_path):
    out, stopped = tmp_path / "run", tmp_path / "stopped"
    options = {"hidden_size": 16, "embed_size": 8, "num_layers": 1, "batch_size": 4, "seq_len": 16}
    first = charrnn.train(small_corpus, out_dir=out, device="cpu", max_steps=6, **options)
    assert first.steps == 6 and first.out_dir == out and (out / "best.pt").exists()
    assert first.model_config.hidden_size == 16 and first.config.max_steps == 6 and first.budget is None
    assert first.to_dict()["stopped"] == "reached max_steps 6"
    with pytest.raises(CharrnnError, match="already holds a training run"):
        charrnn.train(small_corpus, out_dir=out, max_steps=6, **options)
    resumed = charrnn.train(resume=out, max_steps=10)
    assert resumed.steps == 10
    assert charrnn.load(out / "last.pt").payload["step"] == 10

    class CtrlC(TrainObserver):
        def on_step(self, report):
            if report.step == 3:
                os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(TrainingInterrupted) as interrupted:
        charrnn.train(small_corpus, out_dir=stopped, device="cpu", max_steps=50, observer=CtrlC(), **TINY_RUN)
    assert isinstance(interrupted.value, KeyboardInterrupt)
    assert interrupted.value.checkpoint == stopped / "last.pt" and interrupted.value.step in (3, 4)
    assert charrnn.train(resume=interrupted.value.checkpoint, max_steps=5).steps == 5


@pytest.mark.slow
def test_the_plan_a_time_budget_chose_is_in_the_result(small_corpus, tmp_path):
    result = charrnn.train(small_corpus, out_dir=tmp_path / "run", device="cpu", precision="fp32",
                           time_budget=1, num_layers=1, embed_size=8, seq_len=16)
    choice = result.budget.choice
    assert result.budget.planned and result.budget.probe_s < result.elapsed_s
    hidden = choice.settings["hidden_size"]
    assert result.model_config.hidden_size == hidden == result.budget.chosen["hidden_size"]
    assert result.config.learning_rate == choice.settings["learning_rate"]
    assert result.to_dict()["budget"]["chosen"]["hidden_size"] == choice.settings["hidden_size"]


@pytest.mark.slow
def test_train_without_a_corpus_fetches_tiny_shakespeare(tmp_path, monkeypatch, data_mirror):
    monkeypatch.chdir(tmp_path)
    notes = []

    class Notes(TrainObserver):
        def on_message(self, text):
            notes.append(text)

    result = charrnn.train(device="cpu", max_steps=1, observer=Notes(), data_dir=tmp_path / "data",
                           **TINY_RUN)
    assert result.out_dir == Path("checkpoints/tinyshakespeare")
    assert (tmp_path / "data" / "tinyshakespeare" / "input.txt").is_file()
    assert any(note.startswith("downloaded and verified tinyshakespeare") for note in notes)


def test_train_from_python_gets_the_commands_checks(small_corpus, tmp_path, tiny_run, monkeypatch):
    with pytest.raises(OptionConflict):
        charrnn.train(small_corpus, resume=tiny_run, init_from=tiny_run)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(CharrnnError, match="device cuda was requested but no CUDA GPU"):
        charrnn.train(small_corpus, out_dir=tmp_path / "x", device="cuda")
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("call", [
    lambda path: charrnn.load(path, threads=0),
    lambda path: charrnn.train(path, threads=0),
    lambda path: charrnn.sample(path, threads=0),
    lambda path: charrnn.stream(path, threads=0),
    lambda path: charrnn.perplexity(path, "some text", threads=0),
    lambda path: charrnn.inspect(path, "some text", unit=0, threads=0),
    lambda path: charrnn.surprisal(path, "some text", threads=0),
    lambda path: charrnn.compare([path], threads=0),
    lambda path: charrnn.export(path, "page.html", threads=0),
])
def test_every_call_that_runs_a_model_takes_threads_and_checks_it_first(call, tmp_path):
    with pytest.raises(ConfigError, match="threads must be a whole number of at least 1"):
        call(tmp_path / "not-yet-read.pt")  # refused before the checkpoint is looked for


@pytest.mark.parametrize(("options", "error"), [
    ({"max_steps": 5.5}, ConfigTypeError),
    ({"seq_len": True}, ConfigTypeError),
    ({"seed": 1.5}, ConfigTypeError),
    ({"learning_rate": "0.1"}, ConfigTypeError),
    ({"save_epochs": "5"}, ConfigTypeError),
    ({"save_epochs": [1.5]}, ConfigTypeError),
    ({"dropout": math.nan}, ConfigError),
    ({"time_budget": math.inf}, ConfigError),
    ({"layer_norm": 1}, ConfigTypeError),
    ({"hidden": 16}, ConfigError),  # not an option
    # A budget's start (an earlier clock reading) and the time kept for the caller (a finite number of s).
    *(({name: value, "time_budget": 5}, error) for name, value, error in [
        ("started", math.nan, ConfigError), ("started", 1e18, ConfigError),
        ("started", "soon", ConfigTypeError), ("finish_s", -1.0, ConfigError),
        ("finish_s", math.inf, ConfigError), ("finish_s", "later", ConfigTypeError),
    ]),
])
def test_wrong_types_and_non_finite_numbers_are_refused_before_anything_is_written(
        small_corpus, tmp_path, options, error):
    with pytest.raises(error) as refused:
        charrnn.train(small_corpus, out_dir=tmp_path / "run", **options)
    assert isinstance(refused.value, ValueError) and next(iter(options)) in str(refused.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_torch_is_imported_only_once_the_options_are_checked_and_there_is_work():
    code = ("import sys, charrnn\nseen = ['torch' in sys.modules]\ncharrnn.load\n"
            "seen.append('torch' in sys.modules)\n"
            "for call in (lambda: charrnn.train('c.txt', max_steps=0),\n"
            "             lambda: charrnn.sample('x.pt', top_p=2.0)):\n"
            "    try:\n        call()\n    except charrnn.errors.ConfigError:\n"
            "        seen.append('torch' in sys.modules)\n"
            "try:\n    charrnn.load('missing.pt')\nexcept charrnn.errors.CharrnnError:\n"
            "    seen.append('torch' in sys.modules)\nprint(*seen)")
    printed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert printed.stdout.split() == ["False", "False", "False", "False", "True"]
    with pytest.raises(AttributeError, match="no attribute 'lod'"):
        charrnn.lod  # noqa: B018


@pytest.mark.slow
def test_the_readme_example_runs(tmp_path, monkeypatch, data_mirror):
    """The README's Python example as written, trained smaller, where the quickstart ran (./data holds it)."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    example = readme.split("## Python API", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    charrnn.api.get_dataset("tinyshakespeare")  # what the quickstart's demo fetched
    # The training part made tiny: every option it names still reaches the run.
    shrunk = example.replace("hidden_size=128, max_steps=300", "hidden_size=16, max_steps=3, embed_size=8, "
                             "batch_size=4, seq_len=16").replace("max_steps=600", "max_steps=6")
    assert shrunk.count("max_steps=") == example.count("max_steps=") and shrunk != example
    namespace: dict = {}
    exec(compile(shrunk, "README.md", "exec"), namespace)
    text = namespace["samples"].text
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 200
    assert namespace["score"].text.startswith("validation split of ")
    assert charrnn.load("runs/mine/last.pt").payload["step"] == 6


# ------------------------------------------------------------------ one door: the same refusals

def _sample(*args, **options):
    return lambda paths: paths.model.sample(*args, **options)


def _train(**options):
    return lambda paths: charrnn.train(paths.corpus, **options)


def _reading(function, **options):
    return lambda paths: function(paths.checkpoint, file=paths.text, **options)


# (the command, CKPT, CORPUS and TEXT standing for files; the same request through the API, given those paths
# and the loaded model; the one error line: a value out of range, an "Invalid value" for the quoted option
# there, is a ConfigError in Python, options that contradict each other an OptionConflict)
REFUSALS = [
    ("sample CKPT --greedy --temperature 0.5", _sample("", 100, 0.5, greedy=True),
     "--greedy is deterministic; --temperature does not apply"),
    ("sample CKPT --greedy --seed 3", _sample("", 100, greedy=True, seed=3),
     "--greedy is deterministic; --seed does not apply"),
    ("sample CKPT --greedy --top-k 3 --seed 1", _sample(greedy=True, top_k=3, seed=1),
     "--greedy is deterministic; --top-k, --seed does not apply"),
    ("sample CKPT --greedy --num-samples 2", _sample(greedy=True, num_samples=2), "--greedy gives one text"),
    ("sample CKPT --beam-width 2 --greedy", _sample(beam_width=2, greedy=True),
     "--beam-width is deterministic; --greedy does not apply"),
    ("sample CKPT --beam-width 2 --temperature 0.5", _sample(beam_width=2, temperature=0.5),
     "--beam-width is deterministic; --temperature does not apply"),
    ("sample CKPT --beam-width 2 --top-k 3", _sample(beam_width=2, top_k=3),
     "--beam-width is deterministic; --top-k does not apply"),
    ("sample CKPT --beam-width 2 --num-samples 3", _sample(beam_width=2, num_samples=3),
     "--num-samples 3 exceeds --beam-width 2"),
    ("sample CKPT --length-penalty 1", _sample(length_penalty=1.0),
     "--length-penalty ranks beams: it goes with --beam-width"),
    ("sample CKPT --beam-width 2 --length-penalty 0", _sample(beam_width=2, length_penalty=0.0),
     "--length-penalty matters only for texts that a stop string ends"),
    ("sample CKPT --min-length 5", _sample(min_length=5),
     "--min-length matters only for texts that a stop string ends"),
    ("sample CKPT --stop-at e --min-length 100 --length 10", _sample(length=10, stop_at="e", min_length=100),
     "--min-length 100 is longer than the whole text (--length 10)"),
    ("sample CKPT --prime x --prime-file prime.txt",
     lambda paths: paths.model.sample("x", prime_file=paths.prime), "give --prime or --prime-file, not both"),
    ("sample CKPT --temperature nan", _sample(temperature=math.nan),
     "'--temperature': must be a number greater than 0"),
    ("sample CKPT --top-p 1.5", _sample(top_p=1.5), "'--top-p': must be a number in (0, 1]"),
    ("sample CKPT --length -1", _sample(length=-1), "'--length': must be a whole number of 0 or more"),
    ("train CORPUS --max-steps 0", _train(max_steps=0), "'--max-steps': must be at least 1"),
    ("train CORPUS --lr inf", _train(learning_rate=math.inf), "'--lr': must be a finite number"),
    ("train CORPUS --extend-vocab", _train(extend_vocab=True), "--extend-vocab goes with --init-from"),
    ("train CORPUS --model gru -o forget_bias 1", _train(cell="gru", forget_bias=1.0),
     "-o forget_bias sets the LSTM's forget gate; --model gru has none"),
    ("train CORPUS --model esn --optimizer muon", _train(cell="esn", optimizer="muon"),
     "--optimizer muon steps the recurrent matrices, which --model esn keeps as drawn"),
    ("train CORPUS -o muon_lr 0.02", _train(muon_lr=0.02),
     "-o muon_lr is Muon's rate: it goes with --optimizer muon"),
    ("train CORPUS -o spectral_radius 2", _train(spectral_radius=2.0),
     "-o spectral_radius shapes an echo-state reservoir"),
    ("train CORPUS --clip 0 -o clip_mode value", _train(clip=0.0, clip_mode="value"),
     "-o clip_mode does nothing with --clip 0"),
    ("train CORPUS --model lstm -o rnn_activation relu", _train(rnn_activation="relu"),
     "-o rnn_activation applies to --model rnn only"),
    ("train CORPUS --save-epochs 0", _train(save_epochs=[0]),
     "'--save-epochs': must list whole epochs of 1 or more"),
    ("train CORPUS -o val_max_chars 0", _train(val_max_chars=0), "'-o val_max_chars': must be at least 1"),
    ("train CORPUS --layers 1 --skip-connections", _train(num_layers=1, skip_connections=True),
     "--skip-connections links the layers of a stack"),
    ("inspect CKPT TEXT --unit 0 --top 3", _reading(charrnn.inspect, unit=0, top=3),
     "--top says how many units --rank lists"),
    ("inspect CKPT TEXT --rank quotes --layer 1", _reading(charrnn.inspect, rank="quotes", layer=1),
     "--layer picks the layer of --unit"),
    ("inspect CKPT TEXT", _reading(charrnn.inspect),
     "give --unit to colour the text, or --rank to find units"),
    ("inspect CKPT TEXT --unit -1", _reading(charrnn.inspect, unit=-1), "'--unit': must be at least 0"),
    ("eval-perplexity CKPT TEXT --dynamic-lr 0.1", _reading(charrnn.perplexity, dynamic_lr=0.1),
     "--dynamic-lr is a setting of dynamic evaluation: it goes with --dynamic"),
    ("eval-perplexity CKPT TEXT --dynamic --segment-len 0",
     _reading(charrnn.perplexity, dynamic=True, segment_len=0), "'--segment-len': must be at least 1"),
]


@pytest.mark.parametrize(("line", "call", "said"), REFUSALS, ids=[row[0] for row in REFUSALS])
def test_a_refusal_is_the_same_through_both_doors(tiny_checkpoint, small_corpus, tmp_path, monkeypatch, line,
                                                  call, said):
    """Exit 2 and one error line on the command line, the error in Python, and nothing written by either."""
    monkeypatch.chdir(tmp_path)
    paths = SimpleNamespace(model=charrnn.load(tiny_checkpoint), checkpoint=tiny_checkpoint,
                            corpus=small_corpus, prime=tmp_path / "prime.txt", text=tmp_path / "text.txt")
    paths.prime.write_text("ROMEO:", encoding="utf-8")
    paths.text.write_text("ROMEO:\n", encoding="utf-8")
    before = sorted(tmp_path.iterdir())
    files = {"CKPT": str(tiny_checkpoint), "CORPUS": str(small_corpus), "TEXT": str(paths.text)}
    printed = run_cli(*(files.get(word, word) for word in line.split()))
    assert printed.exit_code == 2 and printed.stdout == "", printed.output
    assert printed.stderr.startswith("Error: ") and printed.stderr.count("\n") == 1 and said in printed.stderr
    with pytest.raises(ConfigError if said.startswith("'") else OptionConflict):
        call(paths)
    assert sorted(tmp_path.iterdir()) == before


@pytest.mark.parametrize("link", ["same path", "symbolic link", "hard link", "run directory's file"])
def test_an_output_that_is_an_input_is_refused_before_any_work(tiny_run, tmp_path, monkeypatch, link):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    run.mkdir()
    for name in ("best.pt", "last.pt"):
        (run / name).write_bytes((tiny_run / name).read_bytes())
    checkpoint, before = run / "best.pt", (run / "best.pt").read_bytes()
    output = {"same path": checkpoint, "symbolic link": tmp_path / "out.txt",
              "hard link": tmp_path / "out.txt", "run directory's file": run / "last.pt"}[link]
    if link == "symbolic link":
        output.symlink_to(checkpoint)
    if link == "hard link":
        os.link(checkpoint, output)
    given = run if link == "run directory's file" else checkpoint
    for args in (["sample", given, "--output", output], ["compare", given, "--markdown", output]):
        printed = run_cli(*args)
        assert printed.exit_code == 2, printed.output
        assert "writing it would destroy what is read" in printed.stderr
    text = tmp_path / "text.txt"
    text.write_text("ROMEO:\n", encoding="utf-8")
    printed = run_cli("inspect", given, text, "--unit", "0", "--html", output)
    assert printed.exit_code == 2 and printed.stdout == "", printed.output
    with pytest.raises(OptionConflict, match="output .* is (.*, in the run directory of )?checkpoint"):
        check_output(output, "output", {"checkpoint": given})
    assert checkpoint.read_bytes() == before
    assert (run / "last.pt").read_bytes() == (tiny_run / "last.pt").read_bytes()


def test_a_run_directory_never_replaces_what_it_reads_or_a_file_its_lock_links_to(small_corpus, tmp_path,
                                                                                    tiny_run):
    run = tmp_path / "run"
    run.mkdir()
    corpus = run / "metrics.jsonl"
    corpus.write_bytes(small_corpus.read_bytes())
    with pytest.raises(OptionConflict, match="would replace .*metrics.jsonl, which is corpus"):
        charrnn.train(corpus, out_dir=run, overwrite=True, max_steps=2, **TINY_RUN)
    os.link(small_corpus, run / "best.pt")  # a hard link: the same file under the run's name
    with pytest.raises(OptionConflict, match="which is corpus"):
        charrnn.train(small_corpus, out_dir=run, overwrite=True, max_steps=2, **TINY_RUN)
    with pytest.raises(OptionConflict, match="which is init_from"):
        charrnn.train(small_corpus, init_from=tiny_run, out_dir=tiny_run, overwrite=True, max_steps=2)
    assert corpus.read_bytes() == small_corpus.read_bytes() == (run / "best.pt").read_bytes()
    locked, victim = tmp_path / "locked", tmp_path / "victim.txt"  # a link at the lock: its target is kept
    locked.mkdir()
    victim.write_text("mine", encoding="utf-8")
    (locked / ".charrnn.lock").symlink_to(victim)
    with pytest.raises(CharrnnError, match="cannot create the run lock"):
        charrnn.train(small_corpus, out_dir=locked, max_steps=2, **TINY_RUN)
    assert victim.read_text(encoding="utf-8") == "mine"


def test_a_wrong_dynamic_setting_or_a_stream_of_several_texts_is_refused(tiny_checkpoint, tmp_path):
    with pytest.raises(ConfigTypeError, match="dynamic_lr must be a number, not bool True"):
        charrnn.perplexity(tiny_checkpoint, dynamic=True, dynamic_lr=True)
    for option in ({"beam_width": 3}, {"num_samples": 2}):  # before the checkpoint is read
        with pytest.raises(OptionConflict, match="a stream is one sampled text"):
            charrnn.stream(tmp_path / "missing.pt", **option)


def test_each_module_function_reads_its_text_once_and_a_text_too_short_to_score_is_named(
        tiny_checkpoint, tmp_path, monkeypatch):
    (tmp_path / "prime.txt").write_text("Ca", encoding="utf-8")
    (tmp_path / "text.txt").write_text("Café line 3 of the tiny play.\n", encoding="utf-8")
    reads = []
    read = charrnn.api._read_text
    monkeypatch.setattr(charrnn.api, "_read_text", lambda path: reads.append(path.name) or read(path))
    prime = tmp_path / "prime.txt"
    assert charrnn.sample(tiny_checkpoint, prime_file=prime, length=5, seed=1).text[:2] == "Ca"
    assert charrnn.stream(tiny_checkpoint, prime_file=prime, length=5, seed=1).prime == "Ca"
    assert charrnn.inspect(tiny_checkpoint, file=tmp_path / "text.txt", unit=0).text.startswith("Café line")
    assert reads == ["prime.txt", "prime.txt", "text.txt"]
    one = tmp_path / "one.txt"
    one.write_text("R", encoding="utf-8")
    model = charrnn.load(tiny_checkpoint)
    for call in (lambda: model.perplexity(file=one), lambda: list(model.surprisal(file=one))):
        with pytest.raises(CharrnnError, match=f"^{one} holds 1 character; scoring needs at least 2"):
            call()
    with pytest.raises(CharrnnError, match="^the text holds 0 characters the model knows"):
        model.perplexity("\x01\x02", skip_unknown=True)


def test_each_loaded_model_keeps_its_own_thread_count(tiny_checkpoint, monkeypatch):
    """torch's thread count is the process's: loading a model with another count leaves an earlier one's."""
    seen, generate, before = [], sampling.generate, torch.get_num_threads()

    def generating(*args, **kwargs):
        for step in generate(*args, **kwargs):
            seen.append(torch.get_num_threads())
            yield step

    monkeypatch.setattr(sampling, "generate", generating)
    one, two = charrnn.load(tiny_checkpoint, threads=1), charrnn.load(tiny_checkpoint, threads=2)
    forward = one.network.forward
    one.network.forward = lambda *args, **kw: seen.append(torch.get_num_threads()) or forward(*args, **kw)
    one.sample("R", 5, seed=1)
    assert seen
    one.perplexity(SMALL_TEXT[:200])
    list(one.stream("R", 5, seed=1))
    list(one.surprisal(SMALL_TEXT[:200]))
    assert set(seen) == {1}
    two.sample("R", 5, seed=1)
    assert torch.get_num_threads() == 2  # what loading the second model set, restored after each call
    torch.set_num_threads(before)


def test_only_a_checkpoint_argument_may_name_the_shipped_model(tmp_path, monkeypatch, tiny_checkpoint):
    """Its corpus is guarded when ``shakespeare`` is the checkpoint read; a text file so named is a file."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    corpus = Path("data") / "tinyshakespeare" / "input.txt"  # where the shipped model's corpus is read
    corpus.parent.mkdir(parents=True)
    with pytest.raises(OptionConflict, match="the corpus checkpoint .*shakespeare was trained on"):
        check_output(corpus, "output", {"checkpoint": "shakespeare"})
    assert check_output(corpus, "output", {"checkpoint": tiny_checkpoint, "prime_file": "shakespeare",
                                           "text_file": "shakespeare"}) == corpus
