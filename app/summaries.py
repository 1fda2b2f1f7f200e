"""What ``index``, ``index-info``, ``delete``, ``rerank`` and ``eval sts`` print for a person: a few
short lines (what changed, counts, the index type and why, time and rate, sizes in MB, sources by
file name), the full detail being their ``--json``. Figures of ranking (MAP, AvgRec, MRR) are
x100 here, as in every table askalike prints; correlations are fractions (Pearson r 0.831).

Each function returns plain lines; the commands print them through ``printable``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from askalike.core.model_dir import SHIPPED_MODELS, SHIPPED_MODELS_DIR
from askalike.indexer.layout import default_database_url
from askalike.indexer.source_identity import source_labels

if TYPE_CHECKING:
    from askalike.indexer.build import IndexReport

SOURCES_NAMED = 5  # sources a summary names (--json lists them all)
PERCENT_FIGURES = ("map", "avgrec", "mrr")  # ranking figures shown x100 (MRR already is)


def model_label(model: str) -> str:
    """A model as a person calls it: ``fast``/``accurate`` for the shipped ones, else as given."""
    path = Path(model)
    return path.name if path.parent == SHIPPED_MODELS_DIR and path.name in SHIPPED_MODELS else model


def megabytes(size: int) -> str:
    if size >= 1e6:
        return f"{size / 1e6:,.1f} MB"
    return f"{size / 1e6:.2f} MB" if size >= 5e3 else "< 0.01 MB"


def duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s" if seconds >= 1 else f"{seconds:.2f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


def counted(items: Mapping[str, int], limit: int = SOURCES_NAMED) -> str:
    """``name count`` pairs of sources by name (their file names, with as many folders as tell
    two of one name apart: ``source_labels``), the first ``limit`` and how many more."""
    labels = source_labels(items)
    named = [f"{labels[name]} ({count:,})" for name, count in list(items.items())[:limit]]
    more = len(items) - len(named)
    return ", ".join(named) + (f" and {more:,} more" if more else "")


def plural(count: int, word: str) -> str:
    return f"{count:,} {word}" + ("" if count == 1 else "s")


def _changes(report: IndexReport) -> str:
    skipped = len(report.skipped)
    if report.dry_run:
        parts = [(report.added, "to add"), (report.reembedded, "to embed again (text changed)"),
                 (report.metadata_updated, "to update (metadata only)"), (report.removed, "to remove"),
                 (skipped, "bad rows to skip" if skipped > 1 else "bad row to skip"),
                 (report.unchanged, "unchanged")]
    else:
        parts = [(report.added, "added"), (report.reembedded, "embedded again (text changed)"),
                 (report.metadata_updated, "updated (metadata only)"), (report.removed, "removed"),
                 (skipped, "bad rows skipped" if skipped > 1 else "bad row skipped"),
                 (report.unchanged, "unchanged")]
    parts.append((report.excluded, "left out (deleted with --exclude)"))
    parts.append((report.renamed, "given the ids made from text now (see the warning)"))
    said = [f"{count:,} {what}" for count, what in parts if count]
    return ", ".join(said) if said else "nothing to do"


def index_summary(report: IndexReport) -> list[str]:
    """An index run (or a dry run) in three lines."""
    kind = f"{report.index_type} index ({report.index_type_reason})"
    if report.dry_run:
        head = (f"Dry run, nothing written: {report.index_dir} would hold "
                f"{plural(report.total, 'question')}; {kind}")
    else:
        head = f"{report.index_dir}: {plural(report.total, 'question')}; {kind}"
    read = f"read {plural(report.read, 'question')}"
    if len(report.sources) == 1:
        read += f" from {Path(next(iter(report.sources))).name}"
        if report.replaced:
            read += f" (in place of {Path(report.replaced).name})"
    elif report.sources:
        read += f" from {counted(report.sources)}"
    lines = [head, f"{read}: {_changes(report)}"]
    embedded = report.added + report.reembedded
    model = model_label(report.model) if report.model else "the index's own"
    if embedded and not report.dry_run:
        lines.append(f"embedded {plural(embedded, 'question')} in {duration(report.embed_seconds)} "
                     f"({report.questions_per_s:,.0f} a second) with model {model}")
    else:
        lines.append(f"model {model}")
    return lines


def info_summary(info: Mapping[str, Any]) -> list[str]:
    """``index-info`` in four lines."""
    parameters = ", ".join(f"{name} {value}" for name, value in info["parameters"].items()
                           if name != "chosen_for")
    state = ("up to date" if info["up_to_date"]
             else "the index files are behind the database: run `askalike check`")
    sources = info["sources"]
    updated = datetime.fromisoformat(info["updated_at"]).strftime("%Y-%m-%d %H:%M %Z").strip()
    return [
        f"{info['index']}: {plural(info['questions'], 'question')}; {info['index_type']} index"
        + (f" ({parameters})" if parameters else "") + f", {state}",
        f"{plural(len(sources), 'source')}: {counted(sources)}" if sources else "no sources",
        f"model {model_label(info['model'])} ({info['dimensions']} dimensions, weights {info['weights']})",
        f"{megabytes(info['directory_bytes'])} on disk (FAISS {megabytes(info['faiss_bytes'])}), "
        f"{_database(info['index'], info['database'])}, updated {updated}",
    ]


def _database(index_dir: str, url: str) -> str:
    own = url == default_database_url(Path(index_dir))
    return "its own SQLite database" if own else f"database {url}"


def delete_summary(index_dir: str, deleted: int, excluded: bool) -> list[str]:
    if excluded:
        return [f"{index_dir}: deleted {plural(deleted, 'question')}, kept out of later index runs "
                "of their source files"]
    return [f"{index_dir}: deleted {plural(deleted, 'question')}",
            "a question from a source file comes back when that file is indexed again while it holds "
            "it: take it out of the file too, or delete with --exclude (one written through the API "
            "stays deleted)"]


def ranking_figures(figures: Mapping[str, float], prefix: str = "") -> str:
    """MAP, AvgRec and MRR, all x100 (the JSON keeps the scorer's scales: fractions, MRR x100)."""
    shown = {name: figures[prefix + name] * (1 if name == "mrr" else 100) for name in PERCENT_FIGURES}
    return f"MAP {shown['map']:.2f}, AvgRec {shown['avgrec']:.2f}, MRR {shown['mrr']:.2f}"


def rerank_summary(summary: Mapping[str, Any], model: str) -> list[str]:
    lines = [f"reranked the related questions of {plural(summary['questions'], 'original question')} "
             f"with {model_label(model)} ({summary['mode']}): {plural(summary['predictions'], 'prediction')} "
             f"written to {summary['out']}"]
    if "map" in summary:
        lines.append(f"{ranking_figures(summary)} (x100); in the input's order "
                     f"{ranking_figures(summary, 'ir_')}")
    return lines


def sts_summary(figures: Mapping[str, Any], model: str) -> list[str]:
    how = "tuned on STSb train" if figures["tuned"] else "raw"
    genres = ", ".join(f"{genre} {values['pearson']:.3f}" for genre, values in figures["genres"].items())
    return [f"STS Benchmark {figures['split']} ({how}), {model_label(model)}: Pearson r "
            f"{figures['pearson']:.3f}, Spearman {figures['spearman']:.3f} over {figures['n']:,} pairs",
            f"Pearson r by genre: {genres}"]


_HELD_OUT_FIGURES = (("dev_ranking_accuracy", "pair ranking accuracy", "{:.4f}"),
                     ("dev_pearson", "Pearson r", "{:.3f}"),
                     ("dev_top1", "alike partner nearest", "{:.1%}"))


def tune_summary(record: Mapping[str, Any], out: str) -> list[str]:
    """What was learned from what, the held-out figures before and after, and where the model is.
    A record of a run finished before scores, teachers or the ranking loss existed (``--resume``
    returns it) lacks their keys: scores were regressed on then."""
    learned = [plural(record["train_pairs"], "alike pair")]
    if record["hard_negatives"]:
        learned.append(f"{record['hard_negatives']:,} not-alike as hard negatives")
    if record.get("scored_pairs"):
        how = "by rank" if record.get("score_loss") == "ranking" else "by regression"
        learned.append(f"{plural(record['scored_pairs'], 'scored pair')} {how}")
    if record.get("teacher"):
        texts = plural(record["distilled_texts"], "text")
        learned.append(f"{model_label(record['teacher'])}'s vectors of {texts}")
    before, after = record["before"], record["after"]
    held_out = f"--dev {Path(record['dev_file']).name}" if record["dev_file"] else "10% of the pairs"
    lines = [f"tuned {model_label(record['base'])} on {Path(record['pairs_file']).name} in "
             f"{plural(record['steps'], 'step')}: {', '.join(learned)}",
             f"held out ({held_out}: {plural(before['dev_pairs'], 'pair')}), before -> after:"]
    for key, name, shown in _HELD_OUT_FIGURES:
        if key in before:
            lines.append(f"  {name:<22} {shown.format(before[key])} -> {shown.format(after[key])}")
    if after["dev_score"] <= before["dev_score"]:
        lines.append("no epoch raised the held-out figures: the new model keeps the base's weights")
    lines += tune_regressions(record)
    calibrated = record.get("same_question", {}).get("fitted_on")
    if calibrated:
        lines.append(f"match (how likely two questions are the same) calibrated on {calibrated}")
    return [*lines, f"saved {out}: use it with `askalike index FILE --model {out}`"]


def tune_regressions(record: Mapping[str, Any]) -> list[str]:
    """A warning for each held-out figure the tuned model scores below its base: the epoch kept
    is the one with the best held-out score (the mean of the figures), which may lower one."""
    before, after = record["before"], record["after"]
    fell = [f"{name} fell from {shown.format(before[key])} to {shown.format(after[key])}"
            for key, name, shown in _HELD_OUT_FIGURES
            if key in before and key in after and after[key] < before[key]]
    if not fell:
        return []
    return [f"warning: {'; '.join(fell)} (the model kept is the epoch with the best held-out score, "
            f"{before['dev_score']:.4f} -> {after['dev_score']:.4f}; the base may serve better: "
            "compare both with `askalike eval` on your pairs)"]


def tune_estimate_line(estimate: Any, resumed: bool) -> str:
    """What a tune will take, said before it starts (``train.pair_tuning.TuneEstimate``)."""
    head = "resuming" if resumed else "tuning"
    return (f"{head}: about {duration(estimate.epoch_seconds)} an epoch on this machine, up to "
            f"{duration(estimate.total_seconds)} for {plural(estimate.epochs, 'epoch')}"
            f"{' (what is left)' if resumed else ''}; the bar shows the time left. Ctrl-C stops; "
            "`--resume` then continues from the last checkpoint (every half epoch)")


def adapt_summary(record: Mapping[str, Any], out: str) -> list[str]:
    """The words a DAN's vocabulary gained from a collection, and where the model is."""
    if not record["new_words"]:
        return [f"{model_label(record['base'])}'s vocabulary already holds the frequent words of "
                f"{plural(record['collection_texts'], 'text')}: nothing to add",
                f"saved {out}, the same model: use it with `askalike index FILE --model {out}`"]
    examples = ", ".join(record["examples"][:10]) + (" ..." if record["new_words"] > 10 else "")
    return [f"gave {model_label(record['base'])} {plural(record['new_words'], 'new word')} of "
            f"{plural(record['collection_texts'], 'text')}, their rows from "
            f"{model_label(record['teacher'])}: {examples}",
            f"saved {out}: use it with `askalike index FILE --model {out}`"]
