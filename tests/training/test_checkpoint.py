import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from charrnn.errors import CharrnnError
from charrnn.training.checkpoint import (
    FORMAT_VERSION,
    checkpoint_in,
    load_checkpoint,
    load_model,
    save_checkpoint,
)


def test_round_trip_gives_identical_logits(tiny_checkpoint, tmp_path):
    loaded = load_model(tiny_checkpoint)
    copy = tmp_path / "copy.pt"
    save_checkpoint(copy, loaded.payload)
    again = load_model(copy)
    idx = loaded.vocab.encode("ROMEO:\nCafé").long().unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(loaded.network(idx)[0], again.network(idx)[0])
    assert again.vocab == loaded.vocab


def test_checkpoint_is_plain_data(tiny_checkpoint):
    payload = torch.load(tiny_checkpoint, weights_only=True)
    assert payload["format_version"] == FORMAT_VERSION
    assert isinstance(payload["vocab"], list) and "🙂" in payload["vocab"]
    assert {"model_config", "train_config", "model_state", "optimizer_state", "step", "epoch",
            "best", "corpus"} <= payload.keys()
    assert all(t.device.type == "cpu" for t in payload["model_state"].values())


def test_missing(tmp_path):
    with pytest.raises(CharrnnError, match="does not exist"):
        load_checkpoint(tmp_path / "none.pt")


def test_a_path_that_is_there_but_no_file_is_not_called_missing(tmp_path):
    os.mkfifo(tmp_path / "pipe.pt")
    for path in (tmp_path / "pipe.pt", Path(os.devnull)):
        with pytest.raises(CharrnnError, match="is not a regular file .*give a checkpoint file or a run "
                                               "directory"):
            load_checkpoint(path)


def test_truncated(tiny_checkpoint, tmp_path):
    cut = tmp_path / "cut.pt"
    cut.write_bytes(tiny_checkpoint.read_bytes()[:2000])
    with pytest.raises(CharrnnError, match="not a readable charrnn checkpoint"):
        load_checkpoint(cut)


@pytest.mark.parametrize("content", [b"just some text\n", b""])
def test_not_a_torch_file(tmp_path, content):
    path = tmp_path / "x.pt"
    path.write_bytes(content)
    with pytest.raises(CharrnnError, match="is not a charrnn checkpoint \\(not a file that torch.save"):
        load_checkpoint(path)


def test_foreign_torch_file(tmp_path):
    path = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, path)
    with pytest.raises(CharrnnError, match="not a charrnn checkpoint"):
        load_checkpoint(path)


def test_unknown_format_version(tiny_checkpoint, tmp_path):
    payload = torch.load(tiny_checkpoint, weights_only=True)
    payload["format_version"] = 99
    path = tmp_path / "future.pt"
    torch.save(payload, path)
    with pytest.raises(CharrnnError, match="format version 99"):
        load_checkpoint(path)


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


def test_the_docs_name_every_checkpoint_field():
    """The format is described in one place for readers (docs/how-it-works.md); this keeps it complete."""
    from dataclasses import fields

    from charrnn.training.checkpoint import Checkpoint

    described = (Path(__file__).parents[2] / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    missing = [spec.name for spec in fields(Checkpoint) if f"`{spec.name}`" not in described]
    assert missing == []


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
