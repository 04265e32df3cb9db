"""A failure injected at every file-system mutation of each command that writes (see faults.py).

Each scenario runs once undisturbed, recording its mutations and results, then once per k from the same
starting files with the k-th mutation failing (ENOSPC; EIO every third), after which: 1. every earlier file
is byte-identical, or an output asked for holding the undisturbed result (for training files whose bytes
depend on timing, a valid newer version); 2. nothing under a final name is partial (checkpoints load, logs
parse); 3. a training run resumes from its newest state to exactly the undisturbed weights; 4. the command
failed in one line without a traceback (or, the failure harmless, succeeded). Some points are also hit with
SIGKILL in a real process. ``make test-fast`` tries every FAST_STRIDE-th point; ``make test`` all of them."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import mirror_url
from faults import Mutations, snapshot

from charrnn.data.datasets import MIRROR_ENV
from charrnn.training.checkpoint import load_checkpoint
from charrnn.training.rundir import resume_checkpoint

from helpers import assert_one_line_error, read_jsonl, run_cli

# On the CPU, where training is bit-for-bit repeatable: a resumed run must end with the reference's weights.
CPU = ["--device", "cpu"]
TINY = ["--hidden", "16", "--layers", "1", "--embed", "8", "--seq-len", "16", "--batch-size", "4", "--quiet",
        *CPU]
TRAIN = ("--epochs", "2", "--save-epochs", "1", "--eval-every", "10")  # two epochs, a checkpoint after each
TEXT = "ROMEO: Café naïve 語 🙂, a line of the tiny play.\nJULIET: and another one.\n" * 14
FAST_STRIDE = 30  # make test-fast tries every FAST_STRIDE-th injection point


@dataclass(frozen=True)
class Scenario:
    name: str
    setup: Callable[[Path], None]  # makes the starting files under the root (not injected)
    command: Callable[[Path], list[str]]  # the charrnn arguments, paths under the root
    outputs: tuple[str, ...]  # files (relative to the root) the command is asked to write
    run_dir: str | None = None  # a training run's directory, for the resume check
    resume: Callable[[Path], list[str]] | None = None  # how to finish its run after a failure (see finish)
    exact_bytes: bool = True  # the outputs' bytes are the same on every undisturbed run
    keeps_replaced: bool = False  # a replaced input must survive under another name (data get --force)
    environment: dict[str, str] = field(default_factory=dict)

    def finish(self, root: Path) -> list[str]:
        """After a failure: ``resume``, else resume from the newest state, or start over if none was saved."""
        if self.resume is not None:
            return self.resume(root)
        if not (root / self.run_dir / "config.json").exists():
            return [*self.command(root), "--overwrite"]
        return ["train", "--resume", str(root / self.run_dir), "--quiet", *CPU]


def write_corpus(root: Path) -> None:
    (root / "corpus.txt").write_text(TEXT, encoding="utf-8")


def train_args(root: Path, out: str = "run", *extra: str) -> list[str]:
    return ["train", str(root / "corpus.txt"), "--out", str(root / out), *TINY, *extra]


def with_a_run(name: str) -> Callable[[Path], None]:
    """A corpus and a run finished at step 10 (``name``/), which later commands read or resume."""
    def make(root: Path) -> None:
        write_corpus(root)
        run_cli(*train_args(root, name, "--max-steps", "10", "--eval-every", "5"))

    return make


def with_a_sampled_run(root: Path) -> None:
    """A finished run with epoch checkpoints and samples for --overwrite to replace, and its config's copy."""
    write_corpus(root)
    run_cli(*train_args(root, "run", "--max-steps", "30", "--save-epochs", "1", "--sample-every", "10",
                        "--eval-every", "10"))
    shutil.copy(root / "run" / "config.json", root / "older-config.json")


def overwrite(root: Path) -> list[str]:
    return [*train_args(root, "run", *TRAIN), "--overwrite"]


def finish_overwrite(root: Path) -> list[str]:
    """After a failure: resume the new run if it began, else overwrite again (whatever the older run left)."""
    config = root / "run" / "config.json"
    if config.exists() and config.read_bytes() != (root / "older-config.json").read_bytes():
        return ["train", "--resume", str(root / "run"), "--quiet", *CPU]
    return overwrite(root)


def fine_tune(root: Path) -> list[str]:
    return ["train", str(root / "corpus.txt"), "--init-from", str(root / "base" / "best.pt"), "--out",
            str(root / "tuned"), "--max-steps", "12", "--eval-every", "4", "--quiet", *CPU]


def resume_to_20(root: Path) -> list[str]:
    return ["train", "--resume", str(root / "run"), "--max-steps", "20", "--eval-every", "5", "--quiet", *CPU]


