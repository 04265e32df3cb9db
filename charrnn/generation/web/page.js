// The exported page's controls: read the settings (from the form, or the URL for automation),
// generate, and stream the characters into <pre id="output">, yielding to the browser between
// batches so the page stays responsive. `data-state` on the output is "running", then "done"
// (or "error", with the message in #status).
"use strict";

(function () {
  const spec = JSON.parse(document.getElementById("model").textContent);
  const model = new CharModel(spec);
  const form = document.getElementById("controls");
  const output = document.getElementById("output");
  const status = document.getElementById("status");
  const stopButton = document.getElementById("stop");
  let running = null;
  // By name, not through form.elements: a field named "length" would read the collection's length.
  const input = (name) => form.querySelector(`[name="${name}"]`);

  // The settings' rules are charrnn.config.SAMPLING_RULES, the table the command line reads by: the same
  // text is accepted or refused in both. The prime is kept exactly (carriage returns, a leading line
  // break), which a text area's value would not: it is read from the text area only once edited.
  const given = JSON.parse(document.getElementById("settings").textContent);
  const RULES = given.rules;
  let exactPrime = given.prime;
  input("prime").value = exactPrime;
  input("prime").addEventListener("input", () => { exactPrime = null; });
  const FIELDS = ["length", "temperature", "top_k", "top_p", "seed", "no_repeat"];
  const OPTIONAL = new Set(["top_k", "top_p", "no_repeat"]); // empty: not set
  const FLAGS = { "1": true, true: true, "0": false, false: false };
  let urlProblem = null;

  function refusal(name, rule) {
    return new Error(`${name} ${rule.refusal}`);
  }

  function readSetting(name, text) {
    const rule = RULES[name];
    const written = text.trim();
    if (OPTIONAL.has(name) && written === "") return null;
    if (!new RegExp(`^(?:${rule.pattern})$`).test(written)) throw refusal(name, rule);
    if (rule.whole) { // exact beyond 2**53, as Python's int
      const value = BigInt(written);
      const above = rule.low_open ? value > BigInt(rule.low) : value >= BigInt(rule.low);
      if (!above || (rule.high !== null && value > BigInt(rule.high))) throw refusal(name, rule);
      // A seed keeps its low 32 bits, as torch's generator does on the command line: seeds the command
      // line treats alike, the page treats alike.
      return Number(name === "seed" ? BigInt.asUintN(32, value) : value);
    }
    const value = Number(written);
    const above = rule.low_open ? value > rule.low : value >= rule.low;
    if (!Number.isFinite(value) || !above || (rule.high !== null && value > rule.high)) throw refusal(name, rule);
    return value;
  }

  function settingsFromUrl() {
    const search = new URLSearchParams(window.location.search);
    // A setting given twice takes its last value, as a repeated option does on the command line.
    const params = { has: (name) => search.has(name), get: (name) => search.getAll(name).at(-1), keys: () => search.keys() };
    if (params.has("prime")) {
      exactPrime = params.get("prime");
      input("prime").value = exactPrime;
    }
    for (const name of FIELDS) {
      if (params.has(name)) input(name).value = params.get(name);
    }
    for (const flag of ["greedy", "autorun"]) {
      if (params.has(flag) && !Object.hasOwn(FLAGS, params.get(flag))) urlProblem = `${flag} must be 1 or 0, not "${params.get(flag)}"`;
    }
    const known = new Set(["prime", ...FIELDS, "greedy", "autorun"]);
    for (const name of params.keys()) if (!known.has(name)) urlProblem = `unknown setting "${name}" in the address`;
    if (params.has("greedy")) input("greedy").checked = Object.hasOwn(FLAGS, params.get("greedy")) && FLAGS[params.get("greedy")];
    return params.has("autorun") && (urlProblem !== null || (Object.hasOwn(FLAGS, params.get("autorun")) && FLAGS[params.get("autorun")]));
  }

  function settings() {
    if (urlProblem !== null) throw new Error(urlProblem);
    const read = { prime: exactPrime !== null ? exactPrime : input("prime").value, greedy: input("greedy").checked };
    for (const name of FIELDS) read[name] = readSetting(name, input(name).value);
    if (read.length > given.max_length) {
      throw new Error(`the page writes at most ${given.max_length.toLocaleString()} characters at a time`);
    }
    return read;
  }

  // Model text is shown, never obeyed: each character a browser would act on or hide (a carriage return,
  // an escape, a bidirectional override, a zero-width or line-separator character) is drawn as its escape,
  // as charrnn's terminal views and HTML pages draw it. The character itself stays in the output's text
  // (hidden, and isolated so that no override reaches past it): the text read back is the text generated.
  const HIDDEN = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;
  function escaped(char) {
    const named = { "\r": "\\r", "\t": "\\t", "\n": "\\n" }[char];
    if (named) return named;
    const code = char.codePointAt(0);
    const hex = (width) => code.toString(16).padStart(width, "0");
    return code < 0x100 ? `\\x${hex(2)}` : code < 0x10000 ? `\\u${hex(4)}` : `\\U${hex(8)}`;
  }
  function show(text) {
    let plain = "";
    for (const char of text) {
      if (char === "\n" || char === "\t" || !HIDDEN.test(char)) {
        plain += char;
        continue;
      }
      if (plain) output.append(plain);
      plain = "";
      const mark = document.createElement("span");
      mark.className = "hidden";
      mark.dataset.shown = escaped(char);
      const raw = document.createElement("span");
      raw.className = "raw";
      raw.textContent = char;
      mark.append(raw);
      output.append(mark);
    }
    if (plain) output.append(plain);
  }

  function finish(state, message) {
    running = null;
    output.dataset.state = state;
    // A message may quote the prime's characters: shown, never obeyed, as in the output.
    status.textContent = Array.from(message, (char) => (HIDDEN.test(char) ? escaped(char) : char)).join("");
    stopButton.disabled = true;
  }

  function run() {
    let chosen;
    try {
      chosen = settings();
    } catch (error) {
      finish("error", error.message);
      return;
    }
    let characters;
    try {
      characters = generate(model, chosen.prime, chosen.length, {
        greedy: chosen.greedy, temperature: chosen.temperature, topK: chosen.top_k, topP: chosen.top_p,
        seed: chosen.seed, noRepeat: chosen.no_repeat,
      });
      output.textContent = "";
      show(chosen.prime);
      characters = { iterator: characters, first: characters.next() };
    } catch (error) {
      finish("error", error.message);
      return;
    }
    const token = {};
    running = token;
    output.dataset.state = "running";
    stopButton.disabled = false;
    const started = performance.now();
    let count = 0;
    let next = characters.first;
    function batch() {
      if (running !== token) return;
      const pieces = [];
      const until = performance.now() + 30;
      while (!next.done && performance.now() < until) {
        pieces.push(next.value);
        count++;
        next = characters.iterator.next();
      }
      show(pieces.join(""));
      const seconds = (performance.now() - started) / 1000;
      const speed = `${count.toLocaleString()} characters, ${Math.round(count / Math.max(seconds, 1e-3))} per second`;
      if (next.done) finish("done", speed);
      else {
        status.textContent = speed;
        setTimeout(batch, 0);
      }
    }
    batch();
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); urlProblem = null; run(); });
  stopButton.addEventListener("click", () => finish("done", `${status.textContent} (stopped)`));
  if (settingsFromUrl()) run();
})();
