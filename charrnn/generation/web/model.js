// charrnn's forward step and decoding, in plain JavaScript: the engine of an exported page.
//
// It mirrors charrnn/models/stepper.py and charrnn/models/layernorm.py equation for equation
// (LSTM gates i, f, g, o; GRU gates r, z, n, or z, r, n in the layer-normalised cell; Elman tanh
// or relu), reading the same tensors the PyTorch model holds, decoded from little-endian
// float32. The arithmetic is done in double precision, which rounds less than the float32 of
// the Python side, so greedy text agrees unless two characters' scores tie to about 1e-6.
// Works in a browser (a classic script) and under node (module.exports), for the unit tests.
"use strict";

function decodeTensor(tensor) {
  const bytes = typeof atob === "function"
    ? Uint8Array.from(atob(tensor.data), (ch) => ch.charCodeAt(0))
    : Uint8Array.from(Buffer.from(tensor.data, "base64"));
  // Kept as float32 (exactly the stored values, half the memory traffic of float64); the sums
  // that read them are done in float64.
  const view = new DataView(bytes.buffer);
  const values = new Float32Array(bytes.length / 4);
  for (let i = 0; i < values.length; i++) values[i] = view.getFloat32(4 * i, true);
  return { shape: tensor.shape, values };
}

// out[r] += sum_c matrix[r, from + c] * x[c], for a row-major matrix of `cols` columns and out.length
// rows. Four running sums let the processor overlap the multiply-adds (about 25% faster).
function addMatVec(out, matrix, cols, from, x) {
  const m = matrix.values;
  const n = x.length;
  const n4 = n - (n % 4);
  for (let r = 0; r < out.length; r++) {
    const base = r * cols + from;
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    let c = 0;
    for (; c < n4; c += 4) {
      s0 += m[base + c] * x[c];
      s1 += m[base + c + 1] * x[c + 1];
      s2 += m[base + c + 2] * x[c + 2];
      s3 += m[base + c + 3] * x[c + 3];
    }
    for (; c < n; c++) s0 += m[base + c] * x[c];
    out[r] += (s0 + s1) + (s2 + s3);
  }
}

const sigmoid = (v) => 1 / (1 + Math.exp(-v));
const EPSILON = 1e-5; // layer norm's, as in charrnn/models/layernorm.py

function layerNorm(a, from, size, gain, gainFrom, bias, biasFrom, out) {
  let mean = 0;
  for (let i = 0; i < size; i++) mean += a[from + i];
  mean /= size;
  let variance = 0;
  for (let i = 0; i < size; i++) variance += (a[from + i] - mean) ** 2;
  variance /= size;
  const scale = 1 / Math.sqrt(variance + EPSILON);
  for (let i = 0; i < size; i++) {
    out[i] = gain[gainFrom + i] * (a[from + i] - mean) * scale + bias[biasFrom + i];
  }
  return out;
}

class CharModel {
  constructor(spec) {
    this.config = spec.config;
    this.vocab = spec.vocab;
    this.index = new Map(spec.vocab.map((ch, i) => [ch, i]));
    this.tensors = {};
    for (const [name, tensor] of Object.entries(spec.tensors)) this.tensors[name] = decodeTensor(tensor);
    const { cell, hidden_size: H } = this.config;
    this.gates = { lstm: 4, gru: 3 }[cell] || 1;
    this.hidden = H;
  }

  initialState() {
    const H = this.hidden;
    return Array.from({ length: this.config.num_layers }, () => ({
      h: new Float64Array(H), c: this.config.cell === "lstm" ? new Float64Array(H) : null,
    }));
  }

  // Read the character with id `id` in `state`; return [logits for the next character, new state].
  step(id, state) {
    const { embed_size: E, num_layers: L, skip_connections: skips, layer_norm: normed } = this.config;
    const t = this.tensors;
    const embedded = Float64Array.from(t.embedding.values.subarray(id * E, (id + 1) * E));
    const next = [];
    let below = embedded;
    for (let k = 0; k < L; k++) {
      const layer = normed ? this.normedLayer(k, below, state[k]) : this.plainLayer(k, embedded, below, state[k]);
      next.push(layer);
      below = layer.h;
    }
    const top = skips ? concat(next.map((layer) => layer.h)) : next[L - 1].h;
    const logits = Float64Array.from(t.head_bias.values);
    addMatVec(logits, t.head_weight, top.length, 0, top);
    return [logits, next];
  }