def with_old_file(name: str) -> Callable[[Path], None]:
    def make(root: Path) -> None:
        with_a_run("base")(root)
        (root / name).write_text("the user's earlier file\n")

    return make


def with_an_edited_copy(root: Path) -> None:
    (root / "data" / "tinyshakespeare").mkdir(parents=True)
    (root / "data" / "tinyshakespeare" / "input.txt").write_text("my own edit of the plays\n")


SCENARIOS = [
    Scenario("train", write_corpus, lambda root: train_args(root, "run", *TRAIN), outputs=("run",),
             run_dir="run"),
    Scenario("resume", with_a_run("run"), resume_to_20, outputs=("run",), run_dir="run", resume=resume_to_20),
    Scenario("train --overwrite", with_a_sampled_run, overwrite, outputs=("run",), run_dir="run",
             resume=finish_overwrite),
    Scenario("fine-tune", with_a_run("base"), fine_tune, outputs=("tuned",), run_dir="tuned"),
    # A budget's run, cut short by a step limit: the same writes, in a second rather than five.
    Scenario("time budget", write_corpus,
             lambda root: train_args(root, "run", "--time-budget", "5", "--max-steps", "30"),
             outputs=("run",), exact_bytes=False),
    Scenario("sample --output", with_old_file("out.txt"),
             lambda root: ["sample", str(root / "base" / "best.pt"), "--length", "40", "--seed", "1",
                           "--output", str(root / "out.txt")], outputs=("out.txt",)),
    Scenario("compare --markdown", with_old_file("report.md"),
             lambda root: ["compare", str(root / "base" / "best.pt"), str(root / "base" / "last.pt"),
                           "--length", "30", "--markdown", str(root / "report.md")], outputs=("report.md",)),
    Scenario("inspect --html", with_old_file("unit.html"),
             lambda root: ["inspect", str(root / "base" / "best.pt"), str(root / "corpus.txt"), "--unit", "3",
                           "--html", str(root / "unit.html")], outputs=("unit.html",)),
    Scenario("plot", with_old_file("curves.svg"),
             lambda root: ["plot", str(root / "base"), "--output", str(root / "curves.svg")],
             outputs=("curves.svg",), exact_bytes=False),
    Scenario("data get --force", with_an_edited_copy,
             lambda root: ["data", "get", "--data-dir", str(root / "data"), "--force"],
             outputs=("data/tinyshakespeare/input.txt",), keeps_replaced=True,
             environment={MIRROR_ENV: "MIRROR"}),
]


def check_valid(path: Path) -> None:
    """Invariant 2: a file under a final name is whole."""
    if path.suffix == ".pt":
        load_checkpoint(path)
    elif path.suffix == ".jsonl":
        read_jsonl(path)
    elif path.suffix == ".json":
        json.loads(path.read_text(encoding="utf-8"))
    elif path.suffix == ".svg":
        assert path.read_text(encoding="utf-8").rstrip().endswith("</svg>")


def inside_outputs(relative: str, scenario: Scenario) -> bool:
    return any(relative == output or relative.startswith(f"{output}/") for output in scenario.outputs)


@dataclass
class Reference:
    mutations: list[str]
    files: dict[str, bytes]
    weights: dict[str, torch.Tensor] | None  # a training run's final weights
    step: int | None  # and its final step


def prepare(scenario: Scenario, root: Path, template: Path | None = None) -> dict[str, str]:
    """The starting files at ``root``; with ``template``, set up once and copied to the same path (they hold
    absolute paths) for every later try."""
    if root.exists():
        shutil.rmtree(root)
    if template is not None and template.exists():
        shutil.copytree(template, root, symlinks=True)
    else:
        root.mkdir(parents=True)
        scenario.setup(root)
        if template is not None:
            shutil.copytree(root, template, symlinks=True)
    return {key: mirror_url() if value == "MIRROR" else value for key, value in scenario.environment.items()}


_references: dict[str, Reference] = {}


