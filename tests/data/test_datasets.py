import json
from pathlib import Path

import pytest

from charrnn.data import datasets
from charrnn.data.datasets import DATASETS, MIRROR_ENV, Dataset, fetch
from charrnn.errors import CharrnnError

EXPECTED = DATASETS["tinyshakespeare"]


def test_download_from_mirror_and_verify(data_mirror, tmp_path: Path):
    fetched = fetch("tinyshakespeare", tmp_path)
    path = tmp_path / "tinyshakespeare" / "input.txt"
    assert fetched == Dataset("tinyshakespeare", path, downloaded=True, chars=EXPECTED.chars, kept=None)
    assert len(path.read_text(encoding="utf-8")) == EXPECTED.chars
    # A verified copy is reused.
    assert fetch("tinyshakespeare", tmp_path) == Dataset("tinyshakespeare", path, False, EXPECTED.chars)


@pytest.mark.parametrize("kind", ["edited copy", "binary", "symlink to the user's file"])
def test_a_different_file_at_the_datasets_path_is_never_replaced(data_mirror, tmp_path: Path, kind):
    path = tmp_path / "tinyshakespeare" / "input.txt"
    path.parent.mkdir()
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"\xff\xfe" if kind == "binary" else b"my own edit of the plays\n")
    if kind.startswith("symlink"):
        path.symlink_to(mine)
    else:
        mine.rename(path)
        mine = path
    before = mine.read_bytes()
    with pytest.raises(CharrnnError, match="is there but is not tinyshakespeare .*never replaced.*--force"):
        fetch("tinyshakespeare", tmp_path)
    assert mine.read_bytes() == before
    # force keeps it under a new name (a symbolic link stays a link to the same file) and downloads.
    fetched = fetch("tinyshakespeare", tmp_path, force=True)
    kept = fetched.kept
    assert fetched.downloaded and kept == path.with_name("input.txt.kept-1")
    assert kept.read_bytes() == before and kept.is_symlink() == kind.startswith("symlink")
    assert len(path.read_text(encoding="utf-8")) == EXPECTED.chars and not path.is_symlink()


def test_an_unreachable_origin_suggests_a_mirror_and_a_failed_forced_download_puts_the_users_file_back(
        tmp_path: Path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, (tmp_path / "nowhere").as_uri())
    with pytest.raises(CharrnnError, match=f"could not download.*{MIRROR_ENV}"):
        fetch("tinyshakespeare", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()
    path = tmp_path / "tinyshakespeare" / "input.txt"
    path.parent.mkdir()
    path.write_text("mine")
    with pytest.raises(CharrnnError, match="could not download"):
        fetch("tinyshakespeare", tmp_path, force=True)
    assert path.read_text() == "mine" and list(path.parent.iterdir()) == [path]


def test_wrong_checksum_is_refused_and_deleted(tmp_path: Path, monkeypatch):
    mirror = tmp_path / "mirror"
    (mirror / "tinyshakespeare").mkdir(parents=True)
    (mirror / "tinyshakespeare" / "input.txt").write_text("First Citizen:\nnot really\n")
    monkeypatch.setenv(MIRROR_ENV, mirror.as_uri())
    cache = tmp_path / "cache"
    with pytest.raises(CharrnnError, match="refused the download.*SHA-256"):
        fetch("tinyshakespeare", cache)
    assert not cache.exists()  # no file and no directory left behind


def test_an_unknown_dataset_or_a_data_directory_or_copy_it_cannot_use_is_a_clear_error(tmp_path: Path,
                                                                                        monkeypatch):
    with pytest.raises(CharrnnError, match="unknown dataset"):
        fetch("nope", tmp_path)
    (tmp_path / "a_file").write_text("")
    with pytest.raises(CharrnnError, match="cannot create .*Not a directory"):
        fetch("tinyshakespeare", tmp_path / "a_file" / "data")
    (tmp_path / "tinyshakespeare" / "input.txt").mkdir(parents=True)
    with pytest.raises(CharrnnError, match="input.txt: it is a directory"):
        fetch("tinyshakespeare", tmp_path)
    target = tmp_path / "tinyshakespeare" / "input.txt"
    target.rmdir()
    target.write_text("x")

    def denied(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(datasets, "file_sha256", denied)
    with pytest.raises(CharrnnError, match="cannot read the cached copy .*Permission denied"):
        fetch("tinyshakespeare", tmp_path)


@pytest.mark.parametrize("inside", ["model", "link/deeper"])
def test_a_data_directory_in_a_model_folder_is_refused_before_any_download(data_mirror, tmp_path: Path,
                                                                           monkeypatch, inside):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"format": "charrnn-model"}), encoding="utf-8")
    (tmp_path / "link").symlink_to(model, target_is_directory=True)
    monkeypatch.setenv(datasets.DATA_DIR_ENV, str(tmp_path / inside))
    with pytest.raises(CharrnnError, match=r"CHARRNN_DATA_DIR .* is inside the model folder .*, which"):
        fetch("tinyshakespeare")
    with pytest.raises(CharrnnError, match=r"data_dir .* is inside the model folder"):
        fetch("tinyshakespeare", tmp_path / inside)
    assert sorted(path.name for path in model.iterdir()) == ["config.json"]
