"""What a token-dropping run drops: ``tokendrop inspect RUN_DIR`` (the paper's Figures 1 and 3).

``inspect_run(run_dir, out_dir=None, num_examples=6)`` reads the run's latest checkpoint (its
importance vector ``m``, key ``importance`` of ``state.safetensors``), the run's tokenizer and, when
it is still where the run found it, the prepared data (held-out split and token counts), and writes
into ``RUN_DIR/inspect`` (or ``out_dir``), atomically (a temp dir renamed into place):

    importance-hist.png   Figure 3: the distribution of the importance scores (cumulative MLM
                          losses) over the vocabulary; ids never seen as a prediction target keep
                          the initial score (10.0 by default) and are drawn apart.  A second panel
                          weights every id by how often it occurs in the training split, i.e. the
                          distribution the selector actually cuts, with the cut of the run's drop
                          rate marked.
    tokens.md, tokens.json   top and bottom tokens by score among the ids seen in training (score
                          moved away from the initial value, pinned ids excluded), with counts.
    examples.html, examples.png   Figure 1: excerpts of held-out sequences; tokens kept by the
                          selector at the run's drop rate in bold, each with its score.
    summary.json, README.md   what was inspected and the numbers above.

Selection follows training exactly: the selector sees the whole sequence of T tokens and keeps its
top M = round(T (1 - rate)) positions ([CLS]/[SEP]/[MASK] and configured extras pinned); the
excerpt shown is a window of that sequence.  The sequences are shown unmasked, so no position is
pinned as [MASK] here.  ``random``/``half_random`` selections are a seeded draw.  ``random_ltd``
draws a subset of its own per middle layer at the count its schedule has at the checkpoint's step:
the examples mark the first middle layer's draw in bold and give, after each token, how many of the
middle layers keep it (the importance vector is unused and not shown as a ranking).

Runs that select nothing raise :class:`InspectError` with the reason: a dense baseline
(``drop.method = none``) has no importance vector; token averaging (``variant = avg``) pools
adjacent pairs instead of selecting tokens.  So does a checkpoint no step before which dropped (its
run's dense start covers them, or every step of the run is dense).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tokendrop.config import SEQ_LEN_FROM_DATA, Config, from_dict, recorded_config
from tokendrop.data import DataError, PreparedData
from tokendrop.data.masking import MLMMasker, build_batch
from tokendrop.data.tokenizer import (
    SPECIAL_KEYS,
    has_tokenizer_files,
    is_byte_level,
    read_tokenizer_spec,
    read_vocab,
    readable_token,
    tokenizer_from_spec,
    vocab_tokens,
)
from tokendrop.dropping.methods import METHODS, UNSCORED_METHODS
from tokendrop.dropping.plan import DropPlan
from tokendrop.runs import checkpoint as ckpt_mod, rundir
from tokendrop.runs.checkpoint import CheckpointError
from tokendrop.runs.files import atomic_directory
from tokendrop.runs.metrics import read_metrics
from tokendrop.runs.plotting import pyplot, save_figure
from tokendrop.runs.rundir import write_marker
from tokendrop.train.selection import no_selection_reason, undropped_reason

# Figure 1: held-out excerpts with the kept tokens in bold and each token's importance score, as
# HTML and as a PNG (wrapped text drawn with matplotlib)

PIN_ABS = 1e4  # tokendrop.dropping.methods.PIN_HIGH / -PIN_LOW: a pinned id's score


def _fmt_score(s: float) -> str:
    if s >= PIN_ABS * 0.999:
        return "pin"
    if s <= -PIN_ABS * 0.999:
        return "-pin"
    return f"{s:.2f}"


def render_examples_html(examples: list[dict[str, Any]], title: str, caption: str) -> str:
    parts = [
        "<!doctype html>",
        "<html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:Georgia,serif;max-width:60em;margin:2em auto;line-height:2.1}"
        ".ex{margin:1.2em 0;padding:.6em 1em;border-left:3px solid #bbb}"
        ".tok{white-space:nowrap;margin-right:.35em}.kept{font-weight:bold}.drop{color:#777}"
        "sub{font-size:.65em;color:#555;font-weight:normal}.meta{font-size:.8em;color:#666}</style>",
        "</head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{html.escape(caption)}</p>",
    ]
    if not examples:
        parts.append(
            "<p><em>No held-out examples: the run's prepared data is not available.</em></p>"
        )
    for n, ex in enumerate(examples, 1):
        toks = []
        for t, s, k in zip(ex["tokens"], ex["scores"], ex["kept"]):
            tag, cls = ("b", "kept") if k else ("span", "drop")
            toks.append(
                f"<{tag} class='tok {cls}'>{html.escape(t)}<sub>({_fmt_score(s)})</sub></{tag}>"
            )
        parts.append(
            f"<div class='ex'><div class='meta'>example {n}: {ex['split']} sequence "
            f"{ex['sequence']}, "
            f"tokens {ex['start']}-{ex['end'] - 1}; kept {100 * ex['kept_fraction_window']:.0f}% "
            "of this excerpt, "
            f"{100 * ex['kept_fraction_sequence']:.0f}% of the sequence</div>"
            + " ".join(toks)
            + "</div>"
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def render_examples_png(examples: list[dict[str, Any]], path: Path, title: str) -> None:
    """Wrapped token text: kept tokens bold black, dropped grey, each followed by its score."""
    plt = pyplot()
    width_in, dpi, fs = 11.0, 110, 10.5
    line_h = fs * 2.1 / 72.0  # inches
    fig = plt.figure(figsize=(width_in, 2.0), dpi=dpi)
    renderer = fig.canvas.get_renderer()
    placed = []  # (x_in, line, text, kwargs)
    line = 0
    margin = 0.25
    placed.append((margin, line, title, dict(fontsize=fs + 2, fontweight="bold")))
    line += 1.6
    if not examples:
        placed.append(
            (
                margin,
                line,
                "No held-out examples: the run's prepared data is not available.",
                dict(fontsize=fs),
            )
        )
        line += 1

    cache: dict[tuple, float] = {}

    def width(text: str, **kw) -> float:
        key = (text, kw.get("fontweight"), kw.get("fontsize"))
        if key not in cache:
            t = fig.text(0, 0, text, **kw)
            cache[key] = t.get_window_extent(renderer=renderer).width / dpi
            t.remove()
        return cache[key]

    for n, ex in enumerate(examples, 1):
        placed.append((margin, line, f"({n})", dict(fontsize=fs, color="#444")))
        x = margin + 0.45
        for t, s, k in zip(ex["tokens"], ex["scores"], ex["kept"]):
            kw_t = dict(
                fontsize=fs,
                fontweight="bold" if k else "normal",
                color="black" if k else "#808080",
                family="DejaVu Sans",
            )
            kw_s = dict(
                fontsize=fs * 0.68, color="#1f5fa8" if k else "#a0a0a0", family="DejaVu Sans"
            )
            st = f"({_fmt_score(s)})"
            wt = width(t, **kw_t)
            w = wt + width(st, **kw_s) + 0.09
            if x + w > width_in - margin:
                line += 1
                x = margin + 0.45
            placed.append((x, line, t, kw_t))
            placed.append((x + wt + 0.01, line + 0.18, st, kw_s))
            x += w
        line += 1.5
    height = max(1.0, (line + 0.3) * line_h)
    fig.set_size_inches(width_in, height)
    for x, ln, text, kw in placed:
        fig.text(x / width_in, 1.0 - (ln + 1) * line_h / height, text, **kw)
    save_figure(fig, path)


class InspectError(CheckpointError):
    """A directory that cannot be inspected (not a run, no checkpoint, or nothing is selected).

    A ``CheckpointError`` subclass so that the command line reports it as a one-line error."""


# ----------------------------------------------------------------------------------------------
# loading


@dataclass
class RunView:
    """Everything the inspection needs from one run."""

    run_dir: Path
    ckpt: Path
    step: int
    cfg: Any  # tokendrop.config.Config
    scores: np.ndarray  # (V,) float32, the importance vector m
    vocab: list[str]
    special_ids: dict[str, int]
    pinned: np.ndarray  # (V,) bool: ids pinned high or low
    seen: np.ndarray  # (V,) bool: ids whose score carries information (see ``seen_mask``)
    counts: np.ndarray | None  # (V,) train-split occurrences, when the prepared data is reachable
    data_path: str | None  # the prepared data directory, when reachable
    notes: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.run_dir.name

    def seq_len(self) -> int:
        """T of the run's prepared data (or the config's, or 128 when neither is known)."""
        if self.data_path:
            return PreparedData.open(self.data_path).seq_len
        return 128 if self.cfg.data.seq_len == SEQ_LEN_FROM_DATA else self.cfg.data.seq_len

    def plan(self, seq_len: int) -> DropPlan:
        """The run's method (``tokendrop.dropping.plan``) with the checkpoint's importance vector:
        the extra pinned tokens that are in the vocabulary, the data's counts (zeros when
        unreachable)."""
        index = {t: i for i, t in enumerate(self.vocab)}
        extra = [index[t] for t in self.cfg.drop.pinned_tokens if t in index]
        counts = self.counts if self.counts is not None else np.zeros(len(self.scores), np.int64)
        plan = DropPlan(
            self.cfg.drop,
            self.special_ids,
            num_layers=self.cfg.model.num_layers,
            vocab_size=len(self.scores),
            seq_len=seq_len,
            pinned_ids=extra,
            counts=counts,
            seed=self.cfg.train.seed,
            total_steps=self.cfg.train.fixed_steps,
        )
        if plan.selector is not None:
            plan.selector.scores.copy_(torch.from_numpy(self.scores.copy()))
        return plan

    def ltd_kept(self, seq_len: int) -> int:
        """random_ltd: the rows each middle layer kept in the checkpoint's last step."""
        return self.cfg.drop.kept_rows(seq_len, max(self.step - 1, 0), self.cfg.train.fixed_steps)