def reference(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> Reference:
    if scenario.name not in _references:
        root = tmp_path_factory.mktemp("reference")
        environment = prepare(scenario, root / "r")
        with Mutations(root / "r") as recorded:
            result = run_cli(*scenario.command(root / "r"), env=environment)
        assert result.exit_code == 0, result.output
        payload = load_checkpoint(root / "r" / scenario.run_dir / "last.pt") if scenario.run_dir else {}
        _references[scenario.name] = Reference(recorded.log, snapshot(root / "r"), payload.get("model_state"),
                                               payload.get("step"))
    return _references[scenario.name]


def check_after_failure(scenario: Scenario, root: Path, before: dict[str, bytes], result, ref: Reference,
                        environment: dict[str, str]) -> None:
    # 4. one line, no traceback (or a harmless failure and success)
    assert "Traceback" not in result.output, result.output
    if result.exit_code != 0:  # notes may come first; the failure is the last line, and the only error
        assert_one_line_error(result)
    after = snapshot(root)
    # 1. what existed is untouched, or replaced whole by what the command was asked to write
    for relative, content in before.items():
        if after.get(relative) == content:
            continue
        assert inside_outputs(relative, scenario), f"{relative} changed"
        if scenario.keeps_replaced:
            assert content in after.values(), f"the earlier {relative} is gone"
    # 2. nothing under a final name is partial
    for relative, content in after.items():
        if (not inside_outputs(relative, scenario) or Path(relative).name.startswith(".charrnn-")
                or content == before.get(relative)):
            continue
        if scenario.exact_bytes and relative in ref.files and scenario.run_dir is None:
            assert content in (ref.files[relative], before.get(relative)), f"{relative} is partial"
        check_valid(root / relative)
    if scenario.run_dir is not None and (root / scenario.run_dir / "config.json").exists():
        run_id = json.loads((root / scenario.run_dir / "config.json").read_text(encoding="utf-8"))["run_id"]
        for path in (root / scenario.run_dir).glob("*.pt"):
            assert load_checkpoint(path)["run_id"] == run_id, f"{path.name} is another run's"
    # 3. the run resumes and ends where the undisturbed run ended
    if scenario.run_dir is not None:
        run_dir = root / scenario.run_dir
        newest = resume_checkpoint(run_dir) if (run_dir / "config.json").exists() else None
        if newest is None or load_checkpoint(newest)["step"] != ref.step:  # else the training was done
            finished = run_cli(*scenario.finish(root), env=environment)
            assert finished.exit_code == 0, finished.output
            newest = resume_checkpoint(run_dir)
        weights = load_checkpoint(newest)["model_state"]
        assert weights.keys() == ref.weights.keys()
        for key in weights:
            assert torch.equal(weights[key], ref.weights[key]), f"{key} differs after resuming"


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
@pytest.mark.parametrize("every", [pytest.param(FAST_STRIDE, id="sampled"),
                                   pytest.param(1, id="every-point", marks=pytest.mark.slow)])
def test_a_failure_at_any_write_loses_nothing(scenario: Scenario, every: int, tmp_path_factory, monkeypatch):
    if scenario.environment and mirror_url() is None:
        pytest.skip("no tiny Shakespeare mirror (set CHARRNN_DATA_MIRROR)")
    ref = reference(scenario, tmp_path_factory)
    assert ref.mutations, "the scenario wrote nothing"
    base = tmp_path_factory.mktemp("fault")
    for k in range(1, len(ref.mutations) + 1, every):
        root = base / "r"
        environment = prepare(scenario, root, base / "template")
        before = snapshot(root)
        error = errno.EIO if k % 3 == 0 else errno.ENOSPC
        with Mutations(root, fail_at=k, error=error):
            result = run_cli(*scenario.command(root), env=environment)
        try:
            check_after_failure(scenario, root, before, result, ref, environment)
        except AssertionError as exc:
            raise AssertionError(f"failing mutation {k} of {len(ref.mutations)} ({ref.mutations[k - 1]}): "
                                 f"{exc}") from None
    shutil.rmtree(base)


KILLED = SimpleNamespace(output="", stderr="Error: killed", exception=None, exit_code=1)  # as a run's result
KILL_PROGRAM = """
import sys
sys.path.insert(0, {tests!r})
from faults import Mutations
from charrnn.cli.main import main
Mutations.__enter__(Mutations({root!r}, fail_at={k}, kill=True))
sys.argv = ["charrnn", *{arguments!r}]
main()
"""


@pytest.mark.slow
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.run_dir is not None], ids=lambda s: s.name)
def test_sigkill_at_sampled_writes_loses_nothing(scenario: Scenario, tmp_path_factory):
    ref = reference(scenario, tmp_path_factory)
    count = len(ref.mutations)
    base = tmp_path_factory.mktemp("kill")
    for k in sorted({1, count // 4, count // 2, 3 * count // 4, count}):
        root = base / "r"
        environment = prepare(scenario, root, base / "template")
        before = snapshot(root)
        program = KILL_PROGRAM.format(tests=str(Path(__file__).parent), root=str(root), k=k,
                                      arguments=scenario.command(root))
        # One thread: on a 2-core AMD EPYC a fresh two-thread process and this warm one computed the same
        # fine-tuning steps with different last bits, which is not what this test is about.
        killed = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                                env={**os.environ, **environment, "OMP_NUM_THREADS": "1"})
        assert killed.returncode == -9, (k, killed.stderr[-2000:])
        try:
            check_after_failure(scenario, root, before, KILLED, ref, environment)
        except AssertionError as exc:
            raise AssertionError(f"SIGKILL at mutation {k} of {count} ({ref.mutations[k - 1]}): "
                                 f"{exc}") from None
