"""The run lock: one holder at a time, released by the kernel whatever happens to the holder."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from charrnn.errors import CharrnnError
from charrnn.training.runlock import LOCK_NAME, RunLock


def _contend(directory: str, start: float, log: str) -> None:
    while time.time() < start:
        time.sleep(0.001)
    try:
        with RunLock(Path(directory)):
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
    with RunLock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().strip().isdigit()
        with pytest.raises(CharrnnError, match="holds its lock"):
            RunLock(tmp_path).__enter__()
    assert not (tmp_path / LOCK_NAME).exists()
    with RunLock(tmp_path):
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
        with RunLock(run):
            pass
    assert mine.read_bytes() == before
