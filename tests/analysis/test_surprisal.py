"""Per-character surprisal: the same numbers as eval-perplexity, streamed, ranked, rendered."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import SMALL_TEXT

import charrnn
from charrnn.analysis.surprisal import surprisals
from charrnn.errors import CharrnnError, OptionConflict

from helpers import SCORE_TOLERANCE, run_cli

TEXT = SMALL_TEXT[:12_000]  # longer than one slice of an evaluation's streams (EVAL_SLICE characters)


@pytest.mark.parametrize("single_stream", [False, True])
def test_the_mean_surprisal_is_eval_perplexitys_nats_per_char(tiny_checkpoint, single_stream):
    rows = list(charrnn.surprisal(tiny_checkpoint, TEXT, single_stream=single_stream))
    assert [row.index for row in rows] == list(range(1, len(TEXT)))  # the first character has no context
    mean = math.fsum(row.nats for row in rows) / len(rows)
    scored = charrnn.perplexity(tiny_checkpoint, TEXT, single_stream=single_stream).nats_per_char
    assert mean == pytest.approx(scored, abs=SCORE_TOLERANCE)


def test_many_streams_and_one_agree_character_by_character_past_the_warm_up(tiny_checkpoint):
    model = charrnn.load(tiny_checkpoint)
    many = list(surprisals(model.network, model.vocab, TEXT, 3))
    one = list(surprisals(model.network, model.vocab, TEXT, 3, single_stream=True))
    assert [row.index for row in many] == [row.index for row in one]
    assert all(a.nats == pytest.approx(b.nats, abs=1e-4) for a, b in zip(many, one, strict=True))


def test_unknown_characters_are_refused_or_skipped_as_eval_perplexity_does(tiny_checkpoint):
    text = "ROMEO: Zebra café\nJULIET: Xylophone"
    with pytest.raises(CharrnnError, match="never saw: 'X'.*skip_unknown"):
        charrnn.surprisal(tiny_checkpoint, text)
    rows = list(charrnn.surprisal(tiny_checkpoint, text, skip_unknown=True))
    assert all(text[row.index] == row.char and row.char not in "XZ" for row in rows)
    mean = math.fsum(row.nats for row in rows) / len(rows)
    expected = charrnn.perplexity(tiny_checkpoint, text, skip_unknown=True).nats_per_char
    assert mean == pytest.approx(expected, abs=1e-4)
    with pytest.raises(OptionConflict, match="unit does not apply"):  # options for units do not apply
        charrnn.surprisal(tiny_checkpoint, TEXT, unit=3)


def test_each_row_lists_the_guesses_most_likely_first_and_the_most_surprising_come_with_their_context(
        tiny_checkpoint):
    for row in list(charrnn.surprisal(tiny_checkpoint, TEXT[:200], top=3)):
        probabilities = [probability for _, probability in row.top]
        assert len(row.top) == 3 and probabilities == sorted(probabilities, reverse=True)
        assert sum(probabilities) <= 1 + 1e-6
        assert row.nats >= -math.log(probabilities[0]) - 1e-5  # nothing is likelier than the top guess
        if row.char == row.top[0][0]:
            assert row.nats == pytest.approx(-math.log(probabilities[0]), abs=1e-5)
    scores = charrnn.surprisal(tiny_checkpoint, TEXT[:800])
    positions = scores.most_surprising(4)
    all_nats = sorted((row.nats for row in scores), reverse=True)
    assert [position.row.nats for position in positions] == all_nats[:4]
    for position in positions:
        index = position.row.index
        assert TEXT[:800][: index].endswith(position.before) and TEXT[index + 1 :].startswith(position.after)


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "held_out.txt"
    path.write_text(TEXT[:600], encoding="utf-8")
    return path


def test_inspect_ranks_the_most_surprising_and_colours_the_text_writes_a_page_and_streams_json(
        tiny_checkpoint, text_file, tmp_path):
    table = run_cli("inspect", tiny_checkpoint, text_file, "--most-surprising", "3")
    assert table.exit_code == 0, table.output
    assert "the most surprising characters" in table.stdout and "the model expected" in table.stdout
    assert " char " in table.stdout  # each character named
    listed = run_cli("inspect", tiny_checkpoint, text_file, "--most-surprising", "3", "--json")
    positions = json.loads(listed.stdout)
    assert len(positions) == 3 and {"before", "after", "nats", "top"} <= set(positions[0])
    page = tmp_path / "surprisal.html"
    result = run_cli("inspect", tiny_checkpoint, text_file, "--surprisal", "--html", page)
    assert result.exit_code == 0, result.output
    assert "nats/char on average" in result.stdout and "599 characters scored" in result.stdout
    html = page.read_text(encoding="utf-8")
    assert html.count('title="') >= 599 and "guesses:" in html and "<script" not in html
    result = run_cli("inspect", tiny_checkpoint, text_file, "--surprisal", "--json", "--top", "2")
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]  # one object per character, streamed
    assert len(rows) == 599 and set(rows[0]) == {"index", "char", "nats", "top"}
    assert rows[0]["index"] == 1 and len(rows[0]["top"]) == 2


@pytest.mark.parametrize(("arguments", "fragment"), [
    (["--surprisal", "--unit", "3"], "--unit does not apply"),
    (["--most-surprising", "0"], "--most-surprising"),
    (["--surprisal", "--top", "0"], "--top"),
    (["--single-stream"], "--single-stream sets how it reads the text --surprisal scores"),
    (["--skip-unknown"], "--skip-unknown drops characters"),
])
def test_inspect_surprisal_refusals_are_one_line(tiny_checkpoint, text_file, arguments, fragment):
    result = run_cli("inspect", tiny_checkpoint, text_file, *arguments)
    assert result.exit_code == 2, result.output
    assert len(result.stderr.splitlines()) == 1 and fragment in result.stderr


@pytest.mark.slow
def test_a_planted_misspelling_is_among_the_most_surprising(data_mirror, tmp_path):
    """Exercise 7.5 in small: "the" → "tqe" in held-out Shakespeare, after a few hundred steps."""
    shakespeare = charrnn.get_dataset(data_dir=tmp_path / "data").path
    run = tmp_path / "run"
    charrnn.train(shakespeare, out_dir=run, max_steps=400, hidden_size=128, num_layers=1, batch_size=32,
                  seq_len=64, learning_rate=5e-3)
    text = shakespeare.read_text(encoding="utf-8")
    start = text.index(" the ", len(text) - 20_000) - 200  # inside the validation split (its last 10%)
    held_out = text[start : start + 400]
    planted = 202  # the "h" of that " the "
    misspelt = held_out[:planted] + "q" + held_out[planted + 1 :]
    positions = charrnn.surprisal(run / "best.pt", misspelt).most_surprising(5)
    assert planted in [position.row.index for position in positions]
