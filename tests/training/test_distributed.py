"""torchrun + DistributedDataParallel on the CPU (gloo): real processes, compared with one process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from charrnn.errors import CharrnnError
from charrnn.training.distributed import join_from_environment

pytestmark = pytest.mark.slow  # real torchrun processes

# Tiny model, a few steps; a constant learning rate so that a run may be resumed with a later step limit.
TRAIN_ARGS = ["--hidden", "32", "--layers", "2", "--embed", "8", "--batch-size", "8", "--seq-len", "16",
              "--lr", "1e-2", "-o", "warmup_steps", "0", "-o", "min_lr_ratio", "1", "--eval-every", "3",
              "-o", "save_every", "3", "--device", "cpu", "--precision", "fp32"]
# float32 on purpose: with bf16 autocast the two layouts round differently, and the test compares them.


def charrnn_train(processes: int, *args, cwd: Path) -> subprocess.CompletedProcess:
    if processes == 1:
        launcher = [sys.executable, "-m", "charrnn"]
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                    f"--nproc_per_node={processes}", "-m", "charrnn"]
    return subprocess.run([*launcher, "train", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def max_difference(a: Path, b: Path) -> float:
    left, right = (torch.load(checkpoint, weights_only=True)["model_state"] for checkpoint in (a, b))
    assert left.keys() == right.keys()
    return max(float((left[k] - right[k]).abs().max()) for k in left)


def test_two_processes_take_the_same_steps_as_one(small_corpus: Path, tmp_path: Path):
    single = charrnn_train(1, small_corpus, "--out", "one", "--max-steps", "6", *TRAIN_ARGS, cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    double = charrnn_train(2, small_corpus, "--out", "two", "--max-steps", "6", *TRAIN_ARGS, cwd=tmp_path)
    assert double.returncode == 0, double.stderr
    assert max_difference(tmp_path / "one" / "last.pt", tmp_path / "two" / "last.pt") <= 1e-4
    # Rank 0 alone logs and reports: one metrics line per evaluation, one summary table.
    assert len((tmp_path / "two" / "metrics.jsonl").read_text().splitlines()) == 2
    assert double.stdout.count("training finished") == 1
    payload = torch.load(tmp_path / "two" / "last.pt", weights_only=True)
    assert payload["carried_state"][0].shape == (2, 8, 32)  # every stream's state, not rank 0's half


def test_a_two_process_run_resumes_in_one_process(small_corpus: Path, tmp_path: Path):
    straight = charrnn_train(1, small_corpus, "--out", "straight", "--max-steps", "6", *TRAIN_ARGS,
                             cwd=tmp_path)
    assert straight.returncode == 0, straight.stderr
    first = charrnn_train(2, small_corpus, "--out", "split", "--max-steps", "3", *TRAIN_ARGS, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = charrnn_train(1, "--resume", tmp_path / "split" / "last.pt", "--max-steps", "6", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert max_difference(tmp_path / "straight" / "last.pt", tmp_path / "split" / "last.pt") <= 1e-4


def test_a_batch_that_does_not_split_over_the_processes_is_refused(small_corpus: Path, tmp_path: Path):
    result = charrnn_train(2, small_corpus, "--out", "odd", "--max-steps", "2",
                           *TRAIN_ARGS[:8], "--batch-size", "7", "--device", "cpu", cwd=tmp_path)
    assert result.returncode != 0
    assert "Error: --batch-size 7 does not split evenly over 2 processes" in result.stderr


@pytest.mark.parametrize(("args", "code", "stream", "expected"), [
    (["--version"], 0, "stdout", "charrnn, version"),
    (["sample", "missing.pt"], 1, "stderr", "Error:"),
])
def test_a_torchrun_worker_ends_with_its_exit_code_and_flushed_output(tmp_path: Path, args, code, stream,
                                                                        expected):
    # Under torchrun (WORLD_SIZE > 1) the process ends without the interpreter's shutdown,
    # where gloo's threads can abort it; its output and exit code must survive that.
    env = {**os.environ, "WORLD_SIZE": "2"}
    result = subprocess.run([sys.executable, "-m", "charrnn", *args], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == code, result.stderr
    assert expected in getattr(result, stream)


def test_a_local_rank_without_a_gpu_is_one_clear_error(monkeypatch):
    """The CUDA branch of joining a torchrun group, on a CPU: more processes than GPUs."""
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29599"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(CharrnnError, match="local rank 1 has no GPU \\(1 visible\\)"):
        join_from_environment("cuda")
