import json
import math
import os
import pickle
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
import torch

import charrnn
from charrnn.config import ModelConfig
from charrnn.errors import CharrnnError
from charrnn.models.evaluate import EvalResult
from charrnn.models.model import state_shapes
from charrnn.training.checkpoint import (
    CONFIG,
    FOLDER_FILES,
    FORMAT_VERSION,
    VOCAB,
    WEIGHTS,
    Checkpoint,
    checkpoint_in,
    load_checkpoint,
    load_model,
    save_checkpoint,
)

from helpers import KINDS, random_model, run_cli
from helpers import VOCAB as KINDS_VOCAB


def test_round_trip_gives_identical_logits_and_the_format_is_plain_documented_data(tiny_checkpoint, tmp_path):
    loaded = load_model(tiny_checkpoint)
    copy = tmp_path / "copy.pt"
    save_checkpoint(copy, loaded.payload)
    again = load_model(copy)
    idx = loaded.vocab.encode("ROMEO:\nCafé").long().unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(loaded.network(idx)[0], again.network(idx)[0])
    assert again.vocab == loaded.vocab
    payload = torch.load(tiny_checkpoint, weights_only=True)
    assert payload["format_version"] == FORMAT_VERSION
    assert isinstance(payload["vocab"], list) and "🙂" in payload["vocab"]
    assert {"model_config", "train_config", "model_state", "optimizer_state", "step", "epoch",
            "best", "corpus"} <= payload.keys()
    assert all(t.device.type == "cpu" for t in payload["model_state"].values())
    # The format is described in one place for readers (docs/how-it-works.md); this keeps it complete.
    described = (Path(__file__).parents[2] / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    missing = [spec.name for spec in fields(Checkpoint) if f"`{spec.name}`" not in described]
    assert missing == []


NOT_TORCH = r"is not a charrnn checkpoint \(not a file that torch.save"
NO_FILE = "is not a regular file .*give a checkpoint file or a run directory"  # there, but not called missing


@pytest.mark.parametrize(("make", "refusal"), [
    (lambda tiny, path: None, "does not exist"),
    (lambda tiny, path: os.mkfifo(path), NO_FILE),
    (lambda tiny, path: Path(os.devnull), NO_FILE),
    (lambda tiny, path: path.write_bytes(tiny.read_bytes()[:2000]), "not a readable charrnn checkpoint"),
    (lambda tiny, path: path.write_bytes(b"just some text\n"), NOT_TORCH),
    (lambda tiny, path: path.write_bytes(b""), NOT_TORCH),
    (lambda tiny, path: torch.save({"weights": torch.zeros(3)}, path), "not a charrnn checkpoint"),
    (lambda tiny, path: torch.save({**torch.load(tiny, weights_only=True), "format_version": 99}, path),
     "format version 99"),
], ids=["missing", "fifo", "device", "truncated", "text", "empty", "foreign torch file",
        "unknown format version"])
def test_what_is_no_loadable_checkpoint_is_refused(tiny_checkpoint, tmp_path, make, refusal):
    made = make(tiny_checkpoint, tmp_path / "x.pt")
    with pytest.raises(CharrnnError, match=refusal):
        load_checkpoint(made if isinstance(made, Path) else tmp_path / "x.pt")


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("via_torch_save", [True, False])
def test_pickled_code_is_refused_and_never_runs(tmp_path, via_torch_save):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    if via_torch_save:
        torch.save({"format_version": 1, "payload": _Payload(marker)}, path)
    else:
        path.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(CharrnnError, match="not a readable charrnn checkpoint"):
        load_checkpoint(path)
    assert not marker.exists()


@pytest.mark.slow
def test_a_save_past_the_file_size_limit_names_the_cause_and_keeps_the_old_file(tmp_path):
    """torch.save turns a failed write into a RuntimeError that says nothing of why; the save says why."""
    old = tmp_path / "last.pt"
    old.write_bytes(b"the previous checkpoint")
    script = ("import resource, sys, torch\n"
              "from charrnn.errors import CharrnnError\n"
              "from charrnn.training.checkpoint import save_checkpoint\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
              "try:\n"
              "    save_checkpoint(sys.argv[1], {'model_state': {'w': torch.zeros(100_000)}})\n"
              "except CharrnnError as exc:\n"
              "    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", script, str(old)], capture_output=True, text=True,
                            timeout=120)
    said = result.stdout.strip()
    assert said == (f"could not write {old}: File too large (the shell's file-size limit stops it "
                    f"(ulimit -f): raise it and run it again); any previous last.pt is intact")
    assert old.read_bytes() == b"the previous checkpoint" and os.listdir(tmp_path) == ["last.pt"]


