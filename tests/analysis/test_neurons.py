from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

from charrnn.analysis.neurons import activations, html_page, rank_units, text_feature
from charrnn.config import InspectConfig, ModelConfig
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, ConfigError
from charrnn.models.model import CharRNN
from charrnn.training.checkpoint import save_checkpoint

from helpers import run_cli

QUOTED = 'he said "go home" and she said "no" then left. "why" asked he. ok "fine" done\n' * 3


def test_features_and_a_copy_of_the_feature_ranked_first():
    assert text_feature('a"bc"d', "quotes").tolist() == [0, 1, 1, 1, 0, 0]
    assert text_feature("ab\ncd", "line-position").tolist() == [0, 1, 2, 0, 1]
    assert text_feature("a\n  b\n", "indent").tolist() == [0, 0, 2, 2, 2, 2]
    with pytest.raises(ConfigError, match="rank must be one of quotes, line-position, indent"):
        InspectConfig(rank="colour")
    feature = text_feature(QUOTED, "quotes")
    acts = torch.randn(len(QUOTED), 2, 5) * 0.1
    acts[:, 1, 3] = feature * 2 - 1
    (layer, unit, correlation), *_ = rank_units(acts, feature)
    assert (layer, unit) == (1, 3) and correlation == pytest.approx(1.0)


def planted_quote_model() -> tuple[CharRNN, Vocab]:
    """A one-layer LSTM whose unit 1 flips its cell state at every double quote. Embedding: [is '"', 1].
    On a quote the forget gate closes and the input gate opens; the candidate is tanh(3.8 - 10 h), so c goes
    to +1 at an opening quote (h was <= 0) and to -1 at a closing one (h was +0.76). Between quotes f = 1,
    i = 0: the cell keeps its value. Units 0 and 2 have no weights."""
    vocab = Vocab.from_text(QUOTED)
    model = CharRNN(ModelConfig(vocab_size=len(vocab), num_layers=1, hidden_size=3, embed_size=2))
    H, big, gain, unit = 3, 20.0, 10.0, 1
    with torch.no_grad():
        for param in model.parameters():
            param.zero_()
        model.embedding.weight[:, 1] = 1.0
        model.embedding.weight[vocab.chars.index('"'), 0] = 1.0
        w_ih, w_hh = model.rnn.weight_ih_l0, model.rnn.weight_hh_l0
        w_ih[0 * H + unit] = torch.tensor([2 * big, -big])  # input gate: open on a quote
        w_ih[1 * H + unit] = torch.tensor([-2 * big, big])  # forget gate: closed on a quote
        w_ih[2 * H + unit] = torch.tensor([0.0, 0.38 * gain])  # candidate ...
        w_hh[2 * H + unit, unit] = -gain  # ... flips the sign of what the unit holds
        w_ih[3 * H + unit] = torch.tensor([0.0, big])  # output gate: open
    return model.eval(), vocab


def test_the_planted_quote_unit_is_ranked_first_and_a_cell_state_needs_an_lstm():
    model, vocab = planted_quote_model()
    acts = activations(model, vocab, QUOTED, "c")
    (layer, unit, correlation), *_ = rank_units(acts, text_feature(QUOTED, "quotes"))
    assert (layer, unit) == (0, 1) and correlation > 0.9
    model = CharRNN(ModelConfig(vocab_size=3, cell="gru", hidden_size=4, embed_size=2))
    with pytest.raises(CharrnnError, match="needs an LSTM"):
        activations(model, Vocab(("a", "b", "c")), "abc", "c")


class StrictParser(HTMLParser):
    """Fails on any closing tag that does not close the innermost open element."""

    VOID = {"meta", "br"}

    def __init__(self):
        super().__init__()
        self.stack, self.pre_text, self.in_pre, self.doctype = [], [], False, None

    def handle_decl(self, decl):
        self.doctype = decl

    def handle_starttag(self, tag, attrs):
        if tag not in self.VOID:
            self.stack.append(tag)
        self.in_pre = self.in_pre or tag == "pre"

    def handle_endtag(self, tag):
        assert self.stack and self.stack.pop() == tag, f"unbalanced </{tag}>"
        if tag == "pre":
            self.in_pre = False

    def handle_data(self, data):
        if self.in_pre:
            self.pre_text.append(data)


