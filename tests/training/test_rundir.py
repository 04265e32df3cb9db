"""The run directory: runs that survive interrupts, kills and numerical trouble; one writer at a time;
the newest state told by the checkpoints' own headers; outputs never written over what is read."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import charrnn
from charrnn.errors import CharrnnError, OptionConflict, TrainingInterrupted
from charrnn.training.checkpoint import load_checkpoint
from charrnn.training.observer import TrainObserver
from charrnn.training.rundir import (
    LOCK_NAME,
    check_out_dir,
    refuse_writing_over_reads,
    resume_checkpoint,
    run_lock,
    saved_steps,
)
from charrnn.utils.files import TEMPORARY_PREFIX
from charrnn.utils.interrupt import GracefulStop

from helpers import INSTALLED, needs_installed, plan_run, read_jsonl, run_cli, run_installed


class StopAt(GracefulStop):
    """A GracefulStop, never entered (no handlers), that 'receives' SIGINT after a given step."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step


class SignalAfter(TrainObserver):
    def __init__(self, stop: StopAt):
        self.stop = stop

    def on_step(self, report) -> None:
        if report.step == self.stop.step:
            self.stop.signal_name = "SIGINT"


def tiny_plan(corpus: Path, out: Path, **options):
    return plan_run(corpus, out, **{"num_layers": 2, "hidden_size": 24, "warmup_steps": 3, "eval_every": 6,
                                    "save_every": 1000, **options})


def test_interrupt_then_resume_equals_one_run(small_corpus, tmp_path):
    """The decaying schedule, dropout and every RNG carry across an interrupt and a resume."""
    plan = tiny_plan(small_corpus, tmp_path / "straight", max_steps=20, dropout=0.3)
    plan.run()

    plan = tiny_plan(small_corpus, tmp_path / "halves", max_steps=20, dropout=0.3)
    stop = StopAt(9)
    with pytest.raises(TrainingInterrupted) as info:
        plan.run(SignalAfter(stop), stop=stop)
    # The request arrives while step 10 runs (after step 9 was reported); step 10 completes.
    assert info.value.step == 10 and info.value.checkpoint == tmp_path / "halves" / "last.pt"
    payload = load_checkpoint(info.value.checkpoint)
    assert payload["step"] == 10
    plan = plan_run(None, None, resume=info.value.checkpoint)
    assert plan.resume.changes == []
    plan.run()

    straight = torch.load(tmp_path / "straight" / "last.pt", weights_only=True)["model_state"]
    resumed = torch.load(tmp_path / "halves" / "last.pt", weights_only=True)["model_state"]
    for name, value in straight.items():
        assert (value - resumed[name]).abs().max() <= 1e-6, name
    logged = [[json.loads(line)["step"] for line in (tmp_path / name / "metrics.jsonl").open()]
              for name in ("straight", "halves")]
    assert logged[0] == logged[1] == [6, 12, 18, 20]


class PoisonWeights(TrainObserver):
    def on_start(self, model, *args) -> None:
        with torch.no_grad():
            model.embedding.weight.fill_(float("nan"))