@contextlib.contextmanager
def _held_checkpoint(path: Path) -> Iterator[tuple[Path, Path]]:
    """(run dir, checkpoint dir) for a run dir or one of its ``checkpoints/step-*`` dirs, the
    checkpoint held for the block (``runs.checkpoint.reading``: a training run's rotation cannot
    remove it while it is read; a run dir's newest checkpoint removed before it is held is passed
    over for the next newest) and its model file verified."""
    if not path.exists():
        raise InspectError(f"{path}: no such directory")
    if not path.is_dir():
        raise InspectError(
            f"{path}: not a directory; expected a run directory written by `tokendrop pretrain`"
        )
    one = (path / "meta.json").is_file() and path.parent.name == "checkpoints"
    if not one and not (path / "checkpoints").is_dir() and not (path / "config.toml").is_file():
        raise InspectError(
            f"{path}: not a tokendrop run directory (no config.toml, no checkpoints/); "
            "expected the --out directory of `tokendrop pretrain` or `tokendrop study`'s runs/NAME"
        )
    if not one and (
        not (path / "checkpoints").is_dir()
        or not any(c.name.startswith("step-") for c in (path / "checkpoints").iterdir())
    ):
        raise InspectError(
            f"{path}: the run has no complete checkpoint yet (checkpoints/step-*/ missing); "
            "inspect it after its first checkpoint (train.ckpt_every)"
        )
    # its newest checkpoint; a corrupt one is an error naming the file, never skipped
    with ckpt_mod.reading(path) as last:
        # the shared verifying loader; state.safetensors: verified when read
        ckpt_mod.verify(last, files=ckpt_mod.model_files(ckpt_mod.read_meta(last)))
        yield (path.parent.parent if one else path), last