def test_html_page_is_well_formed_holds_the_text_keeps_strong_shades_readable_and_shows_a_colour_bar():
    text = 'a <b> & "c"\nnew line'
    page = html_page(text, [0.5] * len(text), 1.0, "unit <3>")
    parser = StrictParser()
    parser.feed(page)
    parser.close()
    assert parser.doctype == "DOCTYPE html" and parser.stack == []
    assert "".join(parser.pre_text) == text
    page = html_page("ab", [0.95, 0.1], 1.0, "run/best.pt: layer 0, unit 3, hidden state")
    assert 'color:#fff" title="0.950">a<' in page and 'color:#000" title="0.100">b<' in page  # readable
    assert page.count('class="bar"') == 1 and "+1" in page and "-1" in page  # a colour bar
    assert "<h1>run/best.pt: layer 0, unit 3, hidden state</h1>" in page


@pytest.fixture
def planted(tmp_path) -> tuple[Path, Vocab]:
    """The planted model saved as a checkpoint, and its vocabulary."""
    model, vocab = planted_quote_model()
    checkpoint = tmp_path / "planted.pt"
    save_checkpoint(checkpoint, {"model_config": model.config.to_dict(), "vocab": vocab.to_list(),
                                 "model_state": model.state_dict()})
    return checkpoint, vocab


def test_cli_rank_and_colour(tmp_path, planted):
    checkpoint, _ = planted
    text_file = tmp_path / "quoted.txt"
    text_file.write_text(QUOTED, encoding="utf-8")
    ranked = run_cli("inspect", checkpoint, text_file, "--rank", "quotes", "--state", "c", "--top", "3")
    assert ranked.exit_code == 0, ranked.output
    first_row = next(line for line in ranked.stdout.splitlines() if "│" in line and "+0." in line)
    assert [cell.strip() for cell in first_row.split("│")[1:3]] == ["0", "1"]

    shown = run_cli("inspect", checkpoint, text_file, "--unit", "1", "--state", "c", "--html",
                    tmp_path / "unit1.html")
    assert shown.exit_code == 0, shown.output
    assert 'he said "go home"' in shown.stdout
    parser = StrictParser()
    parser.feed(Path(tmp_path / "unit1.html").read_text(encoding="utf-8"))
    assert "".join(parser.pre_text) == QUOTED and parser.stack == []

    too_far = run_cli("inspect", checkpoint, text_file, "--unit", "9")
    assert too_far.exit_code == 2 and "units 0 to 2" in too_far.stderr


@pytest.mark.parametrize(("feature", "text", "fragment"), [
    ("quotes", "no quotes here\nnor here\n", "no double-quoted passage"),
    ("indent", "flush\nleft\n", "no indented line"),
])
def test_ranking_by_a_feature_the_text_lacks_says_so(tmp_path, planted, feature, text, fragment):
    checkpoint, vocab = planted
    text_file = tmp_path / "plain.txt"
    text_file.write_text("".join(ch for ch in text if ch in vocab.chars), encoding="utf-8")
    result = run_cli("inspect", checkpoint, text_file, "--rank", feature)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.startswith("Error: the text has no ") and fragment in result.stderr


@pytest.mark.cuda
def test_activations_on_cuda_equal_the_cpu_ones():
    model, vocab = planted_quote_model()
    on_cpu = activations(model, vocab, QUOTED, "c")
    on_gpu = activations(model.to("cuda"), vocab, QUOTED, "c")
    assert on_gpu.device.type == "cpu" and torch.allclose(on_cpu, on_gpu, atol=1e-5)
