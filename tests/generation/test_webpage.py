"""The exported page: its JavaScript step against the Python stepper (node), its text in headless Chromium."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import quote

import pytest
import torch

import charrnn
from charrnn.config import ModelConfig, read_setting
from charrnn.data.vocab import Vocab
from charrnn.errors import CharrnnError
from charrnn.generation.webpage import WEB, export_page, model_spec
from charrnn.models.model import CharRNN
from charrnn.models.stepper import make_stepper

from helpers import KINDS, VOCAB, plan_run, random_model, repeated_runs, run_cli

NODE = shutil.which("node")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="headless Chromium is not installed (apt-get install chromium; .ci/run does)")

NODE_PROGRAM = """
const { CharModel } = require(process.argv[1]);
const spec = JSON.parse(require("fs").readFileSync(process.argv[2], "utf8"));
const ids = JSON.parse(process.argv[3]);
const model = new CharModel(spec);
let state = model.initialState();
const out = [];
for (const id of ids) { let logits; [logits, state] = model.step(id, state); out.push(Array.from(logits)); }
console.log(JSON.stringify(out));
"""


@needs_node
@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
def test_the_javascript_step_is_the_python_step(kind, tmp_path):
    model = random_model(KINDS[kind])
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(model_spec(model, VOCAB)))
    ids = [0, 3, 5, 6, 7, 2, 9, 1, 1, 4]
    arguments = [str(WEB / "model.js"), str(spec), json.dumps(ids)]
    printed = subprocess.run([NODE, "-e", NODE_PROGRAM, "--", *arguments], capture_output=True, text=True,
                             check=True).stdout
    javascript = torch.tensor(json.loads(printed), dtype=torch.float64)
    stepper = make_stepper(model)
    layers = stepper.unstack(model.initial_state(1, "cpu"))
    for position, char_id in enumerate(ids):
        logits, layers = stepper.step_layers(torch.tensor([char_id]), layers)
        assert torch.allclose(logits[0].double(), javascript[position], atol=1e-5), (kind, position)


def test_the_page_is_self_contained_and_its_vocabulary_explicit(tiny_checkpoint, tmp_path):
    page = charrnn.export(tiny_checkpoint, tmp_path / "page.html")
    text = page.path.read_text(encoding="utf-8")
    assert page.size == len(text.encode("utf-8")) and page.encoding.startswith("float32")
    assert not re.search(r"""(src|href)=["']?(https?:|//)""", text) and "fetch(" not in text
    assert "<script src" not in text and "@import" not in text
    spec = json.loads(re.search(r'<script type="application/json" id="model">(.*?)</script>', text, re.S)
                      .group(1).replace("<\\/", "</"))
    model = charrnn.load(tiny_checkpoint)
    assert spec["vocab"] == list(model.vocab.chars)
    assert page.parameters == sum(p.numel() for p in model.network.parameters())
    with pytest.raises(CharrnnError, match="does not match its model"):  # a vocabulary of another model
        model_spec(model.network, Vocab(("a", "b")))


@pytest.mark.parametrize(("arguments", "fragment"), [
    (["--output", "{checkpoint}"], "writing it would destroy what is read"),
    (["--output", "{dir}/page.html", "--prime", "Zzz\u2603"], "never saw"),
    (["--output", "{dir}/missing/page.html"], "there is no directory"),
])
def test_export_refusals_are_one_line_and_write_nothing(tiny_checkpoint, tmp_path, arguments, fragment):
    before = tiny_checkpoint.read_bytes()
    given = [argument.format(checkpoint=tiny_checkpoint, dir=tmp_path) for argument in arguments]
    result = run_cli("export", tiny_checkpoint, *given)
    assert result.exit_code != 0 and len(result.stderr.splitlines()) == 1 and fragment in result.stderr
    assert tiny_checkpoint.read_bytes() == before and not (tmp_path / "page.html").exists()


def browser_texts(page: Path, queries: list[str], tmp_path: Path) -> list[tuple[str, str]]:
    """What headless Chromium shows in the page's output after running it with each query, all in one browser:
    (state, text)."""
    return [(state, text_of(markup)) for state, markup in browser_outputs(page, queries, tmp_path)]