  plainLayer(k, embedded, below, previous) {
    const t = this.tensors;
    const H = this.hidden;
    const cell = this.config.cell;
    const wih = t[`weight_ih_l${k}`];
    const inputCols = wih.shape[1];
    const gi = Float64Array.from(t[`bias_ih_l${k}`].values);
    if (k > 0 && this.config.skip_connections) {
      addMatVec(gi, wih, inputCols, 0, embedded); // the first E columns read the character
      addMatVec(gi, wih, inputCols, embedded.length, below);
    } else {
      addMatVec(gi, wih, inputCols, 0, below);
    }
    const gh = Float64Array.from(t[`bias_hh_l${k}`].values);
    addMatVec(gh, t[`weight_hh_l${k}`], H, 0, previous.h);
    const h = new Float64Array(H);
    if (cell === "lstm") {
      const c = new Float64Array(H);
      for (let u = 0; u < H; u++) {
        const i = sigmoid(gi[u] + gh[u]);
        const f = sigmoid(gi[H + u] + gh[H + u]);
        const g = Math.tanh(gi[2 * H + u] + gh[2 * H + u]);
        const o = sigmoid(gi[3 * H + u] + gh[3 * H + u]);
        c[u] = f * previous.c[u] + i * g;
        h[u] = o * Math.tanh(c[u]);
      }
      return { h, c };
    }
    if (cell === "gru") {
      for (let u = 0; u < H; u++) {
        const r = sigmoid(gi[u] + gh[u]);
        const z = sigmoid(gi[H + u] + gh[H + u]);
        const n = Math.tanh(gi[2 * H + u] + r * gh[2 * H + u]);
        h[u] = n + z * (previous.h[u] - n);
      }
      return { h, c: null };
    }
    const relu = this.config.rnn_activation === "relu";
    for (let u = 0; u < H; u++) {
      const a = gi[u] + gh[u];
      h[u] = relu ? Math.max(0, a) : Math.tanh(a);
    }
    return { h, c: null };
  }

  normedLayer(k, below, previous) {
    const t = this.tensors;
    const H = this.hidden;
    const cell = this.config.cell;
    const wih = t[`weight_ih_l${k}`];
    const whh = t[`weight_hh_l${k}`];
    const gain = t[`ln_gain_l${k}`].values;
    const bias = t[`ln_bias_l${k}`].values;
    const x = new Float64Array(this.gates * H);
    addMatVec(x, wih, wih.shape[1], 0, below);
    const scratch = new Float64Array(H);
    const h = new Float64Array(H);
    if (cell === "gru") { // gates z, r, n; the reset gate acts before the recurrent product of n
      const hzr = new Float64Array(2 * H);
      addMatVec(hzr, { values: whh.values }, H, 0, previous.h);
      const a = new Float64Array(2 * H);
      for (let i = 0; i < 2 * H; i++) a[i] = x[i] + hzr[i];
      const z = layerNorm(a, 0, H, gain, 0, bias, 0, new Float64Array(H)).map(sigmoid);
      const r = layerNorm(a, H, H, gain, H, bias, H, new Float64Array(H)).map(sigmoid);
      const resetH = previous.h.map((value, u) => r[u] * value);
      const hn = new Float64Array(H);
      addMatVec(hn, { values: whh.values.subarray(2 * H * H) }, H, 0, resetH);
      for (let u = 0; u < H; u++) hn[u] += x[2 * H + u];
      const n = layerNorm(hn, 0, H, gain, 2 * H, bias, 2 * H, scratch).map(Math.tanh);
      for (let u = 0; u < H; u++) h[u] = n[u] + z[u] * (previous.h[u] - n[u]);
      return { h, c: null };
    }
    const a = x;
    addMatVec(a, whh, H, 0, previous.h);
    if (cell !== "lstm") {
      const relu = this.config.rnn_activation === "relu";
      layerNorm(a, 0, H, gain, 0, bias, 0, scratch);
      for (let u = 0; u < H; u++) h[u] = relu ? Math.max(0, scratch[u]) : Math.tanh(scratch[u]);
      return { h, c: null };
    }
    const gate = (g, f) => layerNorm(a, g * H, H, gain, g * H, bias, g * H, new Float64Array(H)).map(f);
    const i = gate(0, sigmoid);
    const f = gate(1, sigmoid);
    const g = gate(2, Math.tanh);
    const o = gate(3, sigmoid);
    const c = new Float64Array(H);
    for (let u = 0; u < H; u++) c[u] = f[u] * previous.c[u] + i[u] * g[u];
    const cellNormed = layerNorm(c, 0, H, t[`ln_cell_gain_l${k}`].values, 0, t[`ln_cell_bias_l${k}`].values, 0,
      new Float64Array(H));
    for (let u = 0; u < H; u++) h[u] = o[u] * Math.tanh(cellNormed[u]);
    return { h, c };
  }

