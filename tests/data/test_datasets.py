from pathlib import Path

import pytest

from charrnn.data import datasets
from charrnn.data.datasets import DATASETS, MIRROR_ENV, get_dataset
from charrnn.errors import CharrnnError

EXPECTED = DATASETS["tinyshakespeare"]


def test_download_from_mirror_and_verify(data_mirror, tmp_path: Path):
    path, downloaded = get_dataset("tinyshakespeare", tmp_path)
    assert downloaded
    assert path == tmp_path / "tinyshakespeare" / "input.txt"
    assert len(path.read_text(encoding="utf-8")) == EXPECTED.chars
    # A verified copy is reused.
    assert get_dataset("tinyshakespeare", tmp_path) == (path, False)
    # A damaged copy is replaced.
    path.write_text("damaged", encoding="utf-8")
    _, downloaded = get_dataset("tinyshakespeare", tmp_path)
    assert downloaded and len(path.read_text(encoding="utf-8")) == EXPECTED.chars


def test_wrong_checksum_is_refused_and_deleted(tmp_path: Path, monkeypatch):
    mirror = tmp_path / "mirror"
    (mirror / "tinyshakespeare").mkdir(parents=True)
    (mirror / "tinyshakespeare" / "input.txt").write_text("First Citizen:\nnot really\n")
    monkeypatch.setenv(MIRROR_ENV, mirror.as_uri())
    cache = tmp_path / "cache"
    with pytest.raises(CharrnnError, match="refused the download.*SHA-256"):
        get_dataset("tinyshakespeare", cache)
    assert not cache.exists()  # no file and no directory left behind


def test_unreachable_origin_suggests_mirror(tmp_path: Path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, (tmp_path / "nowhere").as_uri())
    with pytest.raises(CharrnnError, match=f"could not download.*{MIRROR_ENV}"):
        get_dataset("tinyshakespeare", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_unknown_dataset(tmp_path: Path):
    with pytest.raises(CharrnnError, match="unknown dataset"):
        get_dataset("nope", tmp_path)


def test_a_directory_where_the_dataset_goes_is_a_clear_error(tmp_path: Path):
    (tmp_path / "tinyshakespeare" / "input.txt").mkdir(parents=True)
    with pytest.raises(CharrnnError, match="input.txt: it is a directory"):
        get_dataset("tinyshakespeare", tmp_path)


def test_an_unreadable_cached_copy_is_a_clear_error(tmp_path: Path, monkeypatch):
    target = tmp_path / "tinyshakespeare" / "input.txt"
    target.parent.mkdir()
    target.write_text("x")

    def denied(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(datasets, "_sha256", denied)
    with pytest.raises(CharrnnError, match="cannot read the cached copy .*Permission denied"):
        get_dataset("tinyshakespeare", tmp_path)


def test_an_unwritable_data_directory_is_a_clear_error(tmp_path: Path, data_mirror):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(CharrnnError, match="cannot create .*Not a directory"):
        get_dataset("tinyshakespeare", blocker / "data")
