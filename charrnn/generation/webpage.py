"""A trained model as one self-contained web page that generates text with no Python, server or network.

Inline: the model (config, code-point vocabulary, float32 weights so greedy text matches the command line's),
web/model.js (the stepper's step) and web/page.js (the controls, checked by SAMPLING_RULES; docs/guide.md)."""

from __future__ import annotations

import base64
import html
import json
import sys
from array import array
from importlib import resources
from string import Template
from typing import Any

import torch

from charrnn.config import SAMPLING_RULES
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError
from charrnn.models.model import CharRNN

WEB = resources.files("charrnn.generation") / "web"
ENCODING = "float32, little-endian, base64"
# The page streams its text into the document; beyond this many characters a browser tab slows to a
# crawl, so the page (and only the page) refuses longer texts.
PAGE_MAX_LENGTH = 1_000_000
CELLS = ("lstm", "gru", "rnn", "esn")  # what the JavaScript step runs (esn: a tanh or relu Elman RNN)


def _tensor(value: torch.Tensor) -> dict[str, Any]:
    """A tensor as the page stores it: its shape and its values as little-endian float32 in base64."""
    values = array("f", value.detach().to("cpu", torch.float32).reshape(-1).tolist())
    if sys.byteorder == "big":
        values.byteswap()
    return {"shape": list(value.shape), "data": base64.b64encode(values.tobytes()).decode("ascii")}


def model_spec(model: CharRNN, vocab: Vocab) -> dict[str, Any]:
    """Everything the page's JavaScript needs: configuration, vocabulary and tensors."""
    config = model.config
    if config.cell not in CELLS:
        raise CharrnnError(f"the page cannot run a {config.cell} cell (it runs {', '.join(CELLS)})")
    if len(vocab) != config.vocab_size or any(len(char) != 1 for char in vocab.chars):
        raise CharrnnError("the checkpoint's vocabulary does not match its model")
    # What the JavaScript step reads of the recurrent layers, by the PyTorch module's names.
    names = ["weight_ih", "weight_hh"]
    names += ["ln_gain", "ln_bias"] + (["ln_cell_gain", "ln_cell_bias"] if config.cell == "lstm" else []) \
        if config.layer_norm else ["bias_ih", "bias_hh"]
    tensors = {"embedding": model.embedding.weight, "head_weight": model.head.weight,
               "head_bias": model.head.bias, **{f"{name}_l{k}": getattr(model.rnn, f"{name}_l{k}")
                                                 for k in range(config.num_layers) for name in names}}
    return {"format": 1, "encoding": ENCODING,
            "config": {"cell": "rnn" if config.cell == "esn" else config.cell,
                       "num_layers": config.num_layers, "hidden_size": config.hidden_size,
                       "embed_size": config.embed_size, "skip_connections": config.skip_connections,
                       "layer_norm": config.layer_norm, "rnn_activation": config.rnn_activation},
            "vocab": list(vocab.chars), "tensors": {name: _tensor(value) for name, value in tensors.items()}}


# Inside a <script> element, "</script" ends it and "<!--" or "<script" changes how the browser finds its
# end; JSON escapes every "<" (and ">", "&" alike) as \u003c..., which JSON.parse reads back unchanged.
SCRIPT_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


def script_json(value: Any) -> str:
    """``value`` as JSON that a ``<script>`` element holds whole, whatever text it carries."""
    return json.dumps(value, ensure_ascii=True, separators=(",", ":")).translate(SCRIPT_ESCAPES)


def export_page(model: CharRNN, vocab: Vocab, title: str, about: str, prime: str = "") -> str:
    """The whole page, as text (see the module docstring)."""
    # The prime travels as JSON, not as the text area's content: the HTML parser drops a text area's
    # leading line break, and its value turns every carriage return into a line break.
    settings = {"prime": prime, "max_length": PAGE_MAX_LENGTH,
                "rules": {name: rule.to_dict() for name, rule in SAMPLING_RULES.items()}}
    return Template((WEB / "page.html").read_text(encoding="utf-8")).substitute(
        title=html.escape(title), about=html.escape(about), spec=script_json(model_spec(model, vocab)),
        settings=script_json(settings), model_js=(WEB / "model.js").read_text(encoding="utf-8"),
        page_js=(WEB / "page.js").read_text(encoding="utf-8"))
