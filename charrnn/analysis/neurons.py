"""Looking inside the network: one unit's activation over a text, and units that track a feature.

After Karpathy, Johnson & Fei-Fei, "Visualizing and Understanding Recurrent Networks": ranking units by how
well they follow a property of the text is how the "inside a quotation" cell is found."""

from __future__ import annotations

import html
from collections.abc import Callable
from itertools import accumulate

import torch

from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError, ConfigError
from charrnn.models.model import CharRNN
from charrnn.models.stepper import make_stepper
from charrnn.utils.terminal import HIDDEN_CHAR_STYLE, colour, html_text

STEP_SLICE = 4096  # characters unbound at once while stepping through a text


@torch.no_grad()
def activations(model: CharRNN, vocab: Vocab, text: str, state: str = "h") -> torch.Tensor:
    """Every unit's value after each character, read from a zero state: (T, num_layers, H) float32.
    ``state`` is "h" (hidden) or, for the LSTM, "c" (cell) (InspectConfig checks it)."""
    if state == "c" and model.config.cell != "lstm":
        raise ConfigError(f"c needs an LSTM; this model is a {model.config.cell.upper()}", "state")
    device = next(model.parameters()).device
    ids = vocab.encode(text).long().to(device)
    stepper = make_stepper(model)
    current = model.initial_state(1, device)
    which = 0 if state == "h" else 1
    rows = []
    # In slices: iterating a tensor unbinds it whole, in one call that no signal can interrupt.
    for piece in ids.split(STEP_SLICE):
        for index in piece:
            _, current = stepper.step(index.view(1), current)
            rows.append(current[which][:, 0])  # (num_layers, H)
    if not rows:
        raise CharrnnError("the text is empty")
    return torch.stack(rows).cpu()


# What each feature is per character (text_feature's docstring says it in words).
_FEATURE_FUNCTIONS: dict[str, Callable[[str], list[float]]] = {
    "quotes": lambda text: [float(quotes % 2) for quotes in accumulate(char == '"' for char in text)],
    "line-position": lambda text: [float(at) for line in text.split("\n")
                                   for at in range(len(line) + 1)][: len(text)],  # no "\n" ends the last line
    "indent": lambda text: [float(len(line) - len(line.lstrip(" \t")))
                            for line in text.splitlines(keepends=True) for _ in line],
}
_ABSENT = {"quotes": "double-quoted passage", "line-position": "line longer than one character",
           "indent": "indented line"}  # what a text must have for each feature to vary


def text_feature(text: str, feature: str) -> torch.Tensor:
    """A per-character property of the text, (T,) float32 (InspectConfig checks ``feature``). quotes: 1 inside
    double quotes, else 0; line-position: characters since a newline; indent: leading spaces and tabs."""
    values = torch.tensor(_FEATURE_FUNCTIONS[feature](text), dtype=torch.float32)
    if len(values) and bool((values == values[0]).all()):
        # A constant feature correlates with nothing: a table of +0.000 would only mislead.
        raise CharrnnError(f"the text has no {_ABSENT[feature]}, so no unit can track {feature}; give a text "
                           f"that has some")
    return values


def rank_units(acts: torch.Tensor, feature: torch.Tensor, top: int = 10) -> list[tuple[int, int, float]]:
    """Units whose activation correlates best with ``feature``: (layer, unit, Pearson r), |r| descending.
    acts: (T, num_layers, H); feature: (T,). A constant feature correlates with nothing."""
    T, layers, hidden = acts.shape
    flat = acts.reshape(T, layers * hidden).double()
    x = flat - flat.mean(0)
    y = feature.double() - feature.double().mean()
    denominator = x.norm(dim=0) * y.norm()
    corr = torch.where(denominator > 0, (x * y.unsqueeze(1)).sum(0) / denominator, torch.zeros(()))
    order = torch.argsort(corr.abs(), descending=True)[:top]
    return [(int(i) // hidden, int(i) % hidden, float(corr[i])) for i in order]


DARK_BACKGROUND = 0.55  # beyond this share of the scale, a shade takes white text to stay readable
COLOUR_BAR_STEPS = 11  # swatches in the page's colour bar, from -scale to +scale


def _span(char: str, value: float, scale: float) -> str:
    red, green, blue = colour(value, scale)
    ink = "#fff" if scale > 0 and abs(value) / scale > DARK_BACKGROUND else "#000"
    return (f'<span style="background:rgb({red},{green},{blue});color:{ink}" title="{value:.3f}">'
            f"{html_text(char)}</span>")


def html_page(text: str, values: list[float], scale: float, title: str) -> str:
    """A standalone page: the text, each character shaded by its value (on hover), below a colour bar."""
    spans = [_span(char, value, scale) if char != "\n" else "\n"
             for char, value in zip(text, values, strict=True)]
    swatches = [-scale + 2 * scale * step / (COLOUR_BAR_STEPS - 1) for step in range(COLOUR_BAR_STEPS)]
    bar = "".join(_span(f" {value:+.2g} ", value, scale) for value in swatches)
    return text_page(title, "body{font-family:sans-serif;margin:2em}pre{font-size:14px;line-height:1.4;"
                            "white-space:pre-wrap}.bar span{font-family:monospace;font-size:12px}",
                     f"<p>red: negative, white: zero, blue: positive (saturating at ±{scale:.3g}); hover a "
                     f'character for its value.</p>\n<p class="bar">{bar}</p>\n', "".join(spans))


def text_page(title: str, style: str, paragraphs: str, text: str) -> str:
    """A standalone HTML page: ``title`` as its heading, then ``paragraphs`` and ``text`` (HTML), styled."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{html.escape(title)}</title>\n<style>{style}{HIDDEN_CHAR_STYLE}</style>\n</head>\n"
            f"<body>\n<h1>{html.escape(title)}</h1>\n{paragraphs}<pre>{text}</pre>\n</body>\n</html>\n")