def seen_mask(
    scores: np.ndarray,
    pinned: np.ndarray,
    method: str,
    init_score: float,
    counts: np.ndarray | None,
) -> np.ndarray:
    """Ids whose score says something: cumulative/half-random -- the score moved away from its
    initial value (the id was a real prediction target at least once); frequency -- the id occurs
    in the training split; random -- none (scores are never used)."""
    if METHODS[method].learns_from_loss:
        m = scores != np.float32(init_score)
    elif METHODS[method].needs_counts:
        m = counts > 0 if counts is not None else scores != 0.0
    else:
        m = np.zeros_like(pinned)
    return m & ~pinned


def load_run(run_dir: str | os.PathLike) -> RunView:
    """Read a run (or one checkpoint of it) for inspection, the checkpoint held while it is read
    (a run that is training rotates around it); InspectError if it cannot be inspected."""
    with _held_checkpoint(Path(run_dir)) as (run, ckpt):
        meta = ckpt_mod.read_meta(ckpt)
        try:
            cfg = from_dict(Config, recorded_config(meta["config"]))
        except (ValueError, KeyError) as e:
            raise InspectError(f"{ckpt}/meta.json: unreadable run config ({e})") from None
        reason = no_selection_reason(cfg.drop)
        if reason:
            raise InspectError(f"{run}: {reason}")
        # hashed against meta.json, then parsed
        state = ckpt_mod.read_tensors(ckpt, "state.safetensors", meta)
    if "importance" not in state:
        raise InspectError(
            f"{ckpt}/state.safetensors: no importance vector (key 'importance'); drop.method = "
            f"{cfg.drop.method} should have one -- was the checkpoint written by tokendrop?"
        )
    scores = state["importance"].float().numpy()
    data_path = (
        cfg.data.path if cfg.data.path and (Path(cfg.data.path) / "meta.json").is_file() else None
    )
    notes: list[str] = []
    tok_dir = run / "tokenizer"
    if not has_tokenizer_files(tok_dir) and data_path:
        tok_dir = Path(data_path)
    if not has_tokenizer_files(tok_dir):
        raise InspectError(
            f"{run}: no tokenizer/vocab.txt or tokenizer/tokenizer.json in the run directory; "
            "cannot name the token ids"
        )
    names, tok = dict(SPECIAL_KEYS), None
    try:
        if (tok_dir / "vocab.txt").is_file():  # BERT WordPiece
            vocab_file = tok_dir / "vocab.txt"
            vocab = read_vocab(vocab_file)
        else:  # a tokenizer.json used as it is (BPE, ...): its tokens by id; "" where no token maps
            vocab_file = tok_dir / "tokenizer.json"
            spec = read_tokenizer_spec(tok_dir)
            tok = tokenizer_from_spec(spec)
            vocab, names = vocab_tokens(tok), dict(spec.special_tokens)
    except DataError as e:
        raise InspectError(f"{tok_dir}: the tokenizer does not load ({e})") from None
    if len(vocab) > len(scores):
        raise InspectError(
            f"{vocab_file}: {len(vocab)} tokens but the importance vector has {len(scores)} entries"
        )
    index = {t: i for i, t in enumerate(vocab) if t}
    special = {k: index[v] for k, v in names.items() if v in index}
    if tok is not None:
        byte_level = is_byte_level(tok)
        vocab = [readable_token(t, byte_level) for t in vocab]
    # an embedding padded past the tokenizer (ModernBERT) and holes in a vocabulary: placeholder
    # names
    vocab = [
        t or f"<unused id {i}>" for i, t in enumerate(vocab + [""] * (len(scores) - len(vocab)))
    ]
    counts = None
    if data_path:
        try:
            pd = PreparedData.open(data_path)
            if pd.vocab_size == len(scores):
                counts = pd.token_counts()
                special = dict(pd.special_ids)
            else:
                notes.append(
                    f"prepared data {data_path} has a different vocabulary; counts and "
                    "examples skipped"
                )
                data_path = None
        except Exception as e:  # noqa: BLE001 -- data moved/corrupt: inspect what we can
            notes.append(f"prepared data {data_path} unreadable ({e}); counts and examples skipped")
            data_path = None
    else:
        notes.append(
            f"the run's prepared data ({cfg.data.path or 'none'}) is not available here: "
            "no token counts and no held-out examples"
        )
    pinned = np.abs(scores) >= PIN_ABS * 0.999
    seen = seen_mask(scores, pinned, cfg.drop.method, cfg.drop.init_score, counts)
    if cfg.drop.method in UNSCORED_METHODS:
        notes.append(
            f"drop.method = {cfg.drop.method}: the selector ignores the scores (a uniform draw); "
            "the histogram shows the untouched initial vector"
        )
    return RunView(
        run,
        ckpt,
        int(meta.get("step", 0)),
        cfg,
        scores,
        vocab,
        special,
        pinned,
        seen,
        counts,
        data_path,
        notes,
    )


