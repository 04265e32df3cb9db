"""What a training request is, checked as it is made: before any download, checkpoint or corpus is
read, and before torch is imported (docs/how-it-works.md)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charrnn.config import ModelConfig, TrainConfig
from charrnn.errors import ConfigError, OptionConflict, option
from charrnn.utils.threads import check_threads

SAMPLE_SETTINGS = ("sample_length", "sample_prime", "sample_temperature", "sample_seed")
MODEL_FIELDS = frozenset(f.name for f in dataclasses.fields(ModelConfig))
TRAIN_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainConfig))
NOT_OPTIONS = frozenset({"vocab_size", "out_dir", "device", "init_from"})  # set by the request or the corpus
OPTION_FIELDS = (MODEL_FIELDS | TRAIN_FIELDS) - NOT_OPTIONS


@dataclass
class TrainingRequest:
    """What the user asked for. Only the options they gave: the plan fills in the rest."""

    corpus: Path | None  # a UTF-8 file or a directory of *.txt; None when resuming from the saved path
    options: dict[str, Any] = field(default_factory=dict)  # ModelConfig and TrainConfig fields given
    out_dir: Path | None = None  # run directory; None: checkpoints/<corpus name>, or the resumed run's
    overwrite: bool = False  # replace a run already in out_dir
    resume: Path | None = None  # continue the run that wrote this checkpoint (or run directory's last.pt)
    init_from: Path | None = None  # fine-tune from this checkpoint's weights (or run directory's best.pt)
    extend_vocab: bool = False  # with init_from: add the corpus's new characters to the vocabulary
    device: str = "cpu"  # the torch device; "auto" until the plan resolves it
    corpus_name: str | None = None  # the run's corpus name; None: the corpus file's stem
    data_dir: Path | None = None  # where the built-in corpus is kept, for a run given no corpus
    threads: int | None = None  # CPU threads; None: the cores no other program is busy on (utils.threads)

    def __post_init__(self) -> None:
        _check(self)


def _check(request: TrainingRequest) -> None:
    """The checks that need nothing but the request itself (cheap: made before any download)."""
    unknown = sorted(set(request.options) - OPTION_FIELDS)
    if unknown:
        raise ConfigError(f"unknown training option {unknown[0]!r}; the options are the fields of "
                          f"ModelConfig and TrainConfig except {', '.join(sorted(NOT_OPTIONS))}")
    check_threads(request.threads)
    if request.init_from is not None and request.resume is not None:
        raise OptionConflict(f"{option('init_from')} starts a new run and {option('resume')} continues one: "
                             f"give one of them")
    if request.extend_vocab and request.init_from is None:
        raise OptionConflict(f"{option('extend_vocab')} goes with {option('init_from')}")
    if request.data_dir is not None and (request.corpus is not None or request.resume is not None):
        raise OptionConflict(f"{option('data_dir')} keeps the built-in corpus, used only when no corpus is "
                             f"given")
    # Each value is checked by its dataclass now, before a download, a checkpoint or a corpus is read.
    model_options, train_options = split_options(request.options)
    model = ModelConfig(vocab_size=1, **model_options)
    # "auto" may yet mean a GPU: what needs the device itself is checked again once the plan resolves it.
    device = "cuda" if request.device == "auto" else request.device
    config = TrainConfig(out_dir=".", device=device, **train_options)
    _refuse_ignored(request.options, model, config)
    if request.resume is None and config.sample_every is None and not config.save_epochs:
        for name in SAMPLE_SETTINGS:
            if name in request.options:
                raise OptionConflict(f"{option(name)} shapes the samples recorded while training: it goes "
                                     f"with {option('sample_every')} (or {option('save_epochs')})")


def _refuse_ignored(given: dict[str, Any], model: ModelConfig, config: TrainConfig) -> None:
    """Refuse, not ignore, an option the rest of the request makes do nothing. A resume or fine-tune is
    checked with the default cell unless one is given; the plan checks the checkpoint's."""
    if "rnn_activation" in given and model.cell != "rnn":
        raise OptionConflict(f"{option('rnn_activation')} is the nonlinearity of {option('cell')} rnn; "
                             f"{model.cell} has its own")
    if "init" in given and model.cell == "esn" and model.init != "esn":
        raise OptionConflict(f"{option('cell')} esn draws its reservoir with the esn scheme: "
                             f"{option('init')} {model.init} does not apply")
    if given.get("skip_connections") and model.num_layers == 1:
        raise OptionConflict(f"{option('skip_connections')} links the layers of a stack: one layer "
                             f"({option('num_layers')} 1) has none to link")
    if "forget_bias" in given and model.cell != "lstm":
        raise OptionConflict(f"{option('forget_bias')} sets the LSTM's forget gate; {option('cell')} "
                             f"{model.cell} has none")
    esn = model.cell == "esn" or model.init == "esn"
    for name in ("spectral_radius", "recurrent_density"):
        if name in given and not esn:
            raise OptionConflict(f"{option(name)} shapes an echo-state reservoir: it goes with "
                                 f"{option('cell')} esn or {option('init')} esn")
    if given.get("locked_dropout") and model.dropout == 0 and model.input_dropout == 0 and \
            config.time_budget is None:  # (a budget may choose a dropout)
        raise OptionConflict(f"{option('locked_dropout')} locks the dropout masks across time: with "
                             f"{option('dropout')} 0 and {option('input_dropout')} 0 there is no dropout to "
                             f"lock")
    if "clip_mode" in given and config.clip == 0:
        raise OptionConflict(f"{option('clip_mode')} does nothing with {option('clip')} 0 (clipping off)")


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The options that are ModelConfig fields, and those that are TrainConfig fields (new dicts)."""
    return ({k: v for k, v in options.items() if k in MODEL_FIELDS},
            {k: v for k, v in options.items() if k in TRAIN_FIELDS})
