"""Messages are final where they are raised, each option named as the caller spells it."""

import threading

import pytest
from click.testing import CliRunner

import charrnn
from charrnn.cli.main import cli
from charrnn.errors import CharrnnError, ConfigError, OptionConflict, option, options_spelled


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def test_python_names_an_option_by_its_parameter_and_a_block_by_its_own_spelling_until_it_ends():
    assert option("max_steps") == "max_steps"
    with options_spelled(flag):
        assert option("max_steps") == "--max-steps"
        with options_spelled(str.upper):
            assert option("max_steps") == "MAX_STEPS"
        assert option("max_steps") == "--max-steps"
    assert option("max_steps") == "max_steps"
    seen = []
    with options_spelled(flag):  # another thread names options as Python does
        worker = threading.Thread(target=lambda: seen.append(option("max_steps")))
        worker.start()
        worker.join()
    assert seen == ["max_steps"]
    with pytest.raises(CharrnnError), options_spelled(flag):  # a failure inside the block restores it
        raise CharrnnError(f"{option('out_dir')} is bad")
    assert option("out_dir") == "out_dir"


def test_the_message_is_spelled_when_raised_and_braces_are_plain_text():
    with options_spelled(flag):
        error = ConfigError("must be at least 1", "max_steps")
        conflict = OptionConflict(f"{option('greedy')} is deterministic; {{seed}} in a path stays {{seed}}")
    assert str(error) == "--max-steps must be at least 1" and error.problem == "must be at least 1"
    assert str(conflict) == "--greedy is deterministic; {seed} in a path stays {seed}"
    assert error.field == "max_steps" and conflict.field is None


def test_a_path_with_braces_is_shown_as_it_is_through_either_door(small_corpus, tmp_path):
    missing = tmp_path / "{out_dir}" / "{{x}}.txt"
    printed = CliRunner().invoke(cli, ["train", str(missing), "--max-steps", "1"])
    assert printed.exit_code != 0 and str(missing) in printed.stderr
    with pytest.raises(CharrnnError) as raised:
        charrnn.train(missing, max_steps=1)
    assert str(missing) in str(raised.value)


def test_the_command_line_leaves_python_callers_their_own_names(small_corpus, tiny_checkpoint, tmp_path):
    printed = CliRunner().invoke(cli, ["train", str(small_corpus), "--max-steps", "0"])
    assert "'--max-steps': must be at least 1" in printed.stderr
    with pytest.raises(ConfigError, match="^max_steps must be at least 1$"):
        charrnn.train(small_corpus, out_dir=tmp_path / "run", max_steps=0)
    with pytest.raises(OptionConflict, match="^greedy is deterministic; seed does not apply$"):
        charrnn.load(tiny_checkpoint).sample(greedy=True, seed=3)  # the command line's: test_api.REFUSALS


@pytest.mark.parametrize(("args", "shown"), [
    (["eval-perplexity", "{checkpoint}", ""], "Error: Invalid value for 'TEXT_FILE': must not be empty"),
    (["compare", "", "--evolution"], "Error: Invalid value for 'CHECKPOINTS': must not be empty"),
    (["export", "{checkpoint}", "--output", "page.html", "--title", "\udcff"],
     "Error: Invalid value for '--title': is not valid UTF-8 (byte 0xff) at character 0"),
    (["train", "{corpus}", "--sample-every", "5", "--sample-prime", "a\udcff", "--max-steps", "5"],
     "Error: Invalid value for '--sample-prime': is not valid UTF-8 (byte 0xff) at character 1"),
])
def test_an_argument_is_named_as_the_command_spells_it(tiny_checkpoint, small_corpus, tmp_path, monkeypatch,
                                                        args, shown):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    given = [arg.format(checkpoint=tiny_checkpoint, corpus=small_corpus) for arg in args]
    printed = CliRunner().invoke(cli, given)
    assert printed.exit_code == 2 and printed.stderr.startswith(shown), printed.output
    assert len(printed.stderr.splitlines()) == 1 and list(work.iterdir()) == []


def test_a_missing_text_file_is_named_as_the_command_spells_it(tiny_checkpoint, tmp_path):
    missing = tmp_path / "missing.txt"
    printed = CliRunner().invoke(cli, ["eval-perplexity", str(tiny_checkpoint), str(missing)])
    assert printed.exit_code == 1
    assert printed.stderr == f"Error: TEXT_FILE {missing} does not exist\n"
