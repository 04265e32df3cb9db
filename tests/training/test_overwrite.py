import os
from pathlib import Path

import pytest

import charrnn
from charrnn.errors import OptionConflict
from charrnn.training.overwrite import refuse_writing_over_reads


def test_a_file_is_refused_on_what_a_checkpoint_stands_for(tiny_run, tmp_path):
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


def test_a_file_is_refused_at_a_run_directory_s_own_names(tiny_run):
    for name in ("notes.pt", "config.json", ".charrnn-x"):
        with pytest.raises(OptionConflict, match="keeps for its own files"):
            refuse_writing_over_reads(tiny_run / name, "output", {})
    refuse_writing_over_reads(tiny_run / "notes.md", "output", {})


def test_a_run_directory_is_refused_where_its_files_are_what_the_run_reads(small_corpus, tmp_path):
    corpus_dir = tmp_path / "poems"
    (corpus_dir / "deep").mkdir(parents=True)
    os.link(small_corpus, corpus_dir / "deep" / "a.txt")
    run = tmp_path / "run"
    run.mkdir()
    os.link(small_corpus, run / "metrics.jsonl")
    for reads in ({"corpus": small_corpus}, {"corpus": corpus_dir}):
        refused = "out_dir .*run would replace .*metrics.jsonl, which is .*corpus .*choose another run"
        with pytest.raises(OptionConflict, match=refused):
            refuse_writing_over_reads(run, "out_dir", reads, run_directory=True)
    refuse_writing_over_reads(tmp_path / "fresh", "out_dir", {"corpus": corpus_dir, "init_from": None},
                              run_directory=True)


def test_nothing_is_written_in_the_shipped_models_folder():
    shipped = Path(charrnn.__file__).parent / "models" / "weights"
    with pytest.raises(OptionConflict, match="never written; choose another run directory"):
        refuse_writing_over_reads(shipped / "mine", "out_dir", {}, run_directory=True)


def test_a_run_directory_is_refused_inside_a_directory_corpus_or_over_a_temporary_it_reads(
        small_corpus, tmp_path):
    poems = tmp_path / "poems"
    poems.mkdir()
    (poems / "a.txt").write_text("shall I compare thee\n", encoding="utf-8")
    for out in (poems, poems / "run"):
        refused = "is inside the corpus directory .*poems: writing there would change what is read"
        with pytest.raises(OptionConflict, match=refused + "; choose another run directory"):
            refuse_writing_over_reads(out, "out_dir", {"corpus": poems}, run_directory=True)
    run = tmp_path / "run"
    run.mkdir()
    temporary = run / ".charrnn-999999-best.pt.abc.tmp"  # a name the run clears away when its process is gone
    temporary.write_bytes(small_corpus.read_bytes())
    with pytest.raises(OptionConflict, match="would replace .*abc.tmp, which is corpus"):
        refuse_writing_over_reads(run, "out_dir", {"corpus": temporary}, run_directory=True)

