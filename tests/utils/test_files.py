"""Writes that respect what is at the destination: links, devices, FIFOs, modes, leftovers."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from charrnn.errors import CharrnnError
from charrnn.utils import files
from charrnn.utils.files import (
    TEMPORARY_PREFIX,
    atomic_write,
    atomic_write_text,
    current_umask,
    model_folder_holding,
    opened_in_folder,
    parse_json,
    read_json_object,
    read_log,
    remove_stale_temporaries,
    replace_folder,
    settle_folder,
)


def test_atomic_write_leaves_previous_file_on_failure_and_a_loop_or_directory_is_a_clear_error(tmp_path):
    target = tmp_path / "file.txt"
    atomic_write_text(target, "old")

    def explode(handle):
        handle.write(b"partial")
        raise ZeroDivisionError  # whatever the writer raises

    with pytest.raises(ZeroDivisionError):
        atomic_write(target, explode)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.txt"]
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(CharrnnError, match="symbolic links"):
        atomic_write_text(tmp_path / "a", "x")
    with pytest.raises(CharrnnError, match="is a directory"):
        atomic_write_text(tmp_path, "x")


@pytest.mark.parametrize("target", ["real.txt", "absent.txt"])
def test_a_symlinked_destination_writes_its_target_existing_or_not_and_stays_a_link(tmp_path, target):
    (tmp_path / "real.txt").write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / target)
    atomic_write_text(link, "new")
    assert link.is_symlink() and (tmp_path / target).read_text() == "new"


def test_a_hard_link_is_replaced_whole_and_the_other_names_keep_the_old_text(tmp_path, monkeypatch):
    first = tmp_path / "first.txt"
    first.write_text("old")
    second = tmp_path / "second.txt"
    os.link(first, second)
    atomic_write_text(first, "new")
    assert first.read_text() == "new" and second.read_text() == "old"
    # A disk that fills up halfway leaves both names as they were, never a partial file.
    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(CharrnnError, match="No space left on device; any previous first.txt is intact"):
        atomic_write_text(first, "newer")
    assert first.read_text() == "new" and second.read_text() == "old"


def test_a_fifo_or_a_device_is_written_through_not_replaced_and_its_errors_reported(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    atomic_write_text(fifo, "through the pipe")
    reader.join(timeout=10)
    assert received == ["through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    atomic_write_text(Path("/dev/null"), "discarded")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full")
    with pytest.raises(CharrnnError, match="could not write /dev/full: No space left on device"):
        atomic_write_text(Path("/dev/full"), "x" * 100_000)
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_new_files_follow_the_umask_and_replaced_files_keep_their_mode(tmp_path):
    previous = os.umask(0o002)
    try:
        assert current_umask() == 0o002
        fresh = tmp_path / "fresh.txt"
        atomic_write_text(fresh, "x")
        assert stat.S_IMODE(os.stat(fresh).st_mode) == 0o664
        os.umask(0o077)
        existing = tmp_path / "existing.txt"
        existing.write_text("old")
        existing.chmod(0o640)
        atomic_write_text(existing, "new")
        assert stat.S_IMODE(os.stat(existing).st_mode) == 0o640
    finally:
        os.umask(previous)


@pytest.mark.slow
def test_only_charrnn_temporaries_of_dead_processes_are_cleaned(tmp_path):
    users = tmp_path / ".thesis.tmp"
    users.write_text("mine")
    finished = subprocess.Popen(["true"])
    finished.wait()  # a process that really ran and has ended, reaped
    # Above the usual pid_max; and this process's own, which a run that is only starting never needs.
    dead = [tmp_path / f"{TEMPORARY_PREFIX}{pid}-best.pt.abc.tmp"
            for pid in (finished.pid, 2**22 + 12345, os.getpid())]
    alive = [tmp_path / f"{TEMPORARY_PREFIX}1-best.pt.abc.tmp"]
    for path in dead + alive:
        path.write_text("")
    remove_stale_temporaries(tmp_path)
    assert users.exists() and all(path.exists() for path in alive)
    assert not any(path.exists() for path in dead)


def _ours(folder: Path) -> list[str]:
    """Nothing that must stay in a folder of ours (it holds "mine"); all of another."""
    return [] if (folder / "mine").exists() else sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("swap", ["exchange", "two renames"])
def test_a_folder_is_replaced_whole_or_left_as_it_was(tmp_path, monkeypatch, swap):
    target = tmp_path / "model"
    if swap == "two renames":  # a system that cannot swap two names at once
        monkeypatch.setattr(files, "_exchange", lambda first, second: False)
    replace_folder(target, {"a": b"1", "mine": b""}, _ours)
    replace_folder(target, {"b": b"2", "mine": b""}, _ours)
    assert sorted(p.name for p in target.iterdir()) == ["b", "mine"]
    real_replace = os.replace

    def failing(source, destination):  # the new folder cannot take its place; the old one can go back
        if Path(destination) == target and "-old-" not in Path(source).name:
            raise OSError(28, "No space left on device")
        real_replace(source, destination)

    monkeypatch.setattr(os, "replace", failing)
    if swap == "exchange":
        monkeypatch.setattr(files, "_exchange", lambda first, second: failing(first, second))
    with pytest.raises(CharrnnError, match="No space left on device; what was there is intact"):
        replace_folder(target, {"c": b"3", "mine": b""}, _ours)
    monkeypatch.setattr(os, "replace", real_replace)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == {"b": b"2", "mine": b""}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no temporary left


@pytest.mark.parametrize(("make", "fragment"), [
    (lambda path: path.write_text("x"), "is a file"),
    (lambda path: (path.mkdir(), (path / "theirs").write_text("x")), "holds what an export did not write"),
    (lambda path: path.symlink_to(path.parent, target_is_directory=True), "is a symbolic link"),
])
def test_a_folder_not_ours_is_never_replaced(tmp_path, make, fragment):
    target = tmp_path / "model"
    make(target)
    with pytest.raises(CharrnnError, match=fragment):
        replace_folder(target, {"a": b"1"}, _ours)
    assert not list(tmp_path.glob(".charrnn-*"))
    empty = tmp_path / "empty"
    empty.mkdir()
    replace_folder(empty, {"a": b"1"}, _ours)  # an empty folder gives way
    assert (empty / "a").read_bytes() == b"1"


@pytest.mark.parametrize("swap", ["_exchange", "two renames"])
def test_a_stop_signal_during_the_swap_waits_until_the_new_folder_stands(tmp_path, monkeypatch, swap):
    target = tmp_path / "model"
    replace_folder(target, {"a": b"1", "mine": b""}, _ours)
    real = getattr(files, swap) if swap == "_exchange" else os.replace

    def interrupted(source, destination):  # Ctrl-C as the new folder takes its place
        signal.raise_signal(signal.SIGINT)
        return real(source, destination)

    if swap == "_exchange":
        monkeypatch.setattr(files, "_exchange", interrupted)
    else:
        monkeypatch.setattr(files, "_exchange", lambda first, second: False)
        monkeypatch.setattr(os, "replace", interrupted)
    # Python's own Ctrl-C handler, even where the tests were started with SIGINT ignored (`make test &`)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            replace_folder(target, {"b": b"2", "mine": b""}, _ours)
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert sorted(p.name for p in target.iterdir()) == ["b", "mine"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # the old folder is gone, not left aside


def test_a_log_reads_row_by_row_naming_the_line_it_cannot_read_and_a_json_object_is_read_or_none(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"a": 1}\n\n{"a": 2}\n')
    assert read_log(log, json.loads) == [{"a": 1}, {"a": 2}]

    def refuse_two(line):
        if json.loads(line)["a"] == 2:
            raise ValueError("is a two")
        return line

    with pytest.raises(CharrnnError, match=r"log.jsonl line 3 is a two; remove that line to read the others"):
        read_log(log, refuse_two)
    log.write_bytes(b'{"a": 1}\n\xff\n')
    with pytest.raises(CharrnnError, match=r"line 2 is not UTF-8 text \(invalid byte at offset 9\)"):
        read_log(log, json.loads)
    log.write_bytes(b'\xef\xbb\xbf{"a": 1}\n')  # a byte-order mark is not part of the first row
    assert read_log(log, json.loads) == [{"a": 1}]
    with pytest.raises(ValueError, match="^holds a number too long to read$"):
        parse_json('{"hidden_size": ' + "9" * 5000 + "}")
    with open(log, "ab") as handle:  # a sparse gigabyte with no line break: refused, never held whole
        handle.truncate(2**30)
    with pytest.raises(CharrnnError, match=r"line 2 is longer than any row charrnn writes \(67,108,864"):
        read_log(log, json.loads)
    with pytest.raises(CharrnnError, match="cannot read .*missing.jsonl: "):
        read_log(tmp_path / "missing.jsonl", json.loads)
    path = tmp_path / "config.json"  # a JSON object is read, or None whatever stands there
    path.write_text('{"run_id": "a"}')
    assert read_json_object(path) == {"run_id": "a"}
    for text in ("[1]", "{", "", '"x"'):
        path.write_text(text)
        assert read_json_object(path) is None
    path.write_bytes('{"run_id": "a"}'.encode("utf-16"))  # UTF-8 only, with or without a byte order mark
    assert read_json_object(path) is None
    path.write_bytes(b'\xef\xbb\xbf{"run_id": "a"}')
    assert read_json_object(path) == {"run_id": "a"}
    path.unlink()
    assert read_json_object(path) is None
    os.mkfifo(path)  # never opened for reading: nothing would ever write it
    assert read_json_object(path) is None


def test_json_nested_past_any_reader_or_too_large_is_refused_before_parsing(tmp_path):
    deep = "[" * 600 + "]" * 600
    with pytest.raises(ValueError, match="nested more than 64 levels deep"):
        parse_json(deep)
    assert parse_json('["' + "[" * 600 + '"]') == ["[" * 600]  # brackets inside a string are text
    log = tmp_path / "log.jsonl"
    log.write_text('{"a": 1}\n{"a": ' + deep + "}\n")
    with pytest.raises(CharrnnError, match=r"log.jsonl line 2 is nested more than 64 levels deep"):
        read_log(log, parse_json)
    path = tmp_path / "config.json"
    path.write_text('{"a": ' + deep + "}")
    assert read_json_object(path) is None
    path.write_text('{"a": 1}')
    os.truncate(path, 2**40)  # a terabyte on paper, a few bytes on disk: never read
    assert read_json_object(path) is None


# A process that dies by SIGKILL at a chosen moment of an export over an earlier folder.
KILLED_EXPORT = """
import os, signal, sys
from pathlib import Path
from charrnn.utils import files
moment, target = sys.argv[1], Path(sys.argv[2])
real = {"fsync": os.fsync, "replace": os.replace, "rmtree": files.shutil.rmtree}
calls = []

