"""Figure 1 of ``tokendrop inspect``: held-out excerpts with the kept tokens in bold and each token's
importance score, as HTML and as a PNG (wrapped text drawn with matplotlib).

An example is a dict (``tokendrop.lab.inspect.example_sequences``): ``tokens``, ``scores``,
``kept`` (one per token), ``split``, ``sequence``, ``start``, ``end``, ``kept_fraction_window``,
``kept_fraction_sequence``.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from tokendrop.runs.plotting import pyplot, save_figure

PIN_ABS = 1e4  # tokendrop.dropping.importance.PIN_HIGH / -PIN_LOW: a pinned id's score


def _fmt_score(s: float) -> str:
    if s >= PIN_ABS * 0.999:
        return "pin"
    if s <= -PIN_ABS * 0.999:
        return "-pin"
    return f"{s:.2f}"


def render_examples_html(examples: list[dict[str, Any]], title: str, caption: str) -> str:
    parts = ["<!doctype html>", "<html><head><meta charset='utf-8'>", f"<title>{html.escape(title)}</title>",
             "<style>body{font-family:Georgia,serif;max-width:60em;margin:2em auto;line-height:2.1}"
             ".ex{margin:1.2em 0;padding:.6em 1em;border-left:3px solid #bbb}"
             ".tok{white-space:nowrap;margin-right:.35em}.kept{font-weight:bold}.drop{color:#777}"
             "sub{font-size:.65em;color:#555;font-weight:normal}.meta{font-size:.8em;color:#666}</style>",
             "</head><body>", f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(caption)}</p>"]
    if not examples:
        parts.append("<p><em>No held-out examples: the run's prepared data is not available.</em></p>")
    for n, ex in enumerate(examples, 1):
        toks = []
        for t, s, k in zip(ex["tokens"], ex["scores"], ex["kept"]):
            tag, cls = ("b", "kept") if k else ("span", "drop")
            toks.append(f"<{tag} class='tok {cls}'>{html.escape(t)}<sub>({_fmt_score(s)})</sub></{tag}>")
        parts.append(f"<div class='ex'><div class='meta'>example {n}: {ex['split']} sequence {ex['sequence']}, "
                     f"tokens {ex['start']}-{ex['end'] - 1}; kept {100 * ex['kept_fraction_window']:.0f}% of this excerpt, "
                     f"{100 * ex['kept_fraction_sequence']:.0f}% of the sequence</div>" + " ".join(toks) + "</div>")
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
        placed.append((margin, line, "No held-out examples: the run's prepared data is not available.", dict(fontsize=fs)))
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
            kw_t = dict(fontsize=fs, fontweight="bold" if k else "normal", color="black" if k else "#808080",
                        family="DejaVu Sans")
            kw_s = dict(fontsize=fs * 0.68, color="#1f5fa8" if k else "#a0a0a0", family="DejaVu Sans")
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