def test_non_finite_steps_are_skipped_then_training_stops(small_corpus, tmp_path):
    plan = tiny_plan(small_corpus, tmp_path / "run", max_steps=50, max_bad_steps=4)
    with pytest.raises(CharrnnError, match="4 consecutive steps had a non-finite loss.*lower learning_rate"):
        plan.run(PoisonWeights())
    assert not (tmp_path / "run" / "last.pt").exists()  # nothing poisoned was saved
    assert not (tmp_path / "run" / LOCK_NAME).exists()


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.slow
def test_a_held_lock_refuses_a_second_writer_and_a_stale_file_is_taken_over(small_corpus, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    holder = hold_lock(out / LOCK_NAME)
    try:
        plan = tiny_plan(small_corpus, out, max_steps=2)
        with pytest.raises(CharrnnError, match=f"another training \\(PID {holder.pid}\\).*{LOCK_NAME}"):
            plan.run()
    finally:
        holder.kill()
        holder.wait()
    # A lock file naming a live but unrelated process (PID 1 after a container restart) is not held.
    (out / LOCK_NAME).write_text("1\n")
    (out / f"{TEMPORARY_PREFIX}{dead_pid()}-last.pt.leftover.tmp").write_bytes(b"half a checkpoint")
    (out / ".thesis.tmp").write_text("the user's own")
    plan.run()
    assert (out / "last.pt").exists() and not (out / LOCK_NAME).exists()
    assert [p.name for p in out.glob(".*.tmp")] == [".thesis.tmp"]


def hold_lock(path: Path) -> subprocess.Popen:
    """A process that holds ``path``'s flock (and writes its PID there) until killed."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, time\n"
         f"fd = os.open({str(path)!r}, os.O_CREAT | os.O_RDWR)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nos.write(fd, b'%d\\n' % os.getpid())\n"
         "print('locked', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    return holder


def start_training(cwd: Path, corpus: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(INSTALLED), "train", str(corpus), "--layers", "1", "--hidden", "64", "--embed", "8",
         "--batch-size", "4", "--seq-len", "16", "--max-steps", "100000", "-o", "save_every", "1",
         "--eval-every", "50", "--out", "run", *extra],
        cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
@needs_installed
@pytest.mark.parametrize(("signum", "code"),
                         [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signal_saves_and_prints_the_resume_command(small_corpus, tmp_path, signum, code):
    process = start_training(tmp_path, small_corpus)
    wait_for(tmp_path / "run" / "last.pt", process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == code, stderr
    name = signal.Signals(signum).name
    assert f"interrupted by {name} after step" in stderr
    assert "resume with: charrnn train --resume run/last.pt" in stderr
    assert "Traceback" not in stderr
    step = load_checkpoint(tmp_path / "run" / "last.pt")["step"]
    assert step >= 1 and not (tmp_path / "run" / LOCK_NAME).exists()
    resumed = run_installed("train", "--resume", "run/last.pt", "--max-steps", step + 3, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == step + 3


@pytest.mark.slow
@needs_installed
def test_sigkill_at_random_moments_never_leaves_a_broken_checkpoint(small_corpus, tmp_path):
    rng = random.Random(0)
    run = tmp_path / "run"
    for attempt in range(8):
        process = start_training(tmp_path, small_corpus, "--overwrite")
        wait_for(run / LOCK_NAME, process)
        time.sleep(rng.uniform(0.0, 1.5))
        process.kill()
        process.communicate()
        if (run / "last.pt").exists():
            load_checkpoint(run / "last.pt")  # complete and loadable, or this raises
        assert len(list(run.glob(".*.tmp"))) <= 1, attempt  # at most the write that was cut short
    finished = run_installed("train", small_corpus, "--layers", "1", "--hidden", "8", "--batch-size", "4",
                             "--seq-len", "16", "--max-steps", "2", "--out", "run", "--overwrite",
                             cwd=tmp_path)
    assert finished.returncode == 0, finished.stderr  # the dead runs' lock was stale and taken over
    assert not list(run.glob(".*.tmp"))


def test_train_in_a_thread_without_signal_handlers(small_corpus, tmp_path):
    """GracefulStop outside the main thread installs nothing and still works as a context manager."""
    errors = []

    def body():
        try:
            with GracefulStop() as stop:
                plan = tiny_plan(small_corpus, tmp_path / "run", max_steps=2)
                plan.run(stop=stop)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert errors == [] and os.path.exists(tmp_path / "run" / "last.pt")


def test_a_full_disk_is_reported_before_training_and_a_failed_save_keeps_the_previous_checkpoint(
        small_corpus, tmp_path, monkeypatch):
    out = tmp_path / "run"
    tiny_plan(small_corpus, out, max_steps=2).run()
    before = (out / "last.pt").read_bytes()
    usage = shutil.disk_usage(tmp_path)
    with monkeypatch.context() as full:
        full.setattr("charrnn.training.rundir.shutil.disk_usage", lambda path: usage._replace(free=100_000))
        with pytest.raises(CharrnnError, match="MiB free under out_dir"):
            tiny_plan(small_corpus, tmp_path / "full", max_steps=2).run()
    assert not (tmp_path / "full" / "last.pt").exists()
    real_replace = os.replace

    def disk_full_for_last(source, target):
        if str(target).endswith("last.pt"):
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr("charrnn.utils.files.os.replace", disk_full_for_last)
    plan = plan_run(None, None, resume=out / "last.pt", max_steps=4)
    with pytest.raises(CharrnnError, match="could not write .*last.pt: No space left on device; "
                                           "any previous last.pt is intact"):
        plan.run()
    assert (out / "last.pt").read_bytes() == before
    assert not list(out.glob(".*.tmp"))


@pytest.mark.slow
@needs_installed
def test_a_second_ctrl_c_aborts_at_once_and_leaves_a_whole_checkpoint(small_corpus, tmp_path):
    process = start_training(tmp_path, small_corpus)
    wait_for(tmp_path / "run" / "last.pt", process)
    process.send_signal(signal.SIGINT)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "Aborted!" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(("Error: interrupted by SIGINT", "resume with:")), stderr
    load_checkpoint(tmp_path / "run" / "last.pt")
    assert not list((tmp_path / "run").glob(".*.tmp"))


@pytest.mark.slow
def test_overwrite_retires_the_whole_older_run_before_the_new_one_writes(small_corpus, tmp_path):
    """An older run's samples, best.pt and scores never pass for a new run's, even one stopped early."""
    out = tmp_path / "run"
    tiny_plan(small_corpus, out, max_steps=None, epochs=2, save_epochs=[1], sample_every=4,
              sample_length=20).run()
    assert (out / "samples.jsonl").exists() and list(out.glob("epoch*.pt"))
    old_id = json.loads((out / "config.json").read_text())["run_id"]

    tiny_plan(small_corpus, out, overwrite=True, max_steps=8).run()
    assert not (out / "samples.jsonl").exists() and not list(out.glob("epoch*.pt"))
    new_id = json.loads((out / "config.json").read_text())["run_id"]
    assert new_id != old_id
    assert all(load_checkpoint(path)["run_id"] == new_id for path in out.glob("*.pt"))
    assert [row["step"] for row in read_jsonl(out / "metrics.jsonl")] == [6, 8]

    stop = StopAt(1)
    with pytest.raises(TrainingInterrupted):
        tiny_plan(small_corpus, out, overwrite=True, max_steps=20, sample_every=4).run(SignalAfter(stop),
                                                                                        stop=stop)
    third_id = json.loads((out / "config.json").read_text())["run_id"]
    assert sorted(path.name for path in out.iterdir()) == ["config.json", "last.pt", "losses.jsonl"]
    last = load_checkpoint(out / "last.pt")
    assert last["run_id"] == third_id != new_id
    logged = [row["step"] for row in read_jsonl(out / "losses.jsonl")]
    assert logged == list(range(1, last["step"] + 1))  # this run's losses alone
    refused = run_cli("sample", out)  # no best.pt yet: the message names what is there
    assert refused.exit_code == 1 and f"such as {out / 'last.pt'}" in refused.stderr


def test_a_new_run_that_fails_before_writing_leaves_the_older_run_whole(small_corpus, tmp_path):
    out = tmp_path / "run"
    tiny_plan(small_corpus, out, max_steps=6, sample_every=3, sample_length=10).run()
    before = {path.name: path.read_bytes() for path in out.iterdir()}
    with pytest.raises(CharrnnError):
        tiny_plan(tmp_path / "no such corpus.txt", out, overwrite=True, max_steps=6).run()
    assert {path.name: path.read_bytes() for path in out.iterdir()} == before


def test_a_branch_refused_before_it_starts_leaves_no_directory(tiny_run, tmp_path):
    """A branch's directory is made when the run starts, so a refusal after planning leaves none."""
    branch = tmp_path / "branches" / "b"
    with pytest.raises(CharrnnError, match="sample_prime"):
        charrnn.train(resume=tiny_run / "last.pt", out_dir=branch, max_steps=60, sample_every=10,
                      sample_prime="Ω", device="cpu")
    assert not (tmp_path / "branches").exists()


def test_a_run_directory_without_last_pt_is_not_advised_for_resume(small_corpus, tmp_path):
    """--resume needs a last.pt: the refusal advises it only where one is, and then following it works."""
    plan_run(small_corpus, tmp_path / "run", max_steps=2).run()
    with pytest.raises(CharrnnError, match="continue it with resume ") as refused:
        check_out_dir(tmp_path / "run")
    assert str(tmp_path / "run" / "last.pt") in str(refused.value)
    plan_run(None, None, resume=tmp_path / "run" / "last.pt", max_steps=3).run()  # the advice, followed
    for last in (b"", b"not a checkpoint", None):  # empty, foreign, gone: nothing to resume
        (tmp_path / "run" / "last.pt").unlink(missing_ok=True)
        if last is not None:
            (tmp_path / "run" / "last.pt").write_bytes(last)
        with pytest.raises(CharrnnError, match="already holds a training run") as refused:
            check_out_dir(tmp_path / "run")
        assert "continue it" not in str(refused.value) and "pass overwrite" in str(refused.value)


@pytest.mark.parametrize("log", ["metrics.jsonl", "samples.jsonl"])
def test_a_resume_never_drops_a_log_it_cannot_read_whole(small_corpus, tmp_path, log):
    """A bad row is refused before training, in place or branched, files untouched; removed, rows are kept."""
    run = tmp_path / "run"
    plan_run(small_corpus, run, max_steps=6, eval_every=2, sample_every=2, sample_length=8).run()
    damages = {b'{"step": 1, "x": "\xff"}\n': r"line 4 is not UTF-8 text",
               b"{bad\n": r"line 4 is not (an evaluation record|a recorded sample) \(one JSON object\)",
               b'{"step": 1, "note": "mine"}\n': r"line 4 is not .* it lacks epoch"}
    for damage, why in damages.items():
        damaged = (run / log).read_bytes() + damage
        (run / log).write_bytes(damaged)
        before = {path.name: path.read_bytes() for path in run.iterdir() if path.is_file()}
        for out in (None, tmp_path / "branch"):
            with pytest.raises(CharrnnError, match=why):
                charrnn.train(resume=run, out_dir=out, max_steps=8, device="cpu")
            assert {path.name: path.read_bytes() for path in run.iterdir() if path.is_file()} == before
            assert not (tmp_path / "branch").exists()
        (run / log).write_bytes(damaged[:-len(damage)])
    if log == "metrics.jsonl":  # a hand-made row whose step is not a whole number is kept, wherever it is
        first = json.loads((run / log).read_text().splitlines()[0])
        with (run / log).open("a") as rows:
            rows.write(json.dumps({**first, "step": 4.0}) + "\n")
    kept = (run / log).read_text().splitlines()
    charrnn.train(resume=run, max_steps=8, device="cpu")
    assert (run / log).read_text().splitlines()[:len(kept)] == kept


def test_a_branch_starts_only_with_its_own_runs_history(small_corpus, tmp_path):
    """A checkpoint copied into another run's directory branches with no history: that log is not its."""
    for name, seed in (("mine", 1), ("other", 2)):
        plan_run(small_corpus, tmp_path / name, max_steps=4, eval_every=2, seed=seed).run()
    (tmp_path / "other" / "metrics.jsonl").write_bytes((tmp_path / "other" / "metrics.jsonl").read_bytes()
                                                      + b"{damaged\n")
    stray = tmp_path / "other" / "mine.pt"
    stray.write_bytes((tmp_path / "mine" / "last.pt").read_bytes())
    charrnn.train(resume=stray, out_dir=tmp_path / "branch", max_steps=6, eval_every=2, device="cpu")
    assert [row["step"] for row in read_jsonl(tmp_path / "branch" / "metrics.jsonl")] == [6]
    charrnn.train(resume=tmp_path / "mine" / "last.pt", out_dir=tmp_path / "own", max_steps=6, eval_every=2,
                  device="cpu")
    assert [row["step"] for row in read_jsonl(tmp_path / "own" / "metrics.jsonl")] == [2, 4, 6]


def test_a_run_directory_stays_one_whatever_is_copied_into_it(tiny_run, tmp_path):
    """A model folder's weights dropped into a run directory do not make it a model folder."""
    run = shutil.copytree(tiny_run, tmp_path / "run")
    charrnn.export(run, tmp_path / "folder", format="safetensors")
    shutil.copy(tmp_path / "folder" / "model.safetensors", run)
    assert charrnn.load(run).checkpoint == run / "best.pt"
    result = charrnn.train(resume=run, max_steps=45, device="cpu")
    assert result.steps == 45 and result.out_dir == run


def _contend(directory: str, start: float, log: str) -> None:
    while time.time() < start:
        time.sleep(0.001)
    try:
        with run_lock(Path(directory)):
            with open(log, "a") as handle:
                handle.write(f"in {time.monotonic()}\n")
            time.sleep(0.05)
            with open(log, "a") as handle:
                handle.write(f"out {time.monotonic()}\n")
    except CharrnnError:
        pass


@pytest.mark.slow
@pytest.mark.parametrize("stale_file", [False, True])
def test_processes_racing_for_the_lock_never_hold_it_together(tmp_path, stale_file):
    context = multiprocessing.get_context("fork")
    for trial in range(5):
        directory = tmp_path / f"trial{trial}"
        directory.mkdir()
        if stale_file:
            (directory / LOCK_NAME).write_text("")  # empty, as a crash between create and write leaves it
        log = tmp_path / f"log{trial}"
        start = time.time() + 0.3
        workers = [context.Process(target=_contend, args=(str(directory), start, str(log))) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(30)
        events = log.read_text().split("\n")[:-1] if log.exists() else []
        holders = 0
        for event in events:
            holders += 1 if event.startswith("in") else -1
            assert holders <= 1, events
        assert events, "nobody got the lock"


def test_the_lock_is_released_and_removed_on_exit(tmp_path):
    with run_lock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().strip().isdigit()
        with pytest.raises(CharrnnError, match="holds its lock"):
            run_lock(tmp_path).__enter__()
    assert not (tmp_path / LOCK_NAME).exists()
    with run_lock(tmp_path):
        pass


@pytest.mark.parametrize("planted", ["symlink", "hard link", "large file", "small note"])
def test_a_file_of_the_users_at_the_locks_name_is_refused_and_left_untouched(tmp_path, planted):
    mine = tmp_path / "mine.txt"
    mine.write_text("the user's words\n" * (10 if planted == "large file" else 1))
    before = mine.read_bytes()
    run = tmp_path / "run"
    run.mkdir()
    lock = run / LOCK_NAME
    if planted == "symlink":
        lock.symlink_to(mine)
    elif planted == "hard link":
        os.link(mine, lock)
    else:  # a file of the user's under the lock's name, large or small
        mine.rename(lock)
        mine = lock
    with pytest.raises(CharrnnError, match="run lock"):
        with run_lock(run):
            pass
    assert mine.read_bytes() == before


def test_a_file_is_refused_on_what_a_checkpoint_stands_for_and_at_a_run_directorys_names(tiny_run, tmp_path):
    checkpoint = tiny_run / "best.pt"
    corpus = tiny_run.parent / "small.txt"
    last = tiny_run / "last.pt"
    for target, what in ((checkpoint, f"is checkpoint {checkpoint}:"),
                         (last, f"is {last}, in the run directory of checkpoint {checkpoint}:"),
                         (corpus, f"is {corpus}, the corpus checkpoint {checkpoint} was trained on:")):
        with pytest.raises(OptionConflict) as refused:
            refuse_writing_over_reads(target, "output", {"checkpoint": [checkpoint]})
        assert what in str(refused.value) and "writing it would destroy what is read" in str(refused.value)
    os.link(corpus, tmp_path / "linked.txt")  # the same file under another name
    with pytest.raises(OptionConflict, match="linked.txt is .*small.txt, the corpus .* was trained on"):
        refuse_writing_over_reads(tmp_path / "linked.txt", "output", {"checkpoint": [checkpoint]})
    refuse_writing_over_reads(tmp_path / "page.html", "output", {"checkpoint": [checkpoint], "other": None})
    for name in ("notes.pt", "config.json", ".charrnn-x"):
        with pytest.raises(OptionConflict, match="keeps for its own files"):
            refuse_writing_over_reads(tiny_run / name, "output", {})
    refuse_writing_over_reads(tiny_run / "notes.md", "output", {})
    shipped = Path(charrnn.__file__).parent / "models" / "weights"  # nothing is written in the shipped folder
    with pytest.raises(OptionConflict, match="never written; choose another run directory"):
        refuse_writing_over_reads(shipped / "mine", "out_dir", {}, run_directory=True)


def test_a_run_directory_is_refused_where_its_files_are_what_the_run_reads_or_inside_a_directory_corpus(
        small_corpus, tmp_path):
    poems = tmp_path / "poems"
    (poems / "deep").mkdir(parents=True)
    os.link(small_corpus, poems / "deep" / "a.txt")
    run = tmp_path / "run"
    run.mkdir()
    os.link(small_corpus, run / "metrics.jsonl")
    for reads in ({"corpus": small_corpus}, {"corpus": poems}):
        refused = "out_dir .*run would replace .*metrics.jsonl, which is .*corpus .*choose another run"
        with pytest.raises(OptionConflict, match=refused):
            refuse_writing_over_reads(run, "out_dir", reads, run_directory=True)
    refuse_writing_over_reads(tmp_path / "fresh", "out_dir", {"corpus": poems, "init_from": None},
                              run_directory=True)
    for out in (poems, poems / "run"):
        refused = "is inside the corpus directory .*poems: writing there would change what is read"
        with pytest.raises(OptionConflict, match=refused + "; choose another run directory"):
            refuse_writing_over_reads(out, "out_dir", {"corpus": poems}, run_directory=True)
    temporary = run / ".charrnn-999999-best.pt.abc.tmp"  # a name the run clears away when its process is gone
    temporary.write_bytes(small_corpus.read_bytes())
    with pytest.raises(OptionConflict, match="would replace .*abc.tmp, which is corpus"):
        refuse_writing_over_reads(run, "out_dir", {"corpus": temporary}, run_directory=True)


@pytest.fixture
def run_with_epochs(small_corpus: Path, tmp_path: Path) -> Path:
    """A run with last.pt and best.pt at step 24 and evaluations at 8 and 16 (best.pt may be older)."""
    out = tmp_path / "run"
    plan_run(small_corpus, out, max_steps=24, eval_every=8).run()
    return out


def resume_in_place(checkpoint: Path, **options):
    return plan_run(None, None, resume=checkpoint, **options)


def test_the_checkpoints_own_headers_tell_the_newest_state_and_an_unreadable_one_is_refused(run_with_epochs):
    run_id = json.loads((run_with_epochs / "config.json").read_text())["run_id"]
    assert saved_steps(run_with_epochs, run_id)[0] == (24, run_with_epochs / "last.pt")
    assert saved_steps(run_with_epochs, "another run")[0] is None
    assert not (run_with_epochs / "manifest.json").exists()
    (run_with_epochs / "epoch0003-val1.000.pt").write_bytes(b"\x00" * 10)
    with pytest.raises(CharrnnError, match="cannot tell whether .*epoch0003.* holds newer results"):
        resume_in_place(run_with_epochs / "last.pt", max_steps=30)


@pytest.fixture
def run_with_an_older_state(small_corpus: Path, tmp_path: Path) -> Path:
    """A run at step 24 whose best.pt has been replaced by the same run's state at step 8."""
    out = tmp_path / "older"
    plan_run(small_corpus, out, max_steps=8, eval_every=8).run()
    shutil.copy(out / "last.pt", tmp_path / "step8.pt")
    resume_in_place(out / "last.pt", max_steps=24).run()
    shutil.copy(tmp_path / "step8.pt", out / "best.pt")
    return out


def test_resuming_an_older_state_in_place_is_refused_and_says_how_to_branch(run_with_an_older_state):
    with pytest.raises(CharrnnError, match=r"last.pt was saved at step 24; best.pt is at step 8\), which "
                                           r"resuming here would replace") as refused:
        resume_in_place(run_with_an_older_state / "best.pt", max_steps=30)
    branch = run_with_an_older_state / "best.pt"
    assert f"branch from it with resume {branch} out_dir NEW_DIR" in str(refused.value)
    assert resume_in_place(run_with_an_older_state / "last.pt", max_steps=30).run().steps == 30  # the newest


@pytest.mark.parametrize("damage", [lambda last: last.write_bytes(b"not a checkpoint"),
                                    lambda last: os.truncate(last, last.stat().st_size // 2)],
                         ids=["garbage", "truncate"])
def test_a_damaged_checkpoint_never_means_nothing_newer(run_with_an_older_state, damage):
    damage(run_with_an_older_state / "last.pt")
    with pytest.raises(CharrnnError, match="cannot tell whether .*last.pt holds newer results"):
        resume_in_place(run_with_an_older_state / "best.pt", max_steps=30)


def test_an_older_last_pt_copied_over_a_newer_one_is_what_a_resume_continues(run_with_an_older_state):
    shutil.copy(run_with_an_older_state / "best.pt", run_with_an_older_state / "last.pt")  # both at step 8
    assert resume_checkpoint(run_with_an_older_state) == run_with_an_older_state / "last.pt"
    assert resume_in_place(run_with_an_older_state, max_steps=10).run().steps == 10


def test_a_link_planted_at_a_run_file_is_replaced_and_what_it_led_to_is_untouched(run_with_epochs, tmp_path):
    precious = tmp_path / "precious.pt"  # the user's own copy of a checkpoint
    shutil.copy(run_with_epochs / "best.pt", precious)
    kept = precious.read_bytes()
    hard = tmp_path / "hard.jsonl"  # the user's own copy of the log, hard-linked into the run
    (run_with_epochs / "metrics.jsonl").rename(hard)
    mine = hard.read_text()
    (run_with_epochs / "best.pt").unlink()
    (run_with_epochs / "best.pt").symlink_to(precious)
    os.link(hard, run_with_epochs / "metrics.jsonl")
    resume_in_place(run_with_epochs / "last.pt", max_steps=32).run()
    assert precious.read_bytes() == kept and hard.read_text() == mine
    assert not (run_with_epochs / "best.pt").is_symlink()
    assert (run_with_epochs / "metrics.jsonl").stat().st_nlink == 1


def test_a_resume_refuses_a_fifo_at_a_log_it_would_rewrite(small_corpus, tmp_path):
    out = tmp_path / "run"
    tiny_plan(small_corpus, out, max_steps=6).run()
    (out / "metrics.jsonl").unlink()
    os.mkfifo(out / "metrics.jsonl")
    with pytest.raises(CharrnnError, match=r"cannot read .*metrics\.jsonl: not a regular file"):
        plan_run(None, None, resume=out / "last.pt", max_steps=8).run()
    assert (out / "metrics.jsonl").is_fifo()
