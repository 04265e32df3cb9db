"""Autoregressive generation: temperature, top-k, top-p and greedy (textbook notes §4).

The prime warms the state once; then each character is one stepper step, the state carried, so the prefix is
never re-run. Several samples advance together as one batch."""

from __future__ import annotations

from collections.abc import Collection, Iterator

import torch

from charrnn.config import SampleConfig
from charrnn.data.vocab import UnknownCharactersError, Vocab, describe_chars
from charrnn.errors import CharrnnError
from charrnn.models.model import CharRNN, State
from charrnn.models.stepper import make_stepper
from charrnn.utils.terminal import require_valid_text

PRIME_CHUNK = 4096  # prime characters run through the network at once
TINY_TEMPERATURE = 1e-30  # below this, logits are divided in float64


def default_warmup(vocab: Vocab) -> str:
    """What an empty prime feeds the network: a newline, as at the start of a text, if known."""
    return "\n" if "\n" in vocab else vocab.chars[0]


def encode_prime(vocab: Vocab, prime: str) -> torch.Tensor:
    """Ids of the prime; characters outside the vocabulary are named in the error."""
    require_valid_text(prime, "prime")
    try:
        return vocab.encode(prime).long()
    except UnknownCharactersError as exc:
        unknown = describe_chars(exc.unknown)
        raise CharrnnError(f"the prime has characters the model never saw: {unknown}") from None


def extend_tail(tail: str, char: str, stop_at: str) -> tuple[str, bool]:
    """Keep the last ``len(stop_at)`` generated characters; say whether they are the stop string."""
    tail = (tail + char)[-len(stop_at):]
    return tail, tail == stop_at


def filter_logits(logits: torch.Tensor, top_k: int | None = None, top_p: float | None = None) -> torch.Tensor:
    """logits (B, V) with -inf outside the top-k and the top-p nucleus (the fewest likeliest symbols whose
    total probability reaches p; the likeliest always survives)."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        sorted_probs = torch.softmax(sorted_logits, dim=-1)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop_sorted = mass_before >= top_p
        drop_sorted[:, 0] = False  # even when p rounds to 0 in the logits' precision
        logits = logits.masked_fill(drop_sorted.scatter(-1, order, drop_sorted), float("-inf"))
    return logits


def choose_next(logits: torch.Tensor, config: SampleConfig, generator: torch.Generator) -> torch.Tensor:
    """Pick the next id for each row of logits (B, V); returns (B,) int64."""
    if config.greedy:
        return torch.argmax(logits, dim=-1)
    temperature = config.softmax_temperature
    if temperature != 1.0:
        if temperature < TINY_TEMPERATURE:
            logits = logits.double()  # float32 would round such a temperature to 0
        # Shifted so the largest logit is 0 first: a tiny temperature then sends the others to
        # -inf (probability 0) instead of overflowing them all to +inf (NaN probabilities).
        logits = (logits - logits.max(dim=-1, keepdim=True).values) / temperature
    logits = filter_logits(logits, config.top_k, config.top_p)
    return torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(1)


def make_generator(seed: int | None, device: torch.device | str = "cpu") -> torch.Generator:
    generator = torch.Generator(device=device)
    return generator.manual_seed(generator.seed() if seed is None else seed)  # seed() draws a fresh one


@torch.no_grad()
def warm_state(model: CharRNN, vocab: Vocab, prime: str, batch: int) -> tuple[torch.Tensor, State]:
    """Run the prime (or :func:`default_warmup`) for ``batch`` rows, in ``PRIME_CHUNK`` chunks so memory does
    not grow with it. Returns the last prime character's ids (B,), still to be fed, and the state before."""
    model.eval()
    device = next(model.parameters()).device
    warmup = encode_prime(vocab, prime or default_warmup(vocab))
    state = model.initial_state(batch, device)
    body = warmup[:-1]
    for start in range(0, len(body), PRIME_CHUNK):
        chunk = body[start : start + PRIME_CHUNK].to(device)
        _, state = model(chunk.unsqueeze(0).expand(batch, -1), state)
    return warmup[-1:].to(device).expand(batch), state


