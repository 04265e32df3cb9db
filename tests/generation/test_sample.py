import pytest
import torch

from charrnn.config import SampleConfig
from charrnn.errors import CharrnnError, ConfigError
from charrnn.generation.sample import RepeatGuard, ban_repeats, collect_samples, filter_logits, generate
from charrnn.training.checkpoint import load_model

from helpers import repeated_runs, run_cli


def run(loaded, prime="ROMEO:", **options) -> list[str]:
    config = SampleConfig(**{"length": 60, **options})
    return collect_samples(generate(loaded.network, loaded.vocab, config, prime), prime, config.num_samples)


@pytest.fixture
def loaded(tiny_checkpoint):
    return load_model(tiny_checkpoint)


def test_greedy_is_top_k_one_and_matches_rerunning_the_whole_prefix(loaded):
    """The carried-state step path gives what re-reading the text from the start would."""
    assert run(loaded, top_k=1, seed=3) == run(loaded, greedy=True)
    (fast,) = run(loaded, prime="Caf", greedy=True, length=40)
    text = "Caf"
    with torch.no_grad():
        for _ in range(40):
            logits, _ = loaded.network(loaded.vocab.encode(text).long().unsqueeze(0))
            text += loaded.vocab.chars[int(logits[0, -1].argmax())]
    assert fast == text


def test_same_seed_same_text_at_the_length_asked_a_batch_independent_an_empty_prime_an_unknown_one_refused(
        loaded):
    assert run(loaded, seed=7) == run(loaded, seed=7) != run(loaded, seed=8)
    (text,) = run(loaded, prime="JULIET:", seed=1)
    assert text.startswith("JULIET:") and len(text) == len("JULIET:") + 60
    samples = run(loaded, seed=5, num_samples=4)
    assert len(samples) == 4 and len(set(samples)) > 1 and all(len(s) == len("ROMEO:") + 60 for s in samples)
    assert run(loaded, prime="", length=0) == [""]
    assert [len(text) for text in run(loaded, prime="", length=10, seed=1)] == [10]
    with pytest.raises(CharrnnError, match="never saw: 'Q'"):
        generate(loaded.network, loaded.vocab, SampleConfig(), "Q")


def test_top_k_and_top_p_masks():
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log()
    kept = lambda masked: torch.isfinite(masked[0]).tolist()  # noqa: E731
    assert kept(filter_logits(logits, top_k=2)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.8)) == [True, True, False, False]
    assert kept(filter_logits(logits, top_p=0.81)) == [True, True, True, False]
    assert kept(filter_logits(logits, top_p=0.1)) == [True, False, False, False]
    assert kept(filter_logits(logits, top_p=1.0)) == [True, True, True, True]
    shuffled = logits[:, [2, 0, 3, 1]]
    assert kept(filter_logits(shuffled, top_p=0.8)) == [False, True, False, True]


@pytest.mark.parametrize(
    ("options", "message"),
    [({"temperature": 0}, "temperature"), ({"temperature": -1}, "temperature"), ({"top_k": 0}, "top_k"),
     ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"), ({"length": -1}, "length"),
     ({"num_samples": 0}, "num_samples")],
)
def test_invalid_settings(options, message):
    with pytest.raises(ConfigError, match=message) as raised:
        SampleConfig(**options)
    assert raised.value.field == message


@pytest.mark.parametrize("prime", ["ROMEO:", "ROMEO:\n"])  # a stop string in the prime is no stop
def test_stop_at_ends_each_sample_after_the_first_occurrence_past_the_prime(loaded, prime):
    samples = run(loaded, prime=prime, seed=2, num_samples=3, length=400, stop_at="\n")
    unstopped = run(loaded, prime=prime, seed=2, num_samples=3, length=400)
    for text, whole in zip(samples, unstopped, strict=True):
        assert text == whole[: whole.index("\n", len(prime)) + 1] and len(text) > len(prime)


def test_the_repeat_guard_bans_what_would_complete_a_run_already_held():
    guard = RepeatGuard(3, [1, 2, 3, 1, 2])
    assert guard.banned() == {3}  # "1 2" was followed by 3
    guard.add(4)
    assert guard.banned() == set()  # "2 4" never came before
    logits = torch.zeros(2, 4)
    stuck = RepeatGuard(2, [0, 1, 0, 2, 0, 3, 0, 0])  # after 0, every character has followed it
    banned = ban_repeats(logits, [RepeatGuard(3, [1, 2, 3, 1, 2]).banned(), stuck.banned()])
    assert banned[0].tolist() == [0, 0, 0, float("-inf")]
    assert banned[1].tolist() == [0, 0, 0, 0]  # no way on without a repeat: the rule stands aside


@pytest.mark.parametrize("options", [{"greedy": True}, {"temperature": 0.5, "seed": 3}])
def test_no_repeat_never_completes_a_run_the_text_holds(loaded, options):
    (looping,) = run(loaded, length=300, **options)
    (guarded,) = run(loaded, length=300, no_repeat=12, **options)
    if options.get("greedy"):
        assert repeated_runs(looping, 12)  # greedy, the tiny model loops without the rule
    assert repeated_runs(guarded, 12) == []  # the prime counts too
    assert run(loaded, length=300, no_repeat=12, **options) == [guarded]  # the same seed, the same text


def test_no_repeat_is_checked_in_both_doors(tiny_checkpoint):
    with pytest.raises(ConfigError, match="no_repeat"):
        SampleConfig(no_repeat=1)
    shown = run_cli("sample", tiny_checkpoint, "--greedy", "--no-repeat", "12", "--length", "200", "--prime",
                    "ROMEO:")
    assert shown.exit_code == 0 and repeated_runs(shown.stdout.rstrip("\n"), 12) == []
    refused = run_cli("sample", tiny_checkpoint, "--no-repeat", "1")
    assert refused.exit_code == 2 and "--no-repeat" in refused.stderr
