"""The model that ships inside charrnn: its file, its provenance, and how ``shakespeare`` resolves."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import charrnn
from charrnn.data.corpus import CACHE_DIR_ENV
from charrnn.data.datasets import DATA_DIR_ENV, DATASETS, DEFAULT_DATASET, fetch
from charrnn.errors import CharrnnError
from charrnn.models import pretrained
from charrnn.models.pretrained import SHIPPED_MODELS, resolve_shipped, run_name, shipped_path
from charrnn.training.checkpoint import FOLDER_FILES, checkpoint_in, load_checkpoint

from helpers import INSTALLED, needs_installed, run_cli

SHIPPED = shipped_path("shakespeare")
MOST_BYTES = 2_000_000  # the folder's budget in the repository and the wheel


@pytest.fixture
def elsewhere(tmp_path, monkeypatch) -> Path:
    """A current directory that holds nothing named shakespeare."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_shipped_model_is_a_small_safe_model_folder_that_records_where_it_came_from():
    payload = load_checkpoint(SHIPPED)  # a model folder: safetensors weights, every field checked
    assert sorted(path.name for path in SHIPPED.iterdir()) == sorted(FOLDER_FILES)
    assert sum(path.stat().st_size for path in SHIPPED.iterdir()) <= MOST_BYTES
    package = Path(charrnn.__file__).parent
    assert not [path for path in package.rglob("*") if path.suffix in (".pt", ".pth", ".pkl", ".bin")]
    assert {tensor.dtype for tensor in payload["model_state"].values()} == {torch.float16}
    corpus = payload["corpus"]
    dataset = DATASETS[DEFAULT_DATASET]
    assert corpus["sha256"] == dataset.sha256 and corpus["chars"] == dataset.chars
    assert corpus["path"] == f"{dataset.origin}/{dataset.relative_path}"  # its public home, no machine's path
    settings = payload["train_config"]
    assert settings["seed"] == 1 and settings["epochs"] == 5
    assert 1.0 < payload["best"]["nats_per_char"] < 1.6
    assert payload["best"]["chars"] == dataset.chars - corpus["split_point"] - 1


def test_the_name_resolves_to_the_shipped_file_where_nothing_has_it_else_to_the_users_run(elsewhere,
                                                                                         tiny_checkpoint):
    for name in SHIPPED_MODELS:
        assert resolve_shipped(Path(name)) == shipped_path(name)
    assert checkpoint_in(Path("shakespeare")) == SHIPPED
    assert run_name(SHIPPED) == "shakespeare"
    (elsewhere / "shakespeare").mkdir()  # a run directory of that name is the user's
    (elsewhere / "shakespeare" / "best.pt").write_bytes(tiny_checkpoint.read_bytes())
    assert charrnn.load("shakespeare").checkpoint == Path("shakespeare/best.pt")


HIDDEN = ("; that shakespeare hides charrnn's own model of that name: rename it, or run "
          "from another directory$")


def test_a_users_own_file_directory_or_link_named_shakespeare_comes_first_and_says_what_it_hides(elsewhere):
    (elsewhere / "shakespeare").write_text("my notes", encoding="utf-8")
    with pytest.raises(CharrnnError, match="^shakespeare is not a charrnn checkpoint .*" + HIDDEN):
        charrnn.load("shakespeare")
    (elsewhere / "shakespeare").unlink()
    (elsewhere / "shakespeare").mkdir()
    with pytest.raises(CharrnnError, match="^shakespeare is a directory without a best.pt.*" + HIDDEN):
        charrnn.info("shakespeare")
    (elsewhere / "shakespeare" / "best.pt").write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(CharrnnError, match="^shakespeare/best.pt is not a readable charrnn .*" + HIDDEN):
        charrnn.info("shakespeare")
    (elsewhere / "notes.txt").write_text("notes\n" * 50, encoding="utf-8")
    with pytest.raises(CharrnnError, match="^shakespeare/best.pt is not a readable .*" + HIDDEN):
        charrnn.train(elsewhere / "notes.txt", init_from="shakespeare", max_steps=1)
    (elsewhere / "shakespeare" / "best.pt").unlink()
    with pytest.raises(CharrnnError, match="^shakespeare is a directory without a last.pt; give a checkpoint "
                                           "file or a run directory that holds one$"):
        charrnn.train(elsewhere / "notes.txt", resume="shakespeare")  # the shipped model is not resumable
    result = run_cli("sample", "shakespeare", "--length", "5")
    assert result.exit_code == 1 and result.output.count("\n") == 1
    assert "hides charrnn's own model" in result.output
    (elsewhere / "shakespeare").rmdir()
    os.symlink(elsewhere / "gone.pt", elsewhere / "shakespeare")
    with pytest.raises(CharrnnError, match="a link to .*gone.pt, which leads to no file" + HIDDEN):
        charrnn.compare(["shakespeare"])
    result = run_cli("info", "shakespeare")
    assert result.exit_code == 1 and "is a link to" in result.stderr and "gone.pt" in result.stderr
    with pytest.raises(CharrnnError, match="which leads to no file$"):
        charrnn.load(elsewhere / "shakespeare")  # a path from the root is only what it is
    (elsewhere / "shakespeare").unlink()
    (elsewhere / "kept").mkdir()
    with pytest.raises(CharrnnError, match="^kept is a directory without a best.pt; give a checkpoint file "
                                           "or a run directory that holds one$"):
        charrnn.load("kept")  # as is any other name