def test_a_run_directory_that_cannot_be_read_is_a_one_line_error(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    real_is_file = Path.is_file

    def denied(path: Path) -> bool:  # what a directory without read permission gives a user who is not root
        if path.parent == run:
            raise PermissionError(13, "Permission denied", str(path))
        return real_is_file(path)

    monkeypatch.setattr(Path, "is_file", denied)
    with pytest.raises(CharrnnError, match=f"^cannot read run directory {run}: Permission denied$"):
        checkpoint_in(run)


# ---------------------------------------------------------------------------- model folders

DOCS = Path(__file__).parents[2] / "docs" / "model-folder.md"


@pytest.fixture
def folder(tiny_checkpoint, tmp_path) -> Path:
    """The tiny run's best.pt as a model folder."""
    return charrnn.export(tiny_checkpoint, tmp_path / "model", format="safetensors").path


def test_a_folder_samples_and_scores_as_its_checkpoint(tiny_checkpoint, folder):
    assert sorted(path.name for path in folder.iterdir()) == sorted(FOLDER_FILES)
    from_checkpoint, from_folder = charrnn.load(tiny_checkpoint), charrnn.load(folder)
    assert from_folder.sample("RO", 80, seed=3).texts == from_checkpoint.sample("RO", 80, seed=3).texts
    text = "ROMEO: I love thee.\n" * 8
    scores = [model.perplexity(text).score.nats_per_char for model in (from_checkpoint, from_folder)]
    assert abs(scores[0] - scores[1]) < 1e-6
    (folder.parent / "text.txt").write_text(text, encoding="utf-8")
    compared = charrnn.compare([tiny_checkpoint, folder], text_file=folder.parent / "text.txt", length=40,
                               seed=2)
    first, second = compared.reports
    assert first.sample == second.sample and abs(first.nats_per_char - second.nats_per_char) < 1e-6


def test_the_command_line_reads_a_folder_as_it_reads_a_checkpoint(tiny_checkpoint, folder):
    text = tiny_checkpoint.parent / "text.txt"
    text.write_text("ROMEO: I love thee.\n" * 4, encoding="utf-8")
    for command in (["sample", "{}", "--prime", "RO", "--length", "60", "--greedy"],
                    ["eval-perplexity", "{}", str(text), "--json"]):
        outputs = [run_cli(*(part.format(path) for part in command)) for path in (tiny_checkpoint, folder)]
        assert [result.exit_code for result in outputs] == [0, 0], outputs[1].output
        if "--json" in command:
            scores = [json.loads(result.stdout)["nats_per_char"] for result in outputs]
            assert abs(scores[0] - scores[1]) < 1e-6
        else:
            assert outputs[0].stdout == outputs[1].stdout
    info = charrnn.info(folder).facts
    assert info["step"] == load_checkpoint(tiny_checkpoint)["step"] and info["resumable"] is False
    assert info["machine"] == load_checkpoint(tiny_checkpoint)["machine"] and info["machine"]


def test_a_folder_fine_tunes_but_is_never_resumed(folder, small_corpus, tmp_path):
    tuned = charrnn.train(small_corpus, out_dir=tmp_path / "tuned", init_from=folder, max_steps=2)
    assert tuned.steps == 2 and load_checkpoint(tmp_path / "tuned" / "last.pt")["train_config"]["init_from"]
    cut = shutil.copytree(folder, tmp_path / "cut")
    (cut / WEIGHTS).write_bytes((cut / WEIGHTS).read_bytes()[:100])  # refused before the weights are read
    for given in (folder, cut):
        result = run_cli("train", "--resume", given, "--max-steps", "5")
        assert result.exit_code == 1 and result.stderr.strip().endswith(
            f"is a model folder: it holds weights only, so it cannot be resumed; fine-tune it with "
            f"--init-from {given}")


def test_the_weights_keep_the_checkpoints_precision_unless_float32_is_asked(tiny_checkpoint, tmp_path):
    half = tmp_path / "half.pt"
    payload = load_checkpoint(tiny_checkpoint)
    halved = {name: weight.half() for name, weight in payload["model_state"].items()}
    save_checkpoint(half, {**payload, "model_state": halved})
    kept = charrnn.export(half, tmp_path / "kept", format="safetensors")
    widened = charrnn.export(half, tmp_path / "wide", format="safetensors", float32=True)
    assert kept.encoding == "float16 safetensors" and widened.encoding == "float32 safetensors"
    assert {t.dtype for t in load_checkpoint(kept.path)["model_state"].values()} == {torch.float16}
    assert widened.size > 1.9 * kept.size
    assert charrnn.load(kept.path).sample("RO", 50, greedy=True).text == \
        charrnn.load(widened.path).sample("RO", 50, greedy=True).text


def test_an_export_replaces_only_a_folder_it_wrote(tiny_checkpoint, folder, tmp_path):
    again = charrnn.export(tiny_checkpoint, folder, format="safetensors", float32=True)
    assert again.path == folder and sorted(p.name for p in folder.iterdir()) == sorted(FOLDER_FILES)
    (folder / "notes.txt").write_text("mine", encoding="utf-8")
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    for target, fragment in ((folder, "holds what an export did not write (notes.txt)"),
                             (folder / "notes.txt", "is inside the model folder"),
                             (tiny_checkpoint.parent / "metrics.jsonl", "is a file"),
                             (tiny_checkpoint.parent, "holds"),
                             (tmp_path / "no" / "such", "there is no directory")):
        result = run_cli("export", tiny_checkpoint, "--format", "safetensors", "--output", target)
        assert result.exit_code != 0 and len(result.stderr.splitlines()) == 1, result.output
        assert fragment in result.stderr, result.stderr
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(CharrnnError, match="is a symbolic link"):
        charrnn.export(tiny_checkpoint, link, format="safetensors")
    assert not list(tmp_path.glob(".charrnn-*"))


@pytest.mark.parametrize(("options", "fragment"), [
    ({"title": "x"}, "title is the page's"),
    ({"prime": "ab"}, "prime is the page's"),
    ({"format": "onnx"}, "format must be one of page, safetensors"),
])
def test_options_of_the_other_format_are_refused(tiny_checkpoint, tmp_path, options, fragment):
    with pytest.raises(CharrnnError, match=fragment):
        charrnn.export(tiny_checkpoint, tmp_path / "out", **{"format": "safetensors", **options})
    with pytest.raises(CharrnnError, match="float32 is a model folder's"):
        charrnn.export(tiny_checkpoint, tmp_path / "page.html", float32=True)
    assert not list(tmp_path.iterdir())


def _edit_json(name: str, edit):
    def apply(folder: Path) -> None:
        value = json.loads((folder / name).read_text(encoding="utf-8"))
        (folder / name).write_text(json.dumps(edit(value)), encoding="utf-8")
    return apply


def _edit_weights(edit):
    def apply(folder: Path) -> None:
        from safetensors.torch import load_file, save_file

        save_file(edit(load_file(folder / WEIGHTS)), folder / WEIGHTS)
    return apply


def _write(name: str, data: bytes):
    return lambda folder: (folder / name).write_bytes(data)


def _first_weight(state: dict, value: torch.Tensor) -> dict:
    return {**state, sorted(state)[0]: value}


DAMAGE = {
    "config not JSON": (_write(CONFIG, b"{nope"), CONFIG, "is not JSON"),
    "config of another format": (_edit_json(CONFIG, lambda c: {**c, "format": "gpt2"}), CONFIG,
                                 "not a charrnn model folder's config"),
    "config of a newer version": (_edit_json(CONFIG, lambda c: {**c, "format_version": 2}), CONFIG,
                                  "format version 2"),
    "a negative step": (_edit_json(CONFIG, lambda c: {**c, "step": -1}), CONFIG, "step is -1"),
    "a model that is not a record": (_edit_json(CONFIG, lambda c: {**c, "model_config": None}), CONFIG,
                                     "expected a ModelConfig record"),
    "an unknown cell": (_edit_json(CONFIG, lambda c: {**c, "model_config": {**c["model_config"],
                                                                             "cell": "transformer"}}),
                        CONFIG, "model_config"),
    "a wider model than its tensors": (
        _edit_json(CONFIG, lambda c: {**c, "model_config": {**c["model_config"], "hidden_size": 64}}),
        WEIGHTS, "model.safetensors does not match"),
    "a vocabulary size its list does not have": (
        _edit_json(CONFIG, lambda c: {**c, "model_config": {**c["model_config"], "vocab_size": 999}}),
        VOCAB, "vocab.json does not match"),
    "a model setting this charrnn does not know": (
        _edit_json(CONFIG, lambda c: {**c, "model_config": {**c["model_config"], "attention": True}}),
        CONFIG, "model_config has 'attention', which this charrnn does not know"),
    "a weights dtype its tensors do not have": (
        _edit_json(CONFIG, lambda c: {**c, "weights_dtype": "float16"}), CONFIG,
        "weights_dtype is 'float16'; "),
    "a weights dtype that is no name": (_edit_json(CONFIG, lambda c: {**c, "weights_dtype": [1]}), CONFIG,
                                        "weights_dtype is [1]; "),
    "no weights dtype": (_edit_json(CONFIG, lambda c: {k: v for k, v in c.items() if k != "weights_dtype"}),
                         CONFIG, "weights_dtype is None; "),
    "gates in another order": (_edit_json(CONFIG, lambda c: {**c, "sampler": {**c["sampler"],
                                                                               "gate_order": "o g f i"}}),
                               CONFIG, "model.safetensors and its model_config are read with {"),
    "a sampler of a list": (_edit_json(CONFIG, lambda c: {**c, "sampler": []}), CONFIG, "sampler is []"),
    "a version that is no string": (_edit_json(CONFIG, lambda c: {**c, "charrnn_version": {}}), CONFIG,
                                    "charrnn_version is {} (a dict); expected a string"),
    "a negative corpus": (_edit_json(CONFIG, lambda c: {**c, "corpus": {**c["corpus"], "chars": -5}}), CONFIG,
                          "corpus splits -5 characters at"),
    "a corpus of 10**40 characters": (_edit_json(CONFIG, lambda c: {**c, "corpus": {**c["corpus"],
                                                                                    "chars": 10**40}}),
                                      CONFIG, "expected a number of at most 64 bits"),
    "a negative score": (_edit_json(CONFIG, lambda c: {**c, "score": {**c["score"], "nats_per_char": -3}}),
                         CONFIG, "score is no score: -3"),
    "a step past 64 bits": (_edit_json(CONFIG, lambda c: {**c, "step": 10**400}), CONFIG,
                            "expected a number of at most 64 bits"),
    "a byte order mark": (lambda folder: (folder / CONFIG).write_bytes(b"\xef\xbb\xbf" + b"[1]"), CONFIG,
                          "is not a charrnn model folder's config"),
    "a version that is not a whole number": (_edit_json(CONFIG, lambda c: {**c, "format_version": True}),
                                             CONFIG, "format version True"),
    "vocabulary not a list": (_edit_json(VOCAB, lambda v: {"chars": v}), VOCAB, "vocab is"),
    "vocabulary with a repeat": (_edit_json(VOCAB, lambda v: [v[0], *v[:-1]]), VOCAB, "unique"),
    "vocabulary of strings": (_edit_json(VOCAB, lambda v: ["ab", *v[1:]]), VOCAB, "exactly one code point"),
    "vocabulary too short": (_edit_json(VOCAB, lambda v: v[:-1]), VOCAB, "vocab has"),
    "vocabulary not JSON": (_write(VOCAB, b"\xff\xfe"), VOCAB, "is not JSON"),
    "weights missing": (lambda folder: (folder / WEIGHTS).unlink(), WEIGHTS, "is missing"),
    "weights not safetensors": (_write(WEIGHTS, b"PK\x03\x04 a zip"), WEIGHTS, "not a readable safetensors"),
    "weights cut short": (lambda folder: (folder / WEIGHTS).write_bytes((folder / WEIGHTS).read_bytes()[:-9]),
                          WEIGHTS, "not a readable safetensors"),
    "a weight of integers": (_edit_weights(lambda s: _first_weight(s, s[sorted(s)[0]].long())), WEIGHTS,
                             "holds torch.int64 values"),
    "a weight of float8": (_edit_weights(lambda s: _first_weight(s, s[sorted(s)[0]].to(torch.float8_e4m3fn))),
                           WEIGHTS, "holds torch.float8_e4m3fn values; expected float16, bfloat16"),
    "only the config left": (lambda folder: [(folder / name).unlink() for name in (WEIGHTS, VOCAB)], WEIGHTS,
                             "is missing"),
    "a weight of NaN": (_edit_weights(lambda s: _first_weight(s, s[sorted(s)[0]] * float("nan"))), WEIGHTS,
                        "non-finite"),
    "a weight too many": (_edit_weights(lambda s: {**s, "extra": torch.zeros(2)}), WEIGHTS, "'extra'"),
    "a weight missing": (_edit_weights(lambda s: dict(sorted(s.items())[1:])), WEIGHTS, "lacks"),
}


def _sparse_weights(extra: dict, model: dict | None = None, missing: int = 0):
    """A weights file whose header declares the tensors of ``model`` (default: the folder's own) plus
    ``extra`` (name → shape), all float32, with data as long as declared (less ``missing`` bytes): sparse,
    a few KB on disk."""
    def apply(folder: Path) -> None:
        if model is not None:
            _edit_json(CONFIG, lambda c: {**c, "model_config": {**c["model_config"], **model}})(folder)
        shapes = state_shapes(ModelConfig(**json.loads((folder / CONFIG).read_text())["model_config"]))
        header, offset = {}, 0
        for name, shape in {**shapes, **extra}.items():
            end = offset + 4 * math.prod(shape)
            header[name], offset = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, end]}, end
        raw = json.dumps(header).encode()
        (folder / WEIGHTS).write_bytes(len(raw).to_bytes(8, "little") + raw)
        os.truncate(folder / WEIGHTS, 8 + len(raw) + offset - missing)
    return apply


