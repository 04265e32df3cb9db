"""Options shared by the commands, help in named groups, and the advanced ``-o NAME VALUE`` settings.
An option bound to a configuration field takes its name, default and help from the dataclass, so they
never disagree; the dataclass checks the value. Nothing here imports torch."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import click

from charrnn.config import (
    EVAL_WARMUP,
    SAMPLING_RULES,
    DynamicConfig,
    ModelConfig,
    SampleConfig,
    TrainConfig,
    field_help,
    read_setting,
)

Decorator = Callable[[Any], Any]
BUDGET_NOTE = "a --time-budget run picks its own"
# Settings most runs never touch: -o NAME VALUE, listed at the end of train --help.
ADVANCED = ("init", "forget_bias", "rnn_activation", "layer_norm", "spectral_radius", "recurrent_density",
            "locked_dropout", "input_dropout", "embed_dropout", "min_lr_ratio", "muon_lr", "warmup_steps",
            "clip_mode", "max_bad_steps", "save_every", "val_frac", "val_max_chars", "eval_chars")
# What an -o setting whose field defaults to None does when not given, where "none" would not say.
ADVANCED_DEFAULTS = {"eval_chars": "the whole validation split"}


def _owner(name: str) -> type:
    return ModelConfig if name in ModelConfig.__dataclass_fields__ else TrainConfig


def _typed(name: str, text: str) -> Any:
    """``text`` as the type of field ``name``: a number, true/false, none (where allowed), or a word."""
    field = _owner(name).__dataclass_fields__[name]
    default, lowered = field.default, text.strip().lower()
    # A number's type: the default's, or for a field that defaults to None, its declared one.
    number = type(default) if default is not None else int if str(field.type).startswith("int") else float
    if lowered == "none" and "None" in str(field.type):
        return None
    try:
        if isinstance(default, bool):
            return {"true": True, "yes": True, "on": True, "1": True,
                    "false": False, "no": False, "off": False, "0": False}[lowered]
        if isinstance(default, int | float) or default is None:
            return number(text)
    except (KeyError, ValueError):
        kind = "true or false" if isinstance(default, bool) else \
            "a whole number" if number is int else "a number"
        raise click.BadParameter(f"{text!r} is not {kind}", param_hint=f"'-o {name}'") from None
    return text


def parse_advanced(pairs: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """``-o`` pairs as typed values; the configuration dataclass then checks them."""
    for index, (name, _) in enumerate(pairs):
        if name not in ADVANCED:
            raise click.BadParameter(f"{name!r} is not one of {', '.join(ADVANCED)}", param_hint="'-o'")
        if any(name == earlier for earlier, _ in pairs[:index]):
            raise click.BadParameter(f"{name} is given twice", param_hint="'-o'")
    return {name: _typed(name, text) for name, text in pairs}


# The library's parameters that a command fills from one of its own under another name.
API_ALIASES = {"file": "text_file", "run_dir": "checkpoints"}


def option_namer(command: click.Command | None) -> Callable[[str], str]:
    """How the command line names a library parameter: its flag (``max_steps`` → ``--max-steps``),
    an argument's metavar, or ``-o name`` for an advanced setting."""
    flags = {param.name: param.opts[0] if isinstance(param, click.Option) else param.human_readable_name
             for param in (_params(command) if command is not None else [])}
    return lambda name: flags.get(name) or flags.get(API_ALIASES.get(name, "")) or (
        f"-o {name}" if "advanced" in flags else name)


def _params(command: click.Command) -> list[click.Parameter]:
    """A command's parameters; a group's (``charrnn data``) are its commands' too, which it ran."""
    nested = command.commands.values() if isinstance(command, click.Group) else ()
    return [*command.params, *(param for each in nested for param in _params(each))]