# ----------------------------------------------------------------------------------------------
# numbers


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    if len(a) < 3:
        return float("nan")
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    ra -= ra.mean()
    rb -= rb.mean()
    den = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / den) if den else float("nan")


def score_stats(rv: RunView) -> dict[str, Any]:
    """Counts of the vocabulary by state, score quantiles of the seen ids, frequency correlation."""
    free = ~rv.pinned
    s = rv.scores[rv.seen]
    out: dict[str, Any] = {
        "vocab_size": int(len(rv.scores)),
        "pinned": int(rv.pinned.sum()),
        "seen": int(rv.seen.sum()),
        "unseen_at_init": int((free & ~rv.seen).sum()),
        "init_score": float(rv.cfg.drop.init_score),
    }
    if len(s):
        q = np.quantile(s, [0.0, 0.1, 0.5, 0.9, 1.0])
        out["seen_score_quantiles"] = {
            k: float(v) for k, v in zip(("min", "p10", "median", "p90", "max"), q)
        }
        out["seen_score_mean"] = float(s.mean())
    if rv.counts is not None:
        c = rv.counts.astype(np.float64)
        occ = c[free].sum()
        out["train_token_occurrences"] = int(c.sum())
        out["occurrences_of_seen_ids"] = float(c[rv.seen].sum() / occ) if occ else float("nan")
        if rv.cfg.drop.selection.learns_from_loss and rv.seen.sum() >= 3:
            # > 0: rarer ids score higher, as frequency-based dropping would rank them
            out["spearman_score_vs_rarity"] = _spearman(rv.scores[rv.seen], -c[rv.seen])
        cut = occurrence_cut(rv)
        if cut is not None:
            out["score_cut_at_drop_rate"] = cut
    return out