  // The ids of `text`, one per code point (as Python counts characters); throws naming unknown ones.
  encode(text) {
    const chars = Array.from(text);
    const unknown = [...new Set(chars.filter((ch) => !this.index.has(ch)))];
    if (unknown.length) throw new Error(`the model never saw ${unknown.map((ch) => JSON.stringify(ch)).join(", ")}`);
    return chars.map((ch) => this.index.get(ch));
  }
}

function concat(arrays) {
  const out = new Float64Array(arrays.reduce((n, a) => n + a.length, 0));
  let at = 0;
  for (const a of arrays) { out.set(a, at); at += a.length; }
  return out;
}

function argmax(values) {
  let best = 0;
  for (let i = 1; i < values.length; i++) if (values[i] > values[best]) best = i;
  return best; // the first of equal maxima, as torch.argmax
}

// A small seeded generator (mulberry32): the same seed gives the same text in every browser.
function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// The next id from `logits`: greedy, or sampled at `temperature` from the top-k and top-p nucleus,
// as charrnn.generation.sample.choose_next does.
function chooseNext(logits, options, random) {
  if (options.greedy) return argmax(logits);
  // Shifted so the largest logit is 0 first: a tiny (even subnormal) temperature then sends the others
  // to -Infinity (probability 0) instead of overflowing them all to Infinity (NaN weights).
  const largest = logits[argmax(logits)];
  const scaled = Array.from(logits, (v) => (v - largest) / options.temperature);
  const order = scaled.map((_, i) => i).sort((a, b) => scaled[b] - scaled[a]);
  let kept = options.topK ? order.slice(0, options.topK) : order;
  const top = scaled[kept[0]];
  let weights = kept.map((i) => Math.exp(scaled[i] - top));
  if (options.topP && options.topP < 1) {
    const total = weights.reduce((s, w) => s + w, 0);
    let before = 0;
    let keep = 0;
    while (keep < weights.length && (keep === 0 || before < options.topP * total)) before += weights[keep++];
    kept = kept.slice(0, keep);
    weights = weights.slice(0, keep);
  }
  let draw = random() * weights.reduce((s, w) => s + w, 0);
  for (let j = 0; j < kept.length; j++) {
    draw -= weights[j];
    if (draw <= 0) return kept[j];
  }
  return kept[kept.length - 1];
}

// The no-repeat rule, as charrnn.generation.sample.RepeatGuard: every run of n - 1 ids seen maps to the
// ids that followed it, and the ids that would complete a run of n the text already holds are banned.
function repeatGuard(n, ids) {
  const followers = new Map();
  let tail = [];
  const guard = {
    add(id) {
      if (tail.length === n - 1) {
        const key = tail.join(",");
        if (!followers.has(key)) followers.set(key, new Set());
        followers.get(key).add(id);
      }
      tail = [...tail, id].slice(-(n - 1));
    },
    banned() {
      return tail.length === n - 1 ? followers.get(tail.join(",")) || new Set() : new Set();
    },
  };
  for (const id of ids) guard.add(id);
  return guard;
}

// `logits` with the banned ids at -Infinity, unless that would ban them all (the rule stands aside).
function banRepeats(logits, banned) {
  if (banned.size === 0 || banned.size >= logits.length) return logits;
  const allowed = Float64Array.from(logits);
  for (const id of banned) allowed[id] = -Infinity;
  return allowed;
}

// Yield `length` characters after `prime`, reading the prime first (an empty prime reads a newline,
// as at the start of a text, or the first character when the vocabulary has no newline).
function* generate(model, prime, length, options) {
  const warmup = prime || (model.index.has("\n") ? "\n" : model.vocab[0]);
  let state = model.initialState();
  let logits = null;
  for (const id of model.encode(warmup)) [logits, state] = model.step(id, state);
  const random = seededRandom(options.seed || 0);
  // The rule reads the prime as given (not the newline an empty prime is warmed with), as on the command line.
  const guard = options.noRepeat ? repeatGuard(options.noRepeat, model.encode(prime)) : null;
  for (let n = 0; n < length; n++) {
    const id = chooseNext(guard ? banRepeats(logits, guard.banned()) : logits, options, random);
    if (guard) guard.add(id);
    yield model.vocab[id];
    [logits, state] = model.step(id, state);
  }
}

if (typeof module !== "undefined") module.exports = { CharModel, generate, chooseNext, argmax, seededRandom, repeatGuard };
