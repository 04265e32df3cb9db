"""How ``charrnn eval-perplexity`` and ``charrnn compare`` look: scores, comparisons, the evolution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from charrnn.cli.display import key_value_table, shown_text
from charrnn.config import COPY_MIN_CHARS
from charrnn.utils.terminal import checkpoint_labels, format_epoch, format_score, one_line

if TYPE_CHECKING:  # result types, named for their readers; importing them would import torch
    from charrnn.analysis.compare import CheckpointReport


SIDE_BY_SIDE_MIN_COLUMN = 32  # narrower than this per checkpoint, panels are stacked instead


def evolution_table(evolution: Any) -> Table:
    """``compare --evolution``: one row per recorded sample (an :class:`charrnn.api.Evolution`)."""
    from charrnn.api import EVOLUTION_VAL_NOTE

    table = Table(title=Text(f"samples while training: {one_line(str(evolution.run_dir))}"), show_lines=True,
                  caption=EVOLUTION_VAL_NOTE)
    for column in ("step", "epoch", "val nats/char"):
        table.add_column(column, justify="right")
    table.add_column("sample")
    for row in evolution.rows:
        loss = "" if row.val_loss is None else f"{row.val_loss:.4f}"
        table.add_row(f"{row.step:,}", f"{row.epoch:g}", loss, shown_text(row.prime + row.text))
    return table


def score_table(result: Any) -> Table:
    """``charrnn eval-perplexity``'s table (``result``: :class:`charrnn.api.TextScore`)."""
    rows = {"text": result.text, "nats/char": f"{result.nats_per_char:.4f}",
            "bits/char": f"{result.bits_per_char:.4f}", "perplexity": f"{result.perplexity:.4f}"}
    if (dynamic := result.dynamic) is not None:
        settings = result.dynamic_settings
        rows.update({"dynamic nats/char": f"{dynamic.nats_per_char:.4f} "
                                          f"({dynamic.nats_per_char - result.nats_per_char:+.4f})",
                     "dynamic bits/char": f"{dynamic.bits_per_char:.4f}",
                     "dynamic settings": f"lr {settings.learning_rate:g}, decay {settings.decay:g}, "
                                         f"segments of {settings.segment_len}"})
    rows.update({"characters scored": f"{result.chars:,}", "time": f"{result.seconds:.1f} s"})
    return key_value_table("perplexity", rows)


def _report_rows(report: CheckpointReport) -> dict[str, str]:
    rows = {"run": report.run, "epoch": format_epoch(report.epoch),
            "steps": f"{report.step:,}" if report.step is not None else "n/a",
            "nats/char": format_score(report.nats_per_char), "bits/char": format_score(report.bits_per_char),
            "perplexity": format_score(report.perplexity, 3),
            # Scores of texts that differ (each model's own split, or a text less what each cannot read).
            "chars scored": f"{report.chars:,}" if report.chars is not None else "n/a"}
    if report.dynamic is not None:
        rows["dynamic nats/char"] = format_score(report.dynamic["nats_per_char"])
    if report.log_prob is not None:
        rows["beam log-prob"] = f"{report.log_prob:.4f}"
    if (figures := report.memorisation) is not None:  # the longest copied passage quoted
        known = figures["known_word_fraction"]
        where = f" (line {figures['longest_copied_line']:,})" if figures["longest_copied_line"] else ""
        rows.update({"known words": "n/a" if known is None else f"{known:.1%}",
                     "longest copy": f"{figures['longest_copied_chars']} chars{where}",
                     f"copied (runs ≥ {COPY_MIN_CHARS})": f"{figures['copied_fraction']:.1%}",
                     "copied passage": repr(figures["longest_copied_passage"])})
    if report.error:
        rows["problem"] = report.error
    return rows


def comparison_renderable(reports: list[CheckpointReport], width: int):
    """A side-by-side table, or stacked panels when the terminal is too narrow for one."""
    labels = checkpoint_labels(reports)
    if width >= 14 + SIDE_BY_SIDE_MIN_COLUMN * len(reports):
        table = Table(show_lines=True)
        table.add_column("", style="bold")
        for label in labels:
            table.add_column(Text(label), overflow="fold")
        all_rows = [_report_rows(report) for report in reports]
        for key in dict.fromkeys(key for rows in all_rows for key in rows):
            table.add_row(key, *(Text(rows.get(key, "")) for rows in all_rows))
        table.add_row("sample", *(shown_text(report.sample or "") for report in reports))
        return table
    panels = []
    for report, label in zip(reports, labels, strict=True):
        summary = "  ".join(f"{key} {value}" for key, value in _report_rows(report).items())
        panels.append(Panel(Group(Text(summary, style="bold"), Text(""), shown_text(report.sample or "")),
                            title=Text(label), title_align="left"))
    return Group(*panels)