def text_of(markup: str) -> str:
    """The text the page's output shows."""
    # Hidden characters are drawn as marks, each holding the character itself: the text is the marks' removed.
    return html.unescape(re.sub(r"<[^>]*>", "", markup))


# Runs the page once per query, each in a frame of its own, and writes every output's state and markup.
HARNESS = """<!doctype html><meta charset="utf-8"><pre id="results"></pre><script>
const frames = JSON.parse(new URLSearchParams(location.search).get("q")).map(query => {
  const frame = document.createElement("iframe");
  frame.src = PAGE + "?" + query;
  document.body.append(frame);
  return frame;
});
function settled() {
  const outputs = frames.map(frame => frame.contentDocument?.getElementById("output"));
  if (outputs.every(output => output?.dataset.state && output.dataset.state !== "running")) {
    document.getElementById("results").textContent =
      JSON.stringify(outputs.map(output => [output.dataset.state, output.innerHTML]));
  } else {
    setTimeout(settled, 50);
  }
}
addEventListener("load", settled);
</script>"""


def browser_outputs(page: Path, queries: list[str], tmp_path: Path) -> list[tuple[str, str]]:
    """The page's output after running it with each query, all in one browser: (state, its markup)."""
    harness = page.with_name(f"{page.stem}-harness.html")
    harness.write_text(HARNESS.replace("PAGE", json.dumps(page.name)), encoding="utf-8")
    dom = browser_dom(harness, f"q={quote(json.dumps(queries))}", tmp_path)
    found = re.search(r'<pre id="results">(.*?)</pre>', dom, re.S)
    assert found is not None and found.group(1), dom[-2000:]
    return [tuple(each) for each in json.loads(html.unescape(found.group(1)))]


def browser_dom(page: Path, query: str, tmp_path: Path) -> str:
    """The whole page, as headless Chromium leaves it after running it with ``query``."""
    # File access: a harness page reads the outputs of the pages it frames (browser_outputs).
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                          "--allow-file-access-from-files", f"--user-data-dir={tmp_path}",
                          "--virtual-time-budget=120000", "--dump-dom",
                          f"{page.as_uri()}?{query}"], capture_output=True, timeout=300).stdout
    return dom.decode("utf-8")  # not text=True: that would read a carriage return as a line end


@pytest.mark.slow
@needs_chromium
@pytest.mark.parametrize("kind", ["lstm with skip connections", "layer-normalised gru", "rnn relu"])
def test_greedy_text_in_the_browser_is_charrnn_samples(kind, tmp_path):
    """Trained on emoji, CJK and combining marks: 400 characters alike, with or without the no-repeat rule."""
    corpus = tmp_path / "corpus.txt"
    lines = (f"ROMEO 🙂 {n}: café, cafe\u0301 語 — “quoted” line {n % 9}.\n" for n in range(300))
    corpus.write_text("".join(lines), encoding="utf-8")
    plan_run(corpus, tmp_path / "run", max_steps=60, hidden_size=24, **{"num_layers": 2, **KINDS[kind]}).run()
    page = tmp_path / "page.html"
    charrnn.export(tmp_path / "run" / "best.pt", page)
    prime = "ROMEO 🙂"
    for rule in ({}, {"no_repeat": 6}):
        expected = charrnn.sample(tmp_path / "run" / "best.pt", prime, 400, greedy=True, **rule).text
        query = "".join(f"&{name}={value}" for name, value in rule.items())
        (state, shown), = browser_texts(page, [f"prime={prime}&length=400&greedy=1&autorun=1{query}"],
                                        tmp_path / f"profile{len(rule)}")
        assert state == "done" and shown == expected
    assert repeated_runs(shown, 6) == [] and shown != charrnn.sample(tmp_path / "run" / "best.pt", prime, 400,
                                                                      greedy=True).text


FLAGS = {"length": "--length", "temperature": "--temperature", "top_k": "--top-k", "top_p": "--top-p",
         "seed": "--seed", "no_repeat": "--no-repeat"}
