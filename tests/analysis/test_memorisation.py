"""Memorisation figures on hand-made cases with known answers, and against a brute-force search."""

from __future__ import annotations

import json
import random

import pytest
import torch

from charrnn.analysis.memorisation import (
    COPY_MIN_CHARS,
    Memorisation,
    Reference,
    copied_fraction,
    known_word_fraction,
    measure,
)

from helpers import run_cli

REFERENCE = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die than to famish?\n\n"
    "MENENIUS:\nO'er the hills, 'tis said, the naïve café 語 stands — 🙂 and so it goes.\n"
)


def brute_longest(text: str, reference: str) -> int:
    best = 0
    for start in range(len(text)):
        while start + best < len(text) and text[start:start + best + 1] in reference:
            best += 1
    return best


def test_a_verbatim_slice_is_all_copied_and_known_a_copy_in_novel_text_found_nothing_in_common_or_no_text():
    reference = Reference(REFERENCE)
    sample = REFERENCE[15:REFERENCE.index("famish?") + len("famish?")]  # whole words, lines 2 to 8
    assert measure(sample, reference) == Memorisation(1.0, len(sample), 2, sample, 1.0)
    copied = REFERENCE[70:110]
    sample = "zqxv wbpk jjfl " + copied + " mmrt ykkw ghhz"
    figures = measure(sample, Reference(REFERENCE))
    assert figures.longest_copied_chars >= 40 and figures.longest_copied_passage.find(copied) >= 0
    assert figures.longest_copied_chars == brute_longest(sample, REFERENCE)
    assert figures.copied_fraction == pytest.approx(figures.longest_copied_chars / len(sample))
    figures = measure("zqxv wbpk jjfl", Reference(REFERENCE))
    assert (figures.known_word_fraction, figures.copied_fraction) == (0.0, 0.0)
    assert figures.longest_copied_chars == brute_longest("zqxv wbpk jjfl", REFERENCE)
    assert measure("", Reference(REFERENCE)) == Memorisation(None, 0, None, "", 0.0)


def test_non_ascii_text_and_apostrophes_inside_words_and_windows_at_the_very_start_and_end():
    reference = Reference(REFERENCE)
    start, end = REFERENCE[:COPY_MIN_CHARS], REFERENCE[-COPY_MIN_CHARS:]
    assert copied_fraction(start, reference) == copied_fraction(end, reference) == 1.0
    assert copied_fraction(end[1:], reference) == 0.0  # one character short of a counted copy
    figures = measure("#" + end, reference)
    assert figures.longest_copied_chars == COPY_MIN_CHARS
    assert figures.longest_copied_line == REFERENCE.count("\n", 0, len(REFERENCE) - COPY_MIN_CHARS) + 1
    assert known_word_fraction("naïve café 語 O'er", reference) == 1.0
    assert known_word_fraction("o'er", reference) == 0.0  # spelled exactly, case included
    assert known_word_fraction("'tis", reference) == 1.0  # the leading apostrophe is not part of the word
    assert known_word_fraction("naive cafe", reference) == 0.0
    sample = "xx" + REFERENCE[-40:]
    assert measure(sample, reference).longest_copied_chars == 40


def test_matches_a_brute_force_search_on_random_texts():
    rng = random.Random(0)
    for _ in range(30):
        pieces = [REFERENCE[start:start + rng.randint(0, 45)] for start in
                  (rng.randrange(len(REFERENCE)) for _ in range(3))]
        sample = "".join(piece + rng.choice(["#", "~~", "Ω"]) for piece in pieces)
        assert measure(sample, Reference(REFERENCE)).longest_copied_chars == brute_longest(sample, REFERENCE)


POEM = ("Tyger Tyger, burning bright,\nIn the forests of the night;\nWhat immortal hand or eye,\n"
        "Could frame thy fearful symmetry?\n\n")


@pytest.mark.slow
def test_a_model_that_memorised_a_short_text_reports_copying_near_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "poem.txt"
    corpus.write_text(POEM * 60, encoding="utf-8")
    trained = run_cli("train", corpus, "--layers", "1", "--hidden", "96", "--embed", "16", "--batch-size",
                      "8", "--seq-len", "64", "--max-steps", "300", "--lr", "0.01", "--eval-every", "300",
                      "--out", "run", "--seed", "1")
    assert trained.exit_code == 0, trained.output
    result = run_cli("compare", "run/best.pt", "--prime", "Tyger Tyger", "--length", "120", "--temperature",
                     "0.05", "--against", "train", "--json", "--markdown", "report.md")
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout)[0]["memorisation"]
    assert set(figures) >= {"known_word_fraction", "longest_copied_chars", "copied_fraction"}
    assert figures["copied_fraction"] > 0.9
    assert figures["longest_copied_chars"] >= 110
    assert figures["known_word_fraction"] > 0.9
    report = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "| known words | longest copy (chars) |" in report and "Longest copied passage" in report


def test_against_a_missing_file_is_one_error_line_and_a_vanished_training_corpus_is_in_the_entry(tiny_run,
                                                                                                  tmp_path):
    result = run_cli("compare", tiny_run / "best.pt", "--against", "no_such.txt")
    assert result.exit_code == 1 and result.stderr.strip() == "Error: --against no_such.txt does not exist"
    checkpoint = tmp_path / "best.pt"
    payload = torch.load(tiny_run / "best.pt", weights_only=True)
    payload["corpus"]["path"] = str(tmp_path / "gone.txt")
    torch.save(payload, checkpoint)
    result = run_cli("compare", checkpoint, "--against", "train", "--json", "--length", "5")
    assert result.exit_code == 1, result.output  # what was asked could not all be done
    entry = json.loads(result.stdout)[0]
    assert entry["memorisation"] is None and "give --against FILE" in entry["error"]
    assert "no memorisation figures" in result.stderr.strip().splitlines()[-1]
