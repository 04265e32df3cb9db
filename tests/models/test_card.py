"""The model card, a model folder's README.md: what it says, and every recorded text kept where it lands."""

import html
import os
import re
import subprocess

import charrnn
from charrnn.training.checkpoint import load_checkpoint, save_checkpoint


def test_the_model_card_says_what_the_model_scores_and_how_it_was_made(tiny_checkpoint, tmp_path):
    folder = charrnn.export(tiny_checkpoint, tmp_path / "model", format="safetensors").path
    card = (folder / "README.md").read_text(encoding="utf-8")
    payload = load_checkpoint(tiny_checkpoint)
    best, corpus = payload["best"], payload["corpus"]
    assert card.startswith("---\nlibrary_name: charrnn\n")
    for fact in (f"{best['nats_per_char']:.4f}", f"{best['bits_per_char']:.4f}", f"{best['perplexity']:.3f}",
                 corpus["sha256"], f"{sum(t.numel() for t in payload['model_state'].values()):,} parameters",
                 f"| steps | {payload['step']:,} |", payload["machine"], charrnn.__version__,
                 f"charrnn sample {folder.name}", f"--init-from {folder.name}"):
        assert fact in card, fact
    assert "not recorded" not in card


# A line break, a fence, HTML, a pipe, backticks and a byte that is not UTF-8 (no slash: it names folders).
HOSTILE_TEXT = "x\n```\n<img src=x onerror=alert(1)> | `tick` `` \udcff"


def test_the_model_card_keeps_every_recorded_text_where_it_lands(tiny_checkpoint, tmp_path):
    from markdown_it import MarkdownIt

    payload = {key: value for key, value in load_checkpoint(tiny_checkpoint).items() if key != "best"}
    corpus = {**payload["corpus"], "name": HOSTILE_TEXT, "path": f"https://example.org/<script>{HOSTILE_TEXT}"}
    run = tmp_path / f"run {HOSTILE_TEXT}"
    run.mkdir()
    save_checkpoint(run / "best.pt", {**payload, "corpus": corpus, "machine": HOSTILE_TEXT})
    target = tmp_path / f"model {HOSTILE_TEXT}"
    charrnn.export(run / "best.pt", target, format="safetensors")
    rendered = MarkdownIt("commonmark").enable("table").render((target / "README.md").read_text("utf-8"))
    assert not re.search(r"<(img|script)\b", rendered)  # recorded HTML is shown, never run
    blocks = re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", rendered, re.S)
    assert len(blocks) == 1
    commands = html.unescape(blocks[0]).splitlines()
    spans = [html.unescape(span) for span in re.findall(r"<code>(.*?)</code>", rendered, re.S)]
    scoring = next(span for span in spans if span.startswith("charrnn eval-perplexity"))
    assert len(commands) == 3 and "\n" not in scoring
    for command in (commands[0], scoring):  # the shell reads the folder's own name back from each
        word = subprocess.run(["bash", "-c", f'set -- {command.removeprefix("charrnn ")}; printf %s "$2"'],
                              capture_output=True, check=True).stdout
        assert word == os.fsencode(target.name)
    rows = re.findall(r"<tr>(.*?)</tr>", rendered, re.S)
    assert rows and all(row.count("<td>") == 2 for row in rows if "<td>" in row)
    assert "# run x<br>" in (target / "README.md").read_text("utf-8")  # the title stays on its line