# Each setting's text as a user may write it: the page and charrnn sample accept it, or both refuse it.
SETTING_ROWS = [
    ("length", "12"), ("length", " 12 "), ("length", "+12"), ("length", "0"), ("length", "1e3"),
    ("length", "10.5"), ("length", "-1"), ("length", "twelve"),
    ("temperature", "0.5"), ("temperature", "5e-1"), ("temperature", "1e-310"), ("temperature", "0"),
    ("temperature", "-1"), ("temperature", "inf"), ("temperature", "NaN"), ("temperature", "abc"),
    ("top_k", "3"), ("top_k", "ten"), ("top_k", "0"), ("top_k", "2.5"),
    ("top_p", "0.9"), ("top_p", "1"), ("top_p", "NaN"), ("top_p", "abc"), ("top_p", "1.5"), ("top_p", "0"),
    ("seed", "7"), ("seed", "-7"), ("seed", "18446744073709551615"), ("seed", "18446744073709551616"),
    ("seed", "x"),
    ("no_repeat", "2"), ("no_repeat", "16"), ("no_repeat", "99999999999999999999"), ("no_repeat", "1"),
    ("no_repeat", "0"), ("no_repeat", "2.5"), ("no_repeat", "x"),
]


def test_every_settings_row_is_read_alike_by_the_table_and_the_command_line(tiny_checkpoint):
    """The command line reads its options by config.SAMPLING_RULES: it accepts exactly what the table does."""
    for name, text in SETTING_ROWS:
        try:
            read_setting(name, text)
            table = True
        except CharrnnError:
            table = False
        options = ["--length", "12", FLAGS[name], text] if name != "length" else [FLAGS[name], text]
        printed = run_cli("sample", tiny_checkpoint, *(["--seed", "1"] if name != "seed" else []), *options)
        assert (printed.exit_code == 0) == table, (name, text, printed.output)
        if not table:
            assert printed.exit_code == 2 and len(printed.stderr.splitlines()) == 1


@pytest.mark.slow
@needs_chromium
def test_the_page_samples_with_its_controls_and_refuses_every_bad_setting_as_the_command_line_does(
        tiny_checkpoint, tmp_path):
    page = tmp_path / "page.html"
    charrnn.export(tiny_checkpoint, page)
    greedy = charrnn.sample(tiny_checkpoint, "ROMEO:", 12, greedy=True).text
    queries, expected = [], []
    for name, text in SETTING_ROWS:
        try:
            read_setting(name, text)
            expected.append("done")
        except CharrnnError:
            expected.append("error")
        length = "" if name == "length" else "length=12&"
        queries.append(f"prime=ROMEO:&{length}{name}={quote(text)}&autorun=1")
    # Malformed settings only the address gives, and a name the page does not know: errors, never guesses.
    queries += [f"prime=ROMEO:&{query}&autorun=1" for query in ("greedy=yes", "topk=5", "length=2000000")]
    expected += ["error"] * 3
    controls = "prime=ROMEO:&length=50&temperature=0.9&top_k=5&seed=4&autorun=1"  # each run alike
    queries += [controls, controls, "prime=\u2603&length=5&autorun=1"]  # and a prime it cannot write
    expected += ["done", "done", "error"]
    shown = browser_texts(page, queries, tmp_path / "rows")
    assert [state for state, _ in shown] == expected, list(zip(queries, shown, strict=True))
    assert shown[-3][1].startswith("ROMEO:") and len(shown[-3][1]) == 56 and shown[-2] == shown[-3]
    # Sampling so cold that it is greedy, in both doors.
    assert shown[SETTING_ROWS.index(("temperature", "1e-310"))][1] == greedy == charrnn.sample(
        tiny_checkpoint, "ROMEO:", 12, temperature=1e-310, seed=1).text
    # A repeated setting takes its last value, as a repeated option does.
    (state, _), = browser_texts(page, ["prime=ROMEO:&length=20&length=ten&autorun=1"], tmp_path / "twice")
    assert state == "error"
    assert run_cli("sample", tiny_checkpoint, "--length", "20", "--length", "ten").exit_code == 2
    # Seeds that differ by a multiple of 2**32 are one seed to torch's generator, and so to the page.
    seeds = (1, 2**53 + 1, 2)
    seeded = browser_texts(page, [f"prime=ROMEO:&length=30&seed={seed}&autorun=1" for seed in seeds],
                           tmp_path / "seeds")
    assert seeded[0] == seeded[1] != seeded[2]
    assert charrnn.sample(tiny_checkpoint, "ROMEO:", 30, seed=1).text == charrnn.sample(
        tiny_checkpoint, "ROMEO:", 30, seed=2**53 + 1).text