def test_every_reader_accepts_the_name_and_its_help_says_what_it_means_and_what_comes_first(elsewhere):
    (elsewhere / "verse.txt").write_text("To be, or not to be, that is the question.\n", encoding="utf-8")
    model = charrnn.load("shakespeare")
    text = model.sample("ROMEO:", length=80, seed=1).texts[0]
    assert text.startswith("ROMEO:") and len(text) == len("ROMEO:") + 80
    assert charrnn.info("shakespeare").checkpoint == SHIPPED
    for args in (["sample", "shakespeare", "--prime", "ROMEO:", "--length", "40", "--seed", "1"],
                 ["info", "shakespeare"],
                 ["eval-perplexity", "shakespeare", "verse.txt"],
                 ["compare", "shakespeare", "--length", "20", "--seed", "1", "--text", "verse.txt"],
                 ["inspect", "shakespeare", "verse.txt", "--surprisal"],
                 ["export", "shakespeare", "--output", str(elsewhere / "page.html")]):
        result = run_cli(*args)
        assert result.exit_code == 0, (args, result.output)
    assert "shakespeare" in (elsewhere / "page.html").read_text(encoding="utf-8")
    sonnet = "Shall I compare thee to a summer's day?\nThou art more lovely and more temperate.\n"
    (elsewhere / "sonnet.txt").write_text(sonnet * 40, encoding="utf-8")  # fine-tuning starts from it
    result = charrnn.train(elsewhere / "sonnet.txt", out_dir=elsewhere / "tuned", init_from="shakespeare",
                           max_steps=2, batch_size=4, seq_len=16, device="cpu")
    payload = load_checkpoint(result.out_dir / "last.pt")
    assert payload["model_config"]["hidden_size"] == load_checkpoint(SHIPPED)["model_config"]["hidden_size"]
    for command in ("sample", "compare", "eval-perplexity", "info", "inspect", "export"):
        text = " ".join(run_cli(command, "--help").output.split())
        assert "shakespeare: the model that comes with charrnn" in text, command
        assert "named shakespeare in the current directory comes first" in text, command
    train_help = " ".join(run_cli("train", "--help").output.split())
    assert "shakespeare names the model that comes with charrnn" in train_help


