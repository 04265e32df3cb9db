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

  const MAX_LENGTH = 1000000;
  // Strict parsing: "1e3" or "10.5" is not a length, "yes" is not a flag; each is reported, never guessed.
  const whole = (v) => (/^\s*\d+\s*$/.test(v) ? Number(v) : NaN);
  const number = (v) => (/^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$/.test(v) ? Number(v) : NaN);
  const fields = {
    prime: (v) => v,
    length: whole,
    temperature: number,
    top_k: (v) => (v === "" ? null : whole(v)),
    top_p: (v) => (v === "" ? null : number(v)),
    seed: whole,
  };
  const FLAGS = { "1": true, true: true, "0": false, false: false };
  let urlProblem = null;

  function settingsFromUrl() {
    const params = new URLSearchParams(window.location.search);
    for (const name of Object.keys(fields)) {
      if (params.has(name)) input(name).value = params.get(name);
    }
    for (const flag of ["greedy", "autorun"]) {
      if (params.has(flag) && !Object.hasOwn(FLAGS, params.get(flag))) urlProblem = `${flag} must be 1 or 0, not "${params.get(flag)}"`;
    }
    const known = new Set([...Object.keys(fields), "greedy", "autorun"]);
    for (const name of params.keys()) if (!known.has(name)) urlProblem = `unknown setting "${name}" in the address`;
    if (params.has("greedy")) input("greedy").checked = Object.hasOwn(FLAGS, params.get("greedy")) && FLAGS[params.get("greedy")];
    return params.has("autorun") && (urlProblem !== null || (Object.hasOwn(FLAGS, params.get("autorun")) && FLAGS[params.get("autorun")]));
  }

  function settings() {
    const read = {};
    for (const [name, parse] of Object.entries(fields)) read[name] = parse(input(name).value);
    read.greedy = input("greedy").checked;
    if (urlProblem !== null) throw new Error(urlProblem);
    if (!(read.length >= 1 && read.length <= MAX_LENGTH)) {
      throw new Error(`the length must be a whole number from 1 to ${MAX_LENGTH.toLocaleString()}`);
    }
    if (!read.greedy && !(read.temperature > 0)) throw new Error("the temperature must be above 0");
    if (read.top_k !== null && !(read.top_k >= 1)) throw new Error("top-k must be 1 or more");
    if (read.top_p !== null && !(read.top_p > 0 && read.top_p <= 1)) throw new Error("top-p must be in (0, 1]");
    if (!Number.isInteger(read.seed)) throw new Error("the seed must be a whole number of 0 or more");
    return read;
  }

  function finish(state, message) {
    running = null;
    output.dataset.state = state;
    status.textContent = message;
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
        seed: chosen.seed,
      });
      output.textContent = chosen.prime;
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
      output.append(pieces.join(""));
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