def generate(model: CharRNN, vocab: Vocab, config: SampleConfig, prime: str = "") -> Iterator[list[str]]:
    """Steps of one new character for each of ``config.num_samples`` (the prime is checked before this
    returns); a sample ends once it generated ``config.stop_at``, then yields ``""`` until all have ended."""
    current, state = warm_state(model, vocab, prime, config.num_samples)
    guards = None
    if config.no_repeat is not None:
        held = encode_prime(vocab, prime).tolist() if prime else []
        guards = [RepeatGuard(config.no_repeat, held) for _ in range(config.num_samples)]
    return _steps(model, vocab, config, current, state, guards)


class RepeatGuard:
    """The no-repeat rule for one text: the characters that would complete a run of ``n`` characters the
    text already holds. Every run of ``n - 1`` characters seen maps to the characters that followed it."""

    def __init__(self, n: int, ids: list[int]):
        self.n = n
        self.followers: dict[tuple[int, ...], set[int]] = {}
        self.tail: tuple[int, ...] = ()  # the last n - 1 characters
        for index in ids:
            self.add(index)

    def add(self, index: int) -> None:
        """The text goes on with character ``index``."""
        if len(self.tail) == self.n - 1:
            self.followers.setdefault(self.tail, set()).add(index)
        self.tail = (*self.tail, index)[-(self.n - 1):]

    def banned(self) -> set[int]:
        """The characters that would repeat a run of ``n``; empty before the text has ``n - 1``."""
        return self.followers.get(self.tail, set()) if len(self.tail) == self.n - 1 else set()


def repeat_followers(text: str, n: int) -> set[str]:
    """The characters that followed earlier occurrences of ``text``'s last ``n - 1`` (they would repeat a run
    of ``n``), for texts that branch or shrink, where a :class:`RepeatGuard` would have to be rebuilt."""
    width = n - 1
    tail = text[len(text) - width:] if len(text) >= width else None
    followers: set[str] = set()
    start = -1 if tail is None else text.find(tail)
    while 0 <= start < len(text) - width:
        followers.add(text[start + width])
        start = text.find(tail, start + 1)
    return followers


def banned_ids(text: str, n: int, vocab: Vocab) -> list[int]:
    """:func:`repeat_followers` of ``text``, as ids of ``vocab``."""
    return [vocab.id_of(char) for char in repeat_followers(text, n)]


def ban_repeats(logits: torch.Tensor, banned: list[Collection[int]]) -> torch.Tensor:
    """``logits`` (B, V) with each row's ``banned`` ids at -inf, unless that would ban them all (a text
    that cannot go on without repeating takes its likeliest character, as without the rule)."""
    masked = None
    for row, ids in enumerate(banned):
        if ids and len(ids) < logits.shape[-1]:
            masked = logits.clone() if masked is None else masked  # copied only when a step bans something
            masked[row, sorted(ids)] = float("-inf")
    return logits if masked is None else masked


@torch.inference_mode()
def _steps(model: CharRNN, vocab: Vocab, config: SampleConfig, current: torch.Tensor, state: State,
           guards: list[RepeatGuard] | None = None) -> Iterator[list[str]]:
    generator = make_generator(config.seed, current.device)
    stepper = make_stepper(model)
    chars, stop_at = vocab.chars, config.stop_at
    tails, finished = [""] * config.num_samples, [False] * config.num_samples
    layers = stepper.unstack(state)
    for generated in range(1, config.length + 1):
        logits, layers = stepper.step_layers(current, layers)  # (B, V)
        if guards is not None:
            logits = ban_repeats(logits, [guard.banned() for guard in guards])
        current = choose_next(logits, config, generator)  # (B,)
        chosen = current.tolist()
        if guards is not None:
            for guard, index in zip(guards, chosen, strict=True):
                guard.add(index)
        step = ["" if done else chars[i] for i, done in zip(chosen, finished, strict=True)]
        yield step
        if stop_at:
            for row, char in enumerate(step):
                if char:
                    tails[row], reached = extend_tail(tails[row], char, stop_at)
                    finished[row] = reached and generated >= config.min_length
            if all(finished):
                return


def collect_samples(steps: Iterator[list[str]], prime: str, num_samples: int) -> list[str]:
    """Join what :func:`generate` yields into ``num_samples`` texts, each starting with the prime."""
    pieces = [[prime] for _ in range(num_samples)]
    for chars in steps:
        for sample, char in zip(pieces, chars, strict=True):
            sample.append(char)
    return ["".join(sample) for sample in pieces]