def occurrence_cut(rv: RunView) -> float | None:
    """The score below which ``drop.rate`` of the (non-pinned) token occurrences of the training
    split fall: roughly the selector's threshold on an average sequence."""
    if rv.counts is None or rv.cfg.drop.method in UNSCORED_METHODS:
        return None
    free = ~rv.pinned & (rv.counts > 0)
    if not free.any():
        return None
    s, w = rv.scores[free].astype(np.float64), rv.counts[free].astype(np.float64)
    order = np.argsort(s, kind="stable")
    cw = np.cumsum(w[order]) / w.sum()
    i = int(np.searchsorted(cw, rv.cfg.drop.rate, side="left"))
    return float(s[order][min(i, len(s) - 1)])


def top_bottom(rv: RunView, k: int = 30) -> dict[str, list[dict[str, Any]]]:
    """Top and bottom ``k`` seen ids by score (ties by id)."""
    ids = np.flatnonzero(rv.seen)
    order = ids[np.lexsort((ids, -rv.scores[ids]))]

    def row(rank: int, i: int) -> dict[str, Any]:
        r = {"rank": rank, "id": int(i), "token": rv.vocab[i], "score": float(rv.scores[i])}
        if rv.counts is not None:
            r["train_count"] = int(rv.counts[i])
        return r

    top = [row(n + 1, i) for n, i in enumerate(order[:k])]
    bottom_ids = order[::-1][:k]
    bottom = [row(len(order) - n, i) for n, i in enumerate(bottom_ids)]
    return {"top": top, "bottom": bottom}


# ----------------------------------------------------------------------------------------------
# examples (Figure 1)