@pytest.mark.slow
@needs_chromium
def test_the_page_keeps_a_prime_exactly_as_the_command_line_does(tmp_path):
    """A prime with carriage returns, or starting with a line break, gives the same greedy text."""
    corpus = tmp_path / "crlf.txt"
    corpus.write_text("ROMEO: my lord,\r\nJULIET: good night.\r\n" * 120, encoding="utf-8", newline="")
    plan_run(corpus, tmp_path / "run", max_steps=40, hidden_size=24).run()
    checkpoint = tmp_path / "run" / "best.pt"
    page = tmp_path / "page.html"
    for index, prime in enumerate(["ROMEO: my\r\nJULIET:", "\nROMEO:", "\r\r"]):
        charrnn.export(checkpoint, page, prime=prime)
        expected = charrnn.sample(checkpoint, prime, 60, greedy=True).text
        # From the address, and from the prime box the export filled.
        queries = [f"prime={quote(prime)}&length=60&greedy=1&autorun=1", "length=60&greedy=1&autorun=1"]
        outputs = browser_outputs(page, queries, tmp_path / f"profile{index}")
        from_address, from_default = [(state, text_of(markup)) for state, markup in outputs]
        assert from_address == from_default == ("done", expected), prime
        # Shown, not obeyed: each carriage return is drawn as its escape, beside the character itself.
        markup = outputs[0][1]
        assert markup.count('<span class="hidden" data-shown="\\r">') == expected.count("\r")


@pytest.mark.slow
@needs_chromium
def test_a_refusal_quoting_the_prime_shows_its_hidden_characters(tiny_checkpoint, tmp_path):
    page = tmp_path / "page.html"
    charrnn.export(tiny_checkpoint, page)
    dom = browser_dom(page, f"prime={quote('ROMEO:' + chr(0x202E) + chr(27))}&length=5&autorun=1",
                      tmp_path / "profile")
    status = re.search(r'<p id="status">(.*?)</p>', dom, re.S).group(1)
    assert chr(0x202E) not in status and chr(27) not in status  # quoted, never obeyed
    assert r'"\u202e"' in status and r'"\u001b"' in status


# Each would end a <script> element early, or make the browser look past its end for another.
SCRIPT_BREAKERS = re.compile(r"</script|<!--|<script", re.I)
HOSTILE_PRIME = "<!--<script></script>&"


def hostile_page(tmp_path: Path) -> Path:
    """The page of a model whose vocabulary, and so prime and title, can spell HTML."""
    vocab = Vocab(tuple("<!-scrip>/& t"))
    torch.manual_seed(0)
    model = CharRNN(ModelConfig(vocab_size=len(vocab), hidden_size=8, embed_size=4)).eval()
    page = tmp_path / "page.html"
    page.write_text(export_page(model, vocab, "</title><script>", "</p><!--", HOSTILE_PRIME),
                    encoding="utf-8")
    return page


def test_no_text_the_page_embeds_can_end_or_open_its_script_elements(tmp_path):
    text = hostile_page(tmp_path).read_text(encoding="utf-8")
    scripts = re.findall(r"<script[^>]*>(.*?)</script>", text, re.S)
    assert len(scripts) == 4 and not any(SCRIPT_BREAKERS.search(script) for script in scripts)
    spec, settings = (json.loads(script) for script in scripts[:2])
    assert settings["prime"] == HOSTILE_PRIME and "".join(spec["vocab"]) == "<!-scrip>/& t"
    assert "<title>&lt;/title&gt;&lt;script&gt;</title>" in text


@pytest.mark.slow
@needs_chromium
def test_a_page_whose_prime_spells_html_runs(tmp_path):
    page = hostile_page(tmp_path)
    (state, shown), = browser_texts(page, ["length=20&greedy=1&autorun=1"], tmp_path / "profile")
    assert state == "done" and shown.startswith(HOSTILE_PRIME) and len(shown) == len(HOSTILE_PRIME) + 20
