"""The manifest: every guard decides from it and the files together, never from one stand-in."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from charrnn.errors import CharrnnError
from charrnn.training.manifest import MANIFEST_NAME, read_manifest, saved_steps

from helpers import plan_run


@pytest.fixture
def run_with_epochs(small_corpus: Path, tmp_path: Path) -> Path:
    """A run with last.pt and best.pt at step 24 and evaluations at 8 and 16 (best.pt may be older)."""
    out = tmp_path / "run"
    plan_run(small_corpus, out, max_steps=24, eval_every=8).run()
    return out


def resume_in_place(checkpoint: Path, **options):
    return plan_run(None, None, resume=checkpoint, **options)


def test_the_manifest_lists_every_saved_state(run_with_epochs):
    manifest = read_manifest(run_with_epochs)
    assert set(manifest.states) == {"last.pt", "best.pt"}
    assert manifest.states["last.pt"].step == 24
    assert saved_steps(run_with_epochs, manifest.run_id).newest.step == 24


@pytest.fixture
def run_with_an_older_state(small_corpus: Path, tmp_path: Path) -> Path:
    """A run at step 24 whose best.pt has been replaced by the same run's state at step 8."""
    out = tmp_path / "older"
    plan_run(small_corpus, out, max_steps=8, eval_every=8).run()
    shutil.copy(out / "last.pt", tmp_path / "step8.pt")
    resume_in_place(out / "last.pt", max_steps=24).run()
    shutil.copy(tmp_path / "step8.pt", out / "best.pt")
    return out


@pytest.mark.parametrize("damage", ["delete", "garbage", "truncate"])
def test_a_missing_or_damaged_last_pt_never_means_nothing_newer(run_with_an_older_state, damage):
    last = run_with_an_older_state / "last.pt"
    if damage == "delete":
        last.unlink()
    elif damage == "garbage":
        last.write_bytes(b"not a checkpoint")
    else:
        os.truncate(last, last.stat().st_size // 2)
    state = "is missing" if damage == "delete" else "cannot be read"
    with pytest.raises(CharrnnError, match=rf"last.pt {state}: the run's manifest records it at step 24, "
                                           rf"and resuming in .* from best.pt \(step 8\) would go back over "
                                           rf"that work; put it back, or branch from it") as refused:
        resume_in_place(run_with_an_older_state / "best.pt", max_steps=30)
    advice = str(refused.value).split("put it back, or ")[1]  # a step that works, naming its checkpoint
    branch = run_with_an_older_state / "best.pt"
    assert advice.startswith(f"branch from it with resume {branch} out_dir NEW_DIR")


def test_without_the_manifest_an_unreadable_last_pt_is_refused(run_with_an_older_state):
    (run_with_an_older_state / MANIFEST_NAME).unlink()
    (run_with_an_older_state / "last.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CharrnnError, match="cannot tell whether .*last.pt holds newer results"):
        resume_in_place(run_with_an_older_state / "best.pt", max_steps=30)


def test_the_newest_state_resumes_in_place(run_with_an_older_state):
    assert resume_in_place(run_with_an_older_state / "last.pt", max_steps=30).run().steps == 30


def test_an_unreadable_checkpoint_the_manifest_does_not_vouch_for_is_refused(run_with_epochs):
    (run_with_epochs / "epoch0003-val1.000.pt").write_bytes(b"\x00" * 10)
    with pytest.raises(CharrnnError, match="cannot tell whether .*epoch0003.* holds newer results"):
        resume_in_place(run_with_epochs / "last.pt", max_steps=30)


def test_a_state_saved_just_before_a_crash_counts_by_its_own_step(run_with_epochs, tmp_path):
    # The crash came after last.pt (step 24) was renamed into place and before the manifest said so.
    run = run_with_epochs
    shutil.copy(run / "last.pt", tmp_path / "step24.pt")
    manifest = json.loads((run / MANIFEST_NAME).read_text())
    del manifest["states"]["last.pt"]
    manifest["states"]["best.pt"]["step"] = 16
    (run / MANIFEST_NAME).write_text(json.dumps(manifest))
    assert saved_steps(run, manifest["run_id"]).newest.step == 24


def test_a_damaged_manifest_refuses_resuming_in_place_and_says_how_to_branch(run_with_epochs):
    (run_with_epochs / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(CharrnnError, match="manifest .* is damaged.*NEW_DIR"):
        resume_in_place(run_with_epochs / "last.pt", max_steps=30)


def test_a_run_from_before_manifests_still_resumes_and_gains_one(run_with_epochs):
    (run_with_epochs / MANIFEST_NAME).unlink()
    result = resume_in_place(run_with_epochs / "last.pt", max_steps=32).run()
    assert result.steps == 32
    assert read_manifest(run_with_epochs).states["last.pt"].step == 32


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
    manifest = json.loads((run_with_epochs / MANIFEST_NAME).read_text())
    del manifest["states"]["best.pt"]
    (run_with_epochs / MANIFEST_NAME).write_text(json.dumps(manifest))
    resume_in_place(run_with_epochs / "last.pt", max_steps=32).run()
    assert precious.read_bytes() == kept and hard.read_text() == mine
    assert not (run_with_epochs / "best.pt").is_symlink()
    assert (run_with_epochs / "metrics.jsonl").stat().st_nlink == 1