class GroupedOption(click.Option):
    """An option that names the help group it is listed under."""

    def __init__(self, *args: Any, group: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.group = group


class GroupedCommand(click.Command):
    """A command whose --help lists its options by group, in order of first appearance; ``-o``'s come last."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx) if isinstance(param, click.Option) else None
            if record is not None:
                groups.setdefault(getattr(param, "group", None) or "other", []).append(record)
        groups["other"] = groups.pop("other", [])  # --help, and any option of no group, come last
        if "advanced" in groups:
            for name in ADVANCED:
                default = _owner(name).__dataclass_fields__[name].default
                shown = str(default).lower() if isinstance(default, bool | None) else \
                    f"{default:,}" if isinstance(default, int) else default
                shown = ADVANCED_DEFAULTS.get(name, shown)
                groups["advanced"].append((f"  {name}", f"{field_help(_owner(name), name)}  "
                                                        f"[default: {shown}]"))
        for name, records in groups.items():
            with formatter.section(name.capitalize()):
                formatter.write_dl(records)


SHIPPED_NOTE = ("A checkpoint is a file, a run directory (meaning its best.pt), a model folder (export "
                "--format safetensors), or shakespeare: the model that comes with charrnn (a file or "
                "directory named shakespeare in the current directory comes first).")


def reads_checkpoints(command: Callable[..., Any]) -> Callable[..., Any]:
    """Ends a command's help with what a checkpoint argument may be (place below ``click.command``)."""
    command.__doc__ = f"{inspect.cleandoc(command.__doc__ or '')}\n\n{SHIPPED_NOTE}"
    return command


def option(*decls: str, group: str | None = None, default_text: str | None = None,
           **kwargs: Any) -> Decorator:
    """A click option listed under ``group``; ``default_text`` says what happens when it is not given."""
    if default_text is not None:
        kwargs["help"] = f"{kwargs.get('help', '')}  [default: {default_text}]"
        kwargs["show_default"] = False
    return click.option(*decls, cls=GroupedOption, group=group, **kwargs)


def config_option(flag: str, source: type, name: str, group: str | None = None, *, budget: bool = False,
                  **kwargs: Any) -> Decorator:
    """An option bound to field ``name`` of dataclass ``source``: its name, default and help. ``budget``: a
    time budget chooses this field when it is not given, and the help says so."""
    default = kwargs.pop("default", source.__dataclass_fields__[name].default)
    kwargs.setdefault("help", field_help(source, name))
    if isinstance(default, bool) and "/" not in flag:
        kwargs.setdefault("is_flag", True)
    if budget:
        kwargs["default_text"] = f"{'off' if default is False else default}; {BUDGET_NOTE}"
    else:
        kwargs.setdefault("show_default", default is not None and not isinstance(default, bool))
    return option(flag, name, default=default, group=group, **kwargs)


def stacked(options: list[Decorator]) -> Decorator:
    """One decorator applying ``options`` so that --help lists them in this order."""
    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for each in reversed(options):
            command = each(command)
        return command

    return apply


def device_option(default: str, group: str = "hardware") -> Decorator:
    """Where the model runs, and with how many CPU threads. Whole-text work defaults to auto; commands that
    step one character at a time default to cpu, where those latency-bound steps run well."""
    return stacked([
        option("--device", type=click.Choice(["auto", "cpu", "cuda", "mps"]), default=default,
               show_default=True, group=group,
               help="Where the model runs; auto picks cuda when a GPU is present, else cpu."),
        threads_option(group),
    ])


def threads_option(group: str = "hardware") -> Decorator:
    return option("--threads", type=int, default=None, group=group, metavar="N",
                  help="CPU threads torch runs with (default: OMP_NUM_THREADS when set, else the cores no "
                       "other program is busy on: a thread on a busy core slows every other).")


class SettingText(click.ParamType):
    """A sampling setting read as the exported page reads it, by its rule (config.SAMPLING_RULES): the
    same text is accepted, or refused with the same words, in both."""

    def __init__(self, setting: str):
        self.setting = setting
        self.name = "integer" if SAMPLING_RULES[setting].grammar == "whole" else "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, int | float) and not isinstance(value, bool):  # a default, already a value
            return value
        return read_setting(self.setting, value)


def sampling_options(length: int, seed: str | None = None) -> Decorator:
    """The decoding options ``sample`` and ``compare`` share (fields of SampleConfig), and the prime."""
    decoding = functools.partial(config_option, source=SampleConfig, group="decoding")
    return stacked([
        decoding("--length", name="length", default=length, type=SettingText("length")),
        decoding("--temperature", name="temperature", type=SettingText("temperature"),
                 default_text=f"{SampleConfig().softmax_temperature:g}"),
        decoding("--top-k", name="top_k", type=SettingText("top_k")),
        decoding("--top-p", name="top_p", type=SettingText("top_p")),
        decoding("--greedy", name="greedy"),
        decoding("--seed", name="seed", type=SettingText("seed"),
                 **({"default_text": seed, "help": "The same seed for every checkpoint."} if seed else {})),
        decoding("--beam-width", name="beam_width", type=int),
        decoding("--no-repeat", name="no_repeat", type=SettingText("no_repeat"), metavar="N"),
        decoding("--stop-at", name="stop_at"),
        option("--prime", group="prime", help="Text to warm the model with; the output starts with it."),
        option("--prime-file", type=click.Path(), group="prime", help="Read the prime from a UTF-8 file."),
    ])


def dynamic_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """--dynamic and its settings, shared by eval-perplexity and compare (unset: DynamicConfig's defaults)."""
    scoring = functools.partial(option, group="scoring")
    defaults = DynamicConfig()
    return stacked([
        scoring("--dynamic", is_flag=True,
                help="Also score by dynamic evaluation: adapt a copy of the model to the text as it is "
                     "read."),
        scoring("--dynamic-lr", type=float, default_text=f"{defaults.learning_rate:g}",
                help=field_help(DynamicConfig, "learning_rate")),
        scoring("--dynamic-decay", type=float, default_text=f"{defaults.decay:g}",
                help=field_help(DynamicConfig, "decay")),
        scoring("--segment-len", type=int, default_text=str(defaults.segment_len),
                help=field_help(DynamicConfig, "segment_len")),
    ])(command)


def single_stream_option(group: str = "scoring") -> Decorator:
    """--single-stream, shared by every command that scores a text."""
    return option("--single-stream", is_flag=True, group=group,
                  help="Read the text as one stream, in order, the state carried throughout: the exact "
                       "score, slower. By default it is read as many streams side by side, each after a "
                       f"warm-up of the {EVAL_WARMUP} characters before it (within 1e-4 nats/char of the "
                       "exact score on the models measured).")


def skip_unknown_option(group: str = "scoring") -> Decorator:
    """--skip-unknown, shared by every command that scores a text the user gives."""
    return option("--skip-unknown", is_flag=True, group=group,
                  help="Drop the text's characters outside a model's vocabulary and score the rest (without "
                       "it, such a text is refused).")


def given_options(ctx: click.Context, values: dict[str, Any]) -> dict[str, Any]:
    """Those of ``values`` the command line set, not left at their defaults."""
    return {key: value for key, value in values.items()
            if ctx.get_parameter_source(key) is not click.core.ParameterSource.DEFAULT}


def json_option(help: str = "Print one JSON object for scripts.") -> Decorator:
    return option("--json", "as_json", is_flag=True, help=help, group="output")