def _sparse(name: str, size: int, start: bytes = b"["):
    def apply(folder: Path) -> None:
        (folder / name).write_bytes(start)
        os.truncate(folder / name, size)
    return apply


DEEP = "[" * 600 + "]" * 600


def _nested(name: str):
    """``name``'s JSON with a value nested 600 deep added (as ``deep`` in an object, or a list's last)."""
    def apply(folder: Path) -> None:
        text = (folder / name).read_text(encoding="utf-8").rstrip()
        key = "" if text.endswith("]") else '"deep": '
        (folder / name).write_text(f"{text[:-1]}, {key}{DEEP}{text[-1]}", encoding="utf-8")
    return apply


def _header(text: str):
    """A weights file of header ``text`` alone."""
    def apply(folder: Path) -> None:
        (folder / WEIGHTS).write_bytes(len(text.encode()).to_bytes(8, "little") + text.encode())
    return apply


# Refused from sizes, counts, depth and the weights' header, before any data is read: each file is
# sparse, gigabytes on paper and a few KB on disk, so reading one would run out of memory or time.
DAMAGE |= {
    "a model too large for memory": (_sparse_weights({}, {"num_layers": 1, "hidden_size": 131072,
                                                           "skip_connections": False}), WEIGHTS,
                                     "GiB of memory; this machine has"),
    "an undeclared tensor of 256 GiB": (_sparse_weights({"extra": (2**36,)}), WEIGHTS, "'extra'"),
    "a weights header of 2 GiB": (_sparse(WEIGHTS, 2**31 + 8, (2**31).to_bytes(8, "little")), WEIGHTS,
                                  "a header of 2,147,483,648 bytes"),
    "a tensor past the file's end": (_sparse_weights({"extra": (2**36,)}, missing=2**38), WEIGHTS,
                                     "past the file's end"),
    "a vocabulary of 100 GiB": (_sparse(VOCAB, 100 * 2**30), VOCAB, "is refused unread"),
    "a config of 100 GiB": (_sparse(CONFIG, 100 * 2**30, b"{"), CONFIG, "is refused unread"),
    "a config nested 600 deep": (_nested(CONFIG), CONFIG, "nested more than 64 levels deep"),
    "a vocabulary nested 600 deep": (_nested(VOCAB), VOCAB, "nested more than 64 levels deep"),
    "a weights header nested 600 deep": (_header(f'{{"__metadata__": {DEEP}}}'), WEIGHTS,
                                         "nested more than 64 levels deep"),
    "a negative offset": (_header('{"w": {"dtype": "F32", "shape": [1], "data_offsets": [-1, 3]}}'), WEIGHTS,
                          "'w' has no whole-number shape and two data offsets"),
    "metadata of a list": (_header('{"__metadata__": ["a"]}'), WEIGHTS, "__metadata__ is not a map of"),
    "a number of 5,000 digits": (lambda folder: (folder / CONFIG).write_text(f'{{"format": {"9" * 5000}}}'),
                                 CONFIG, "holds a number too long to read"),
}