def example_sequences(
    rv: RunView, num_examples: int = 6, window: int = 48, seed: int = 0
) -> list[dict[str, Any]]:
    """``num_examples`` held-out excerpts: ``tokens``, ``scores``, ``kept`` (per token of the
    window), plus the sequence index, window offset and the kept fraction of the whole sequence."""
    if not rv.data_path or num_examples <= 0:
        return []
    pd = PreparedData.open(rv.data_path)
    seqs = pd.sequences("eval")
    if len(seqs) == 0:
        seqs = pd.sequences("train")
        split = "train"
    else:
        split = "eval"
    if len(seqs) == 0:
        return []
    T = rv.seq_len()
    plan = rv.plan(T)
    rng = np.random.default_rng(seed)
    pick = np.sort(rng.choice(len(seqs), size=min(num_examples, len(seqs)), replace=False))
    ids = torch.from_numpy(np.asarray(seqs[pick], dtype=np.int64))
    # random_ltd: the draws of every middle layer at the checkpoint's count
    if rv.cfg.drop.per_layer:
        layers = plan.half_layers
        # (S, n, M), at full length too
        draws = plan.selector.select_layers(ids, rv.ltd_kept(T), layers)
        keep = draws[0]  # the first middle layer's draw in bold
        per_layer = torch.zeros(layers, *ids.shape).scatter_(2, draws, 1.0)
        pos_scores = per_layer.sum(0)  # how many middle layers keep each position
    else:
        keep = plan.select(ids, plan.kept(T))  # (n, M) ascending
        pos_scores = plan.selector.position_scores(ids)
    vocab = rv.vocab
    stop = {i for i, t in enumerate(vocab) if t in (".", "!", "?", ";")}
    pad = rv.special_ids.get("pad", -1)
    out = []
    for j, si in enumerate(pick):
        row = ids[j].tolist()
        kept = np.zeros(len(row), bool)
        kept[keep[j].numpy()] = True
        n_real = sum(1 for t in row if t != pad)
        # start just after a sentence end near a random point, so the excerpt reads as a sentence
        lo = int(rng.integers(1, max(2, n_real - window)))
        for k in range(lo, min(lo + window // 2, n_real)):
            if row[k - 1] in stop:
                lo = k
                break
        hi = min(n_real, lo + window)
        for k in range(lo + window // 3, hi):
            if row[k] in stop:
                hi = k + 1
                break
        toks = [vocab[t] for t in row[lo:hi]]
        sc = [float(x) for x in pos_scores[j, lo:hi].tolist()]
        out.append(
            {
                "split": split,
                "sequence": int(si),
                "start": lo,
                "end": hi,
                "tokens": toks,
                "scores": sc,
                "kept": kept[lo:hi].tolist(),
                "kept_fraction_sequence": float(kept[:n_real].mean()),
                "kept_fraction_window": float(kept[lo:hi].mean()) if hi > lo else 0.0,
            }
        )
    return out


# ----------------------------------------------------------------------------------------------
# histogram (Figure 3)


def plot_histogram(rv: RunView, path: Path, title: str | None = None) -> None:
    plt = pyplot()
    free = ~rv.pinned
    seen_s = rv.scores[rv.seen]
    unseen = free & ~rv.seen
    two = rv.counts is not None and rv.cfg.drop.method not in UNSCORED_METHODS
    fig, axes = plt.subplots(1, 2 if two else 1, figsize=(13 if two else 7, 4.2), squeeze=False)
    ax = axes[0][0]
    vals = rv.scores[free]
    lo, hi = (float(vals.min()), float(vals.max())) if len(vals) else (0.0, 1.0)
    if hi - lo < 1e-6:
        lo, hi = lo - 0.5, hi + 0.5
    bins = np.linspace(lo, hi, 61)
    if len(seen_s):
        ax.hist(seen_s, bins=bins, color="#1f77b4", label=f"seen in training ({len(seen_s)} ids)")
    if unseen.any():
        ax.hist(
            rv.scores[unseen],
            bins=bins,
            color="#ff7f0e",
            label=f"never a prediction target: initial {rv.cfg.drop.init_score:g} "
            f"({int(unseen.sum())} ids)",
        )
    ax.set_xlabel(
        "importance score (cumulative MLM loss)"
        if not rv.cfg.drop.selection.needs_counts
        else "importance score (-log(1 + count))"
    )
    ax.set_ylabel("vocabulary ids")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("per vocabulary id", fontsize=10)
    if two:
        ax2 = axes[0][1]
        occ = free & (rv.counts > 0)
        ax2.hist(
            rv.scores[occ], bins=bins, weights=rv.counts[occ].astype(np.float64), color="#2ca02c"
        )
        cut = occurrence_cut(rv)
        if cut is not None:
            ax2.axvline(cut, color="k", ls="--", lw=1)
            ax2.text(
                cut,
                ax2.get_ylim()[1] * 0.95,
                f" drop-rate cut {rv.cfg.drop.rate:g}\n score {cut:.2f}",
                va="top",
                fontsize=8,
            )
        ax2.set_xlabel("importance score")
        ax2.set_ylabel("token occurrences in the training split")
        ax2.set_title("weighted by occurrences (what the selector cuts)", fontsize=10)
    fig.suptitle(
        title
        or f"Importance scores of {rv.name} at step {rv.step} ({rv.cfg.drop.method}, rate "
        f"{rv.cfg.drop.rate:g})",
        fontsize=11,
    )
    fig.tight_layout()
    save_figure(fig, path)


# ----------------------------------------------------------------------------------------------
# entry point


def _tokens_markdown(
    rv: RunView, tb: dict[str, list[dict[str, Any]]], stats: dict[str, Any]
) -> str:
    has_counts = rv.counts is not None

    def table(rows: list[dict[str, Any]]) -> list[str]:
        head = "| rank | token | id | score |" + (" train count |" if has_counts else "")
        sep = "|---:|---|---:|---:|" + ("---:|" if has_counts else "")
        lines = [head, sep]
        for r in rows:
            tok = r["token"].replace("|", "\\|").replace("`", "'")
            lines.append(
                f"| {r['rank']} | `{tok}` | {r['id']} | {r['score']:.3f} |"
                + (f" {r['train_count']} |" if has_counts else "")
            )
        return lines

    lines = [
        f"# Tokens by importance score — `{rv.name}` (step {rv.step})",
        "",
        f"drop.method = {rv.cfg.drop.method}, variant = {rv.cfg.drop.variant}, rate = "
        f"{rv.cfg.drop.rate:g}. "
        f"Only ids seen in training are ranked ({stats['seen']} of {stats['vocab_size']}; "
        f"{stats['unseen_at_init']} never seen keep the initial score, {stats['pinned']} pinned "
        "ids excluded). "
        "High score = hard to predict = kept.",
        "",
    ]
    if not tb["top"]:
        lines += [
            "No id has a score that moved away from its initial value (e.g. a random-selection "
            "run, or a checkpoint before any update).",
            "",
        ]
    else:
        lines += ["## Top (most important, kept first)", ""] + table(tb["top"]) + [""]
        lines += ["## Bottom (least important, dropped first)", ""] + table(tb["bottom"]) + [""]
    return "\n".join(lines)


def inspect_run(
    run_dir: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    num_examples: int = 6,
    top_k: int = 30,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Write the inspection of ``run_dir`` into ``out_dir`` (default ``RUN_DIR/inspect``); -> out
    dir.

    An existing non-empty ``out_dir`` is refused unless ``overwrite``, which replaces only an
    earlier inspection (never a file, or a directory holding the run); written atomically, under a
    lock. Its figures need matplotlib: checked before the run is read."""
    pyplot()
    rv = load_run(run_dir)
    reason = undropped_reason(rv.cfg.drop, rv.cfg.train.fixed_steps, rv.step)
    if reason:
        raise InspectError(f"{rv.ckpt}: {reason}")
    out = Path(out_dir) if out_dir else rv.run_dir / "inspect"
    with rundir.lock(out, InspectError):
        rundir.prepare_output(out, "inspect", overwrite, inputs=[run_dir], error=InspectError)
        return _write_inspection(rv, out, num_examples, top_k, seed)


def _write_inspection(rv: RunView, out: Path, num_examples: int, top_k: int, seed: int) -> Path:
    with atomic_directory(out) as tmp:
        write_marker(tmp, "inspect")
        stats = score_stats(rv)
        tb = top_bottom(rv, top_k)
        examples = example_sequences(rv, num_examples, seed=seed)
        title = f"Kept tokens (bold) and importance scores — {rv.name}, step {rv.step}"
        caption = (
            _ltd_caption(rv)
            if rv.cfg.drop.per_layer
            else (
                f"Held-out excerpts. The selector ({rv.cfg.drop.method}, drop rate "
                f"{rv.cfg.drop.rate:g}) ranks "
                "all T positions of the sequence by the score of their token id and keeps the top "
                f"{100 * (1 - rv.cfg.drop.rate):g}%; kept tokens (bold) pass through every layer, "
                "the others skip "
                "the middle layers. The number after each token is its score; 'pin' = always kept "
                "([CLS]/[SEP]/[MASK]). Sequences are shown unmasked."
            )
        )
        plot_histogram(rv, tmp / "importance-hist.png")
        (tmp / "tokens.md").write_text(_tokens_markdown(rv, tb, stats), encoding="utf-8")
        (tmp / "tokens.json").write_text(
            json.dumps({"run": str(rv.run_dir), "step": rv.step, **tb}, indent=1), encoding="utf-8"
        )
        (tmp / "examples.html").write_text(
            render_examples_html(examples, title, caption), encoding="utf-8"
        )
        (tmp / "examples.json").write_text(json.dumps(examples, indent=1), encoding="utf-8")
        render_examples_png(examples, tmp / "examples.png", title)
        summary = {
            "run": str(rv.run_dir),
            "checkpoint": str(rv.ckpt),
            "step": rv.step,
            "drop": {
                "method": rv.cfg.drop.method,
                "variant": rv.cfg.drop.variant,
                "rate": rv.cfg.drop.rate,
                "beta": rv.cfg.drop.beta,
            },
            "stats": stats,
            "examples": len(examples),
            "notes": rv.notes,
        }
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
        (tmp / "README.md").write_text(_readme(rv, stats), encoding="utf-8")
    return out


def _ltd_caption(rv: RunView) -> str:
    t = rv.seq_len()
    start, end = rv.cfg.drop.span(rv.cfg.model.num_layers)
    layers = end - start
    return (
        f"Held-out excerpts. random-LTD: each of the {layers} middle layers draws its own "
        f"{rv.ltd_kept(t)} of the T = {t} positions uniformly at random (the schedule's count at "
        f"step {rv.step} of {rv.cfg.train.fixed_steps}); the first and last layers see every "
        "token. Bold: kept by the first middle layer; the number after each token: how many "
        "middle layers keep it. Sequences are shown unmasked."
    )


def _readme(rv: RunView, st: dict[str, Any]) -> str:
    lines = [
        f"# Inspection of `{rv.name}` (step {rv.step})",
        "",
        f"Checkpoint: `{rv.ckpt}`; drop.method = {rv.cfg.drop.method}, variant = "
        f"{rv.cfg.drop.variant}, "
        f"rate = {rv.cfg.drop.rate:g}, beta = {rv.cfg.drop.beta:g}.",
        "",
        f"- vocabulary: {st['vocab_size']} ids; pinned {st['pinned']}; seen in training "
        f"{st['seen']}; still at the initial score {st['init_score']:g}: {st['unseen_at_init']}",
    ]
    if "seen_score_quantiles" in st:
        q = st["seen_score_quantiles"]
        lines.append(
            f"- scores of seen ids: min {q['min']:.3f}, median {q['median']:.3f}, "
            f"max {q['max']:.3f}"
        )
    if "occurrences_of_seen_ids" in st:
        lines.append(
            f"- seen ids cover {100 * st['occurrences_of_seen_ids']:.1f}% of the token occurrences "
            "of the training split"
        )
    if "spearman_score_vs_rarity" in st:
        lines.append(
            "- Spearman correlation of score with rarity (seen ids): "
            f"{st['spearman_score_vs_rarity']:.3f} "
            "(1 = the same ranking as frequency-based dropping)"
        )
    if "score_cut_at_drop_rate" in st:
        lines.append(
            f"- {100 * rv.cfg.drop.rate:g}% of the training token occurrences score below "
            f"{st['score_cut_at_drop_rate']:.3f}"
        )
    lines += [f"- note: {n}" for n in rv.notes]
    lines += [
        "",
        "![importance scores](importance-hist.png)",
        "",
        "Top/bottom tokens: [tokens.md](tokens.md). Examples: [examples.html](examples.html)",
        "",
        "![examples](examples.png)",
        "",
    ]
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# what the selector keeps, over training


def selection_diagnostics(
    rv: RunView, mask_prob: float, num_batches: int = 4, batch_size: int = 32, seed: int = 0
) -> dict[str, Any]:
    """What the checkpoint's selector keeps of held-out sequences masked at ``mask_prob`` (BERT's
    80/10/10, the run's own masker): the share of the kept rows that are [MASK] tokens
    (``kept_mask_share``), that are prediction targets of any kind (``kept_target_share``), and the
    ordinary tokens left per sequence (kept rows that are neither a target nor a special token);
    plus ``spearman_score_vs_rarity`` where the scores learn from the loss (``score_stats``)."""
    out: dict[str, Any] = {"step": rv.step, "mask_prob": float(mask_prob)}
    st = score_stats(rv)
    if "spearman_score_vs_rarity" in st:
        out["spearman_score_vs_rarity"] = st["spearman_score_vs_rarity"]
    if not rv.data_path or rv.cfg.drop.per_layer:
        return out
    pd = PreparedData.open(rv.data_path)
    seqs = pd.sequences("eval")
    if len(seqs) == 0:
        seqs = pd.sequences("train")
    if len(seqs) == 0:
        return out
    T = rv.seq_len()
    plan = rv.plan(T)
    if plan.selector is None:  # the variant pools: nothing is selected
        return out
    masker = MLMMasker(rv.special_ids, rv.vocab, T, mask_prob)
    rng = np.random.default_rng(seed)
    n = min(len(seqs), num_batches * batch_size)
    idx = np.sort(rng.choice(len(seqs), size=n, replace=False))
    b = build_batch(seqs, idx, masker, seed, 0)
    ids = torch.from_numpy(b["input_ids"])
    pos, w = torch.from_numpy(b["mlm_positions"]), torch.from_numpy(b["mlm_weights"])
    with torch.no_grad():
        keep = plan.select(ids, plan.kept(T), pos, w)  # (n, M)
    target = torch.zeros_like(ids, dtype=torch.bool)
    target.scatter_(1, pos, w > 0)
    specials = torch.tensor(sorted(set(rv.special_ids.values())), dtype=ids.dtype)
    kept_ids = ids.gather(1, keep)
    kept_target = target.gather(1, keep)
    ordinary = ~kept_target & ~torch.isin(kept_ids, specials)
    rows = kept_ids.numel()
    out.update(
        kept_rows=int(keep.shape[1]),
        seq_len=int(T),
        sequences=int(n),
        kept_mask_share=float((kept_ids == rv.special_ids["mask"]).sum()) / rows,
        kept_target_share=float(kept_target.sum()) / rows,
        ordinary_kept_per_sequence=float(ordinary.sum()) / n,
    )
    return out


def selection_trace(
    run_dir: str | os.PathLike, num_batches: int = 4, batch_size: int = 32
) -> list[dict[str, Any]]:
    """``selection_diagnostics`` at every checkpoint the run kept (``checkpoints/step-*``), in step
    order, each at the masking rate the run trained with at that step (its metrics log; the
    config's final rate where the log says nothing); one that rotation removed since the listing is
    left out."""
    run = Path(run_dir)
    ck = run / "checkpoints"
    kept = (
        [d for d in ck.iterdir() if d.name.startswith("step-") and (d / "meta.json").is_file()]
        if ck.is_dir()
        else []
    )
    dirs = sorted(kept, key=lambda d: int(d.name.split("-", 1)[1]))
    logged = [
        (int(r["step"]), float(r["mask_prob"]))
        for r in read_metrics(run)
        if "mask_prob" in r and "step" in r
    ]
    out = []
    for d in dirs:
        try:
            rv = load_run(d)
        except InspectError:
            if d.exists():
                raise
            continue  # removed by the run's rotation since the listing (a run that trains)
        before = [m for s, m in logged if s <= rv.step]
        out.append(
            selection_diagnostics(
                rv, before[-1] if before else rv.cfg.data.mask_prob_end, num_batches, batch_size
            )
        )
    return out


__all__ = [
    "inspect_run",
    "InspectError",
    "load_run",
    "RunView",
    "top_bottom",
    "score_stats",
    "example_sequences",
    "render_examples_html",
    "render_examples_png",
    "plot_histogram",
    "occurrence_cut",
    "seen_mask",
    "selection_diagnostics",
    "selection_trace",
]
