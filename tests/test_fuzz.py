"""Fuzzing (hypothesis): whatever the options, bytes or prime: no traceback, exit 0 error or partial file."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import charrnn
from charrnn.cli.main import cli
from charrnn.errors import CharrnnError, ConfigError
from charrnn.training.checkpoint import load_checkpoint

pytestmark = pytest.mark.slow  # many drawn examples per test

FUZZ = settings(max_examples=int(os.environ.get("CHARRNN_FUZZ_EXAMPLES", "100")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

numbers = st.one_of(st.integers(-5, 40).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["", "x", "1e9", "-0", "0.5"]))


def mostly(valid: st.SearchStrategy) -> st.SearchStrategy:
    """Valid values four times in five, anything else the fifth, so many runs get past option parsing."""
    return st.integers(0, 4).flatmap(lambda pick: numbers if pick == 0 else valid)


corpora = st.one_of(
    st.binary(max_size=3000),  # usually not UTF-8
    st.text(max_size=3000).map(str.encode),
    st.text(min_size=1, max_size=40).map(lambda line: (line * 80).encode()),  # long enough to train on
)


def check_outcome(result, directory: Path, inputs: tuple[Path, ...] = ()) -> None:
    """No traceback; an error is one last ``Error:`` line; every checkpoint written (not ``inputs``) loads."""
    output = result.output
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    if result.exit_code == 0:
        assert "Error:" not in result.stderr, result.stderr
    else:
        last = [line for line in result.stderr.splitlines() if line.strip()][-1]
        assert last.startswith("Error: "), result.stderr
    assert not list(directory.rglob(".*.tmp")), "a temporary file was left behind"
    for checkpoint in directory.rglob("*.pt"):
        if checkpoint not in inputs:
            load_checkpoint(checkpoint)  # complete and loadable, or this raises


@FUZZ
@given(corpus=corpora, batch_size=mostly(st.integers(1, 6).map(str)),
       seq_len=mostly(st.integers(1, 20).map(str)), val_frac=mostly(st.floats(0.02, 0.5).map(repr)),
       lr=mostly(st.floats(1e-4, 10.0).map(repr)),
       save_epochs=mostly(st.sampled_from(["", "1", "1,2"])))
def test_train_never_crashes(corpus, batch_size, seq_len, val_frac, lr, save_epochs):
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "corpus.txt").write_bytes(corpus)
        args = ["train", str(directory / "corpus.txt"), "--layers", "1", "--hidden", "8", "--embed", "4",
                "--max-steps", "2", "--eval-every", "1", "--out", str(directory / "run"),
                "--batch-size", batch_size, "--seq-len", seq_len, "-o", "val_frac", val_frac, "--lr", lr,
                *(["--save-epochs", save_epochs] if save_epochs else [])]
        check_outcome(CliRunner().invoke(cli, args), directory)


@FUZZ
@given(prime=st.text(max_size=40), temperature=numbers, top_k=numbers, top_p=numbers,
       length=st.integers(-3, 60).map(str), mode=st.sampled_from(["sample", "greedy", "beam"]),
       stop_at=st.one_of(st.none(), st.text(max_size=3)), to_file=st.booleans())
def test_sample_never_crashes(tiny_run, prime, temperature, top_k, top_p, length, mode, stop_at, to_file):
    modes = {"sample": ["--temperature", temperature, "--top-k", top_k, "--top-p", top_p],
             "greedy": ["--greedy"], "beam": ["--beam-width", top_k]}
    args = ["sample", str(tiny_run / "best.pt"), "--prime", prime, "--length", length, *modes[mode],
            *(["--stop-at", stop_at] if stop_at else [])]
    with tempfile.TemporaryDirectory() as tmp:
        output = Path(tmp) / "out.txt"
        result = CliRunner().invoke(cli, args + (["--output", str(output)] if to_file else []))
        check_outcome(result, Path(tmp))
        # The text goes whole to its one destination, or nowhere when the command fails.
        assert output.exists() == (to_file and result.exit_code == 0)
        if output.exists():
            assert output.read_text(encoding="utf-8").startswith(prime) and result.stdout == ""


@FUZZ
@given(text=st.binary(max_size=500), skip=st.booleans())
def test_eval_perplexity_never_crashes(tiny_run, corpus_cache_dir, text, skip):
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        (directory / "text.txt").write_bytes(text)
        args = ["eval-perplexity", str(tiny_run / "best.pt"), str(directory / "text.txt"), "--json",
                *(["--skip-unknown"] if skip else [])]
        result = CliRunner().invoke(cli, args)
        check_outcome(result, corpus_cache_dir)  # the encoded text is the one file eval-perplexity writes
        if result.exit_code == 0:
            assert json.loads(result.stdout)["chars"] >= 0


junk = st.one_of(st.none(), st.booleans(), st.integers(-(10**20), 10**20),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5),
                 st.lists(st.integers(-3, 3), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
NESTED = ("model_config", "corpus", "train_config", "best", "rng", "sampler")


def mutate_payload(payload: dict, data: st.DataObject, where: str | None = None) -> None:
    """A hostile edit at ``where`` (top, nested, tensor; else drawn): junk or no field, a bad weight."""
    where = where or data.draw(st.sampled_from(["top", "nested", "tensor"]))
    if where == "tensor":
        name = data.draw(st.sampled_from(sorted(payload["model_state"])))
        tensor = payload["model_state"][name]
        payload["model_state"][name] = data.draw(st.sampled_from([
            tensor.flatten()[:-1], tensor * float("nan"), tensor * 1e30, tensor.long(), tensor.unsqueeze(0)]))
        return
    present = [key for key in NESTED if isinstance(payload.get(key), dict)]
    container = payload[data.draw(st.sampled_from(present))] if where == "nested" and present else payload
    key = data.draw(st.sampled_from(sorted(container)))
    if data.draw(st.booleans()):
        del container[key]
    else:
        container[key] = data.draw(junk)


@FUZZ
@given(data=st.data())
def test_a_mutated_checkpoint_never_crashes(tiny_run, data):
    payload = torch.load(tiny_run / "last.pt", weights_only=True)
    mutate_payload(payload, data)
    command = data.draw(st.sampled_from(["sample", "eval", "resume", "compare"]))
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        shutil.copytree(tiny_run, run)
        torch.save(payload, run / "last.pt")
        args = {
            "sample": ["sample", str(run / "last.pt"), "--length", "3", "--seed", "1"],
            "eval": ["eval-perplexity", str(run / "last.pt"), "--json"],
            "resume": ["train", "--resume", str(run / "last.pt"), "--max-steps", "41"],
            "compare": ["compare", str(run / "last.pt"), "--length", "3"],
        }[command]
        check_outcome(CliRunner().invoke(cli, args), Path(tmp), inputs=(run / "last.pt", run / "best.pt"))


def mutate_folder(folder: Path, data: st.DataObject) -> None:
    """A hostile edit of a model folder: a JSON value junked or gone, a file cut or flipped, a bad weight."""
    from safetensors.torch import load_file, save_file

    name = data.draw(st.sampled_from(["config.json", "vocab.json", "model.safetensors", "bytes"]))
    if name == "bytes":
        path = folder / data.draw(st.sampled_from(["config.json", "vocab.json", "model.safetensors"]))
        raw = bytearray(path.read_bytes())
        at = data.draw(st.integers(0, len(raw) - 1))
        if data.draw(st.booleans()):
            raw[at] ^= data.draw(st.integers(1, 255))
        else:
            del raw[at:]
        path.write_bytes(bytes(raw))
        return
    if name == "model.safetensors":
        payload = {"model_state": load_file(folder / name)}
        mutate_payload(payload, data, where="tensor")
        save_file({key: value.contiguous() for key, value in payload["model_state"].items()}, folder / name)
        return
    value = json.loads((folder / name).read_text(encoding="utf-8"))
    if name == "vocab.json":
        value = data.draw(st.one_of(junk, st.just(value[:-1]), st.just([value[0], *value[1:-1], value[0]])))
    else:
        mutate_payload(value, data, where=data.draw(st.sampled_from(["top", "nested"])))
    (folder / name).write_text(json.dumps(value), encoding="utf-8")


@FUZZ
@given(data=st.data())
def test_a_mutated_model_folder_never_crashes(tiny_run, data):
    base = tiny_run.parent / "fuzzed-model"
    if not base.exists():
        charrnn.export(tiny_run / "best.pt", base, format="safetensors")
    command = data.draw(st.sampled_from(["sample", "eval", "info", "export"]))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "model"
        shutil.copytree(base, folder)
        mutate_folder(folder, data)
        (Path(tmp) / "text.txt").write_text("abc abc\n" * 10, encoding="utf-8")
        args = {
            "sample": ["sample", str(folder), "--length", "3", "--seed", "1"],
            "eval": ["eval-perplexity", str(folder), str(Path(tmp) / "text.txt"), "--skip-unknown"],
            "info": ["info", str(folder), "--json"],
            "export": ["export", str(folder), "--output", str(Path(tmp) / "page.html")],
        }[command]
        check_outcome(CliRunner().invoke(cli, args), Path(tmp))


# ---------------------------------------------------------------------------- the Python API

anything = st.one_of(st.none(), st.booleans(), st.integers(-3, 300),
                     st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                     st.lists(st.integers(0, 3), max_size=3),
                     st.sampled_from(["5", "0.1", "lstm"]))
TRAIN_PARAMETERS = ["max_steps", "epochs", "batch_size", "seq_len", "learning_rate", "hidden_size",
                    "num_layers", "embed_size", "cell", "dropout", "clip", "clip_mode", "seed", "eval_every",
                    "save_epochs", "weight_decay", "ema_decay", "val_frac", "warmup_steps", "overwrite",
                    "device", "precision"]
SAMPLE_PARAMETERS = ["prime", "length", "temperature", "top_k", "top_p", "greedy", "seed", "beam_width",
                     "stop_at", "num_samples", "device"]


def refused_before_any_write(call, directory: Path) -> None:
    """``call()`` works, or raises a CharrnnError; a refused option leaves ``directory`` as it was."""
    before = sorted(directory.rglob("*"))
    try:
        call()
    except ConfigError as exc:  # a ConfigTypeError too
        assert sorted(directory.rglob("*")) == before, f"{exc} came after a write"
    except CharrnnError:
        pass


@FUZZ
@given(data=st.data())
def test_the_api_works_or_raises_a_charrnn_error_before_writing(tiny_run, data):
    chosen = data.draw(st.dictionaries(st.sampled_from(TRAIN_PARAMETERS), anything, max_size=4))
    chosen.setdefault("max_steps", 3)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        corpus = root / "corpus.txt"
        corpus.write_text("a small corpus for the fuzzing of the API.\n" * 40)
        options = {"hidden_size": 16, "num_layers": 1, **chosen}
        refused_before_any_write(lambda: charrnn.train(corpus, out_dir=root / "run", **options), root)
    decoding = data.draw(st.dictionaries(st.sampled_from(SAMPLE_PARAMETERS), anything, max_size=4))
    refused_before_any_write(lambda: charrnn.sample(tiny_run / "best.pt", **decoding), tiny_run)