@pytest.mark.parametrize("damage", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_folder_is_refused_in_one_line_naming_the_file(folder, damage):
    apply, file, fragment = DAMAGE[damage]
    apply(folder)
    for command in (["sample", str(folder), "--length", "5"], ["info", str(folder)]):
        result = run_cli(*command)
        assert result.exit_code == 1 and len(result.stderr.splitlines()) == 1, result.output
        assert f"{folder}/{file}" in result.stderr and fragment in result.stderr, result.stderr


def numpy_reader() -> type:
    """The CharModel class of the reader in docs/model-folder.md, run from the docs themselves."""
    section = DOCS.read_text(encoding="utf-8").split("## Reading it in plain numpy", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert len(code.splitlines()) < 80
    namespace: dict = {}
    exec(code.rsplit("\nprint(", 1)[0], namespace)  # all but the example's last line
    return namespace["CharModel"]


@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
def test_the_numpy_reader_in_the_docs_writes_charrnns_greedy_text(kind, tmp_path):
    pytest.importorskip("numpy")
    # An echo state network past a spectral radius of 1 is chaotic: float64 and float32 part within tens
    # of characters (docs/model-folder.md), so it is tested in its stable regime.
    stable = {"spectral_radius": 0.9} if KINDS[kind]["cell"] == "esn" else {}
    model = random_model({**KINDS[kind], **stable})
    checkpoint = tmp_path / "model.pt"
    save_checkpoint(checkpoint, {"model_config": model.config.to_dict(), "vocab": list(KINDS_VOCAB.chars),
                                 "model_state": model.state_dict()})
    folder = charrnn.export(checkpoint, tmp_path / "folder", format="safetensors").path
    prime = "ab 🙂c"
    result = run_cli("sample", folder, "--prime", prime, "--length", "150", "--greedy")
    assert result.exit_code == 0, result.output
    greedy = numpy_reader()(folder).greedy(prime, 150)
    assert greedy == charrnn.sample(folder, prime, 150, greedy=True).text
    assert result.stdout.rstrip("\n") == greedy.rstrip("\n")  # the command ends its text with a line end


def test_the_shipped_model_reads_in_plain_numpy_as_in_charrnn(tmp_path):
    pytest.importorskip("numpy")
    folder = tmp_path / "shakespeare"
    shutil.copytree(charrnn.load("shakespeare").checkpoint, folder)
    assert numpy_reader()(folder).greedy("ROMEO:", 200) == charrnn.sample(
        "shakespeare", "ROMEO:", 200, greedy=True, device="cpu").text


def test_a_folder_scores_its_own_weights_and_keeps_an_infinite_perplexity(tiny_run, tmp_path):
    last = load_checkpoint(tiny_run / "last.pt")
    scored = charrnn.export(tiny_run / "last.pt", tmp_path / "last", format="safetensors").path
    assert f"{last['latest_eval']['nats_per_char']:.4f}" in (scored / "README.md").read_text(encoding="utf-8")
    later = tmp_path / "later.pt"  # weights saved after their last evaluation
    save_checkpoint(later, {**last, "step": last["step"] + 1})
    unscored = charrnn.export(later, tmp_path / "unscored", format="safetensors").path
    card = (unscored / "README.md").read_text(encoding="utf-8")
    assert "These weights were not scored when they were saved" in card and "score" not in json.loads(
        (unscored / CONFIG).read_text(encoding="utf-8"))
    assert "charrnn eval-perplexity unscored" in card and str(tmp_path) not in card
    assert charrnn.info(unscored).facts["score"] is None and charrnn.info(later).facts["score"] is None
    assert charrnn.info(scored).facts["score"]["nats_per_char"] == last["latest_eval"]["nats_per_char"]
    assert "not scored as saved" in run_cli("info", unscored).stdout
    again = charrnn.export(unscored, tmp_path / "again", format="safetensors").path  # still unscored
    assert "These weights were not scored" in (again / "README.md").read_text(encoding="utf-8")
    payload = load_checkpoint(tiny_run / "best.pt")
    diverged = tmp_path / "diverged.pt"
    exploded = EvalResult.from_total(800.0 * payload["best"]["chars"], payload["best"]["chars"]).to_dict()
    latest = {**exploded, "step": payload["step"]}
    save_checkpoint(diverged, {**payload, "best": exploded, "latest_eval": latest})
    folder = charrnn.export(diverged, tmp_path / "diverged", format="safetensors").path
    assert load_checkpoint(folder)["score"]["perplexity"] == float("inf")
    assert "| ∞ |" in (folder / "README.md").read_text(encoding="utf-8")
    assert charrnn.info(folder).facts["best"]["perplexity"] == float("inf")


def test_no_run_or_output_lands_in_or_inside_a_model_folder(folder, small_corpus, tmp_path):
    before = {path.name: path.read_bytes() for path in folder.iterdir()}
    for extra in ([], ["--overwrite"], ["--init-from", str(folder)]):
        result = run_cli("train", small_corpus, "--out", folder, "--max-steps", "1", *extra)
        assert result.exit_code != 0 and len(result.stderr.splitlines()) == 1, result.output
        assert "model folder" in result.stderr, result.stderr
    for arguments in (["sample", str(folder), "--length", "5", "--output", str(folder / "notes.txt")],
                      ["export", str(folder), "--output", str(folder / "page.html")],
                      ["export", str(folder), "--format", "safetensors", "--output", str(folder / "inner")],
                      ["train", str(small_corpus), "--max-steps", "1", "--out", str(folder / "run")]):
        result = run_cli(*arguments)
        assert result.exit_code == 2 and "is inside the model folder" in result.stderr, result.output
    assert {path.name: path.read_bytes() for path in folder.iterdir()} == before


def test_an_empty_folder_keeps_its_mode_and_the_current_directory_is_refused(tiny_checkpoint, tmp_path,
                                                                             monkeypatch):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    charrnn.export(tiny_checkpoint, private, format="safetensors")
    assert stat.S_IMODE(private.stat().st_mode) == 0o700 and (private / WEIGHTS).exists()
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    for given in (".", str(here)):
        with pytest.raises(CharrnnError, match="is the current directory"):
            charrnn.export(tiny_checkpoint, given, format="safetensors")
    assert not list(here.iterdir())


def test_averaged_runs_score_their_checkpoints_and_a_capped_or_partial_split_is_said(make_run, small_corpus,
                                                                                   tmp_path):
    run = make_run(small_corpus, tmp_path / "run", max_steps=30, eval_every=10, ema_decay=0.9, eval_chars=200,
                   val_max_chars=300)
    last = load_checkpoint(run.out_dir / "last.pt")
    folder = charrnn.export(run.out_dir / "last.pt", tmp_path / "last", format="safetensors").path
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f"| {last['latest_eval']['nats_per_char']:.4f} |" in card and "not scored" not in card
    held = last["corpus"]["chars"] - last["corpus"]["split_point"]
    assert held == 300 and f"the first 201 of the last {held:,} characters" in card
    assert f"to the end, {held / last['corpus']['chars']:.1%} of the corpus" in card


def test_only_a_charrnn_model_folder_keeps_outputs_out(tiny_checkpoint, tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "models").mkdir(parents=True)
    (project / "vocab.json").write_text('{"hello": 0}', encoding="utf-8")  # a tokenizer's, say
    (project / "model.safetensors").write_bytes(b"")
    monkeypatch.chdir(project)
    assert charrnn.export(tiny_checkpoint, Path("models/m"), format="safetensors").path.is_dir()
    long_name = project / ("x" * 250)  # a legal name: the temporary names stay short
    charrnn.export(tiny_checkpoint, long_name, format="safetensors")
    charrnn.export(tiny_checkpoint, long_name, format="safetensors", float32=True)
    assert json.loads((long_name / CONFIG).read_text(encoding="utf-8"))["weights_dtype"] == "float32"


def test_compare_without_the_corpus_shows_the_score_of_the_folders_own_weights(tiny_run, tmp_path):
    payload = load_checkpoint(tiny_run / "best.pt")
    chars = payload["best"]["chars"]  # the averaged weights' score, not the last evaluation's:
    averaged = EvalResult.from_total(2.5 * chars, chars).to_dict()
    gone = {**payload["corpus"], "path": str(tmp_path / "gone")}
    (tmp_path / "run").mkdir()
    save_checkpoint(tmp_path / "run" / "best.pt", {**payload, "best": averaged, "best_is_average": True,
                                                   "corpus": gone})
    folder = charrnn.export(tmp_path / "run" / "best.pt", tmp_path / "model", format="safetensors").path
    for checkpoint in (tmp_path / "run" / "best.pt", folder):
        report = charrnn.compare([checkpoint], length=5).reports[0]
        assert report.nats_per_char == 2.5 and "stored at training time" in report.error
