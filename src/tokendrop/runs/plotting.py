"""Figures: matplotlib's pyplot on the Agg backend, and the one way a figure is written (atomically,
through :func:`tokendrop.runs.files.atomic_file`, then closed).  Every plot of the package goes
through these two functions."""

from __future__ import annotations

import os
from typing import Any

from tokendrop.errors import TokendropError
from tokendrop.runs.files import atomic_file


class PlottingUnavailable(TokendropError, ImportError):
    """matplotlib (the ``lab`` extra) is not installed."""


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (no display needed)."""
    try:
        import matplotlib
    except ImportError:
        raise PlottingUnavailable(
            "figures need matplotlib, which is not installed; "
            "pip install 'tokendrop[lab]' (or matplotlib)"
        ) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, path: str | os.PathLike, dpi: int = 110, tight: bool = True) -> None:
    """Write ``fig`` to ``path`` (format from the suffix) atomically, then close it."""
    plt = pyplot()
    try:
        with atomic_file(path) as tmp:
            fig.savefig(tmp, dpi=dpi, **({"bbox_inches": "tight"} if tight else {}))
    finally:
        plt.close(fig)