@pytest.mark.slow
@needs_installed
def test_the_installed_command_samples_the_shipped_model_in_a_bare_directory(elsewhere):
    done = subprocess.run([str(INSTALLED), "sample", "shakespeare", "--prime", "ROMEO:", "--length", "200",
                           "--seed", "1"], capture_output=True, text=True, timeout=60, cwd=elsewhere,
                          env={**os.environ, "CHARRNN_DATA_MIRROR": "http://127.0.0.1:9/offline"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ROMEO:") and len(done.stdout.strip()) > 150
    assert not list(elsewhere.iterdir())  # nothing downloaded, nothing written


@pytest.fixture
def package_copy(tmp_path, monkeypatch) -> Path:
    """The shipped models' folder, copied: a test of the guards never risks the real model."""
    folder = tmp_path / "package" / "weights"
    folder.mkdir(parents=True)
    shutil.copytree(SHIPPED, folder / SHIPPED.name)
    monkeypatch.setattr(pretrained, "SHIPPED_FOLDER", folder)
    monkeypatch.chdir(tmp_path)
    return folder / SHIPPED.name


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its path there: what a guard must leave as it was."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.mark.parametrize("reads", ["shakespeare", "{own}"])
@pytest.mark.parametrize("command", [
    ["export", "{reads}", "--output", "{file}"],
    ["export", "{reads}", "--output", "{link}"],
    ["export", "{reads}", "--format", "safetensors", "--output", "{folder}/other"],
    ["export", "{reads}", "--format", "safetensors", "--output", "{model}"],
    ["sample", "{reads}", "--length", "5", "--output", "{file}"],
    ["sample", "{reads}", "--length", "5", "--output", "{folder}/notes.txt"],
    ["compare", "{reads}", "--length", "5", "--text", "verse.txt", "--markdown", "{file}"],
    ["inspect", "{reads}", "verse.txt", "--surprisal", "--html", "{file}"],
])
def test_no_output_may_replace_the_shipped_model_whatever_is_read(package_copy, tiny_checkpoint, command,
                                                                  reads):
    (package_copy.parent.parent.parent / "verse.txt").write_text("To be, or not to be.\n", encoding="utf-8")
    weights = package_copy / "model.safetensors"
    link = package_copy.parent.parent.parent / "link.pt"
    link.symlink_to(weights)
    before = contents(package_copy.parent)
    args = [part.format(reads=reads, file=weights, link=link, folder=package_copy.parent, model=package_copy)
            .format(own=tiny_checkpoint) for part in command]
    result = run_cli(*args)
    assert result.exit_code == 2, result.output
    assert "the model that comes with charrnn, which is never written" in result.stderr, result.output
    assert contents(package_copy.parent) == before


def test_no_plot_run_corpus_cache_or_download_lands_in_the_shipped_models_folder(package_copy, tiny_run,
                                                                                   small_corpus, monkeypatch):
    link = package_copy.parent.parent.parent / "curves.png"
    link.symlink_to(package_copy / "model.safetensors")
    before = contents(package_copy.parent)
    with pytest.raises(CharrnnError, match="never written"):
        charrnn.plot([tiny_run], link)
    for extra in ([], ["--init-from", "shakespeare", "--extend-vocab"]):
        result = run_cli("train", small_corpus, "--max-steps", "2", "--out", package_copy.parent, *extra)
        assert result.exit_code == 2 and "never written" in result.stderr, result.output
    assert contents(package_copy.parent) == before
    # Naming the folder as the cache (CHARRNN_CACHE_DIR) or the data directory (--data-dir, CHARRNN_DATA_DIR)
    # is refused before anything is written there.
    folder = package_copy.parent
    monkeypatch.setenv(CACHE_DIR_ENV, str(folder))
    result = run_cli("train", small_corpus, "--max-steps", "1", "--out", "run")
    assert result.exit_code == 1 and f"{CACHE_DIR_ENV} {folder} is in the folder" in result.stderr
    monkeypatch.delenv(CACHE_DIR_ENV)
    result = run_cli("data", "get", "tinyshakespeare", "--data-dir", folder)
    assert result.exit_code == 2 and f"--data-dir {folder} is in the folder" in result.stderr
    monkeypatch.setenv(DATA_DIR_ENV, str(package_copy.parent / "data"))
    result = run_cli("data", "get", "tinyshakespeare")
    assert result.exit_code == 1 and f"{DATA_DIR_ENV} {package_copy.parent / 'data'}" in result.stderr
    assert sorted(package_copy.parent.iterdir()) == [package_copy]
    assert sorted(path.name for path in package_copy.iterdir()) == sorted(FOLDER_FILES)


@pytest.fixture
def data_dir(elsewhere, monkeypatch) -> Path:
    monkeypatch.setenv(DATA_DIR_ENV, str(elsewhere / "data"))
    return elsewhere / "data"


def test_its_own_split_is_read_from_the_data_directory_whose_copy_no_output_replaces_and_it_never_resumes(
        data_dir):
    result = run_cli("train", "--resume", "shakespeare", "--max-steps", "2")
    assert result.exit_code == 1
    assert result.stderr.strip().endswith("cannot be resumed; fine-tune it with --init-from shakespeare")
    missing = run_cli("eval-perplexity", "shakespeare")
    assert missing.exit_code == 1
    assert "`charrnn data get tinyshakespeare` fetches it" in missing.stderr and "data" in missing.stderr
    assert "missing" in charrnn.info("shakespeare").facts["corpus"]["status"]
    copy = data_dir / "tinyshakespeare" / "input.txt"
    copy.parent.mkdir(parents=True)
    copy.write_text("First Citizen:\n", encoding="utf-8")
    result = run_cli("compare", "shakespeare", "--length", "5", "--markdown", copy)
    assert result.exit_code == 2 and "writing it would destroy what is read" in result.stderr
    assert copy.read_text(encoding="utf-8") == "First Citizen:\n"


@pytest.mark.slow
def test_with_the_dataset_fetched_it_scores_its_own_split_as_recorded(data_mirror, data_dir):
    fetch(DEFAULT_DATASET, data_dir)
    result = run_cli("eval-perplexity", "shakespeare", "--json")
    assert result.exit_code == 0, result.output
    scored, best = json.loads(result.stdout), load_checkpoint(SHIPPED)["best"]
    assert abs(scored["nats_per_char"] - best["nats_per_char"]) < 1e-4 and scored["chars"] == best["chars"]
    assert charrnn.info("shakespeare").facts["corpus"]["status"] == "present, unchanged"


@pytest.mark.slow
def test_the_wheel_holds_the_model_folder_and_no_pickle_within_its_budget(tmp_path):
    """Built from a copy of the package (a build writes beside its sources), as pip builds it."""
    root = Path(charrnn.__file__).parents[1]
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, tmp_path / name)
    shutil.copytree(root / "charrnn", tmp_path / "charrnn", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(tmp_path / "dist"), str(tmp_path)], check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert wheel.stat().st_size < 2_500_000
    assert {f"charrnn/models/weights/shakespeare/{name}" for name in FOLDER_FILES} <= set(names)
    assert not [name for name in names if name.endswith((".pt", ".pth", ".pkl"))]