def dying(name):
    def call(*args, **kwargs):
        calls.append(name)
        if name == moment and (name != "replace" or calls.count(name) == 2):
            os.kill(os.getpid(), signal.SIGKILL)
        return real[name](*args, **kwargs)
    return call

os.fsync, os.replace, files.shutil.rmtree = dying("fsync"), dying("replace"), dying("rmtree")
if moment == "replace":  # a system that cannot swap two names at once renames twice
    files._exchange = lambda first, second: False
files.replace_folder(target, {"a": b"new", "b": b"new"}, lambda folder: [])
"""
KILL_MOMENTS = {"writing the new folder": ("fsync", b"old"), "between two renames": ("replace", b"old"),
                "removing the earlier folder": ("rmtree", b"new")}


@pytest.mark.slow
@pytest.mark.parametrize("access", ["read", "read through a link", "export"])
@pytest.mark.parametrize("moment", KILL_MOMENTS, ids=list(KILL_MOMENTS))
def test_an_export_killed_at_any_moment_leaves_a_whole_folder_to_the_next_access(tmp_path, moment, access):
    target = tmp_path / "model"
    replace_folder(target, {"a": b"old", "b": b"old"}, lambda folder: [])
    (tmp_path / "link").symlink_to("model")
    call, survivor = KILL_MOMENTS[moment]
    killed = subprocess.run([sys.executable, "-c", KILLED_EXPORT, call, str(target)], capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert list(tmp_path.glob(f"{TEMPORARY_PREFIX}*"))  # what the killed export left
    if access.startswith("read"):
        settle_folder(tmp_path / "link" if access.endswith("link") else target)
    else:
        replace_folder(target, {"a": b"newer", "b": b"newer"}, lambda folder: [])
        survivor = b"newer"
    assert {path.name: path.read_bytes() for path in target.iterdir()} == {"a": survivor, "b": survivor}
    assert sorted(path.name for path in tmp_path.iterdir()) == ["link", "model"]


@pytest.mark.parametrize(("swap_before", "seen"), [("b", b"new"), (None, b"old")])
def test_a_folder_read_while_an_export_replaces_it_is_read_from_one_export(tmp_path, monkeypatch, swap_before,
                                                                          seen):
    target = tmp_path / "model"
    replace_folder(target, {"a": b"old", "b": b"old"}, lambda folder: [])
    real_open, landed = files.open_regular, []

    def export_lands(name, dir_fd=None):  # an export finishes between the reader's opens of two files
        if name == swap_before and not landed:
            replace_folder(target, {"a": b"new", "b": b"new"}, lambda folder: [])
            landed.append(name)
        return real_open(name, dir_fd)

    monkeypatch.setattr(files, "open_regular", export_lands)
    with opened_in_folder(target, ["a", "b"]) as handles:
        replace_folder(target, {"a": b"newer", "b": b"newer"}, lambda folder: [])  # after the opens
        assert {name: handle.read() for name, handle in handles.items()} == {"a": seen, "b": seen}
    with pytest.raises(FileNotFoundError, match=f"{target}/c"):
        with opened_in_folder(target, ["a", "c"]):
            pass


def test_a_place_inside_a_model_folder_is_found_through_links_too(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"format": "charrnn-model"}))
    (tmp_path / "link").symlink_to(model, target_is_directory=True)
    for inside in (model / "cache" / "file", tmp_path / "link" / "file", model / "file"):
        assert model_folder_holding(inside).resolve() == model, inside
    assert model_folder_holding(model) is None  # the folder itself: an export replaces it whole
    (model / "config.json").write_text(json.dumps({"format": "something else"}))
    assert model_folder_holding(model / "file") is None
