"""What every figure shares: role colours and markers, a pyplot-free figure, deterministic PNG bytes, panel grids."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from PIL import Image

from harness.common.run_files import atomic_write_bytes
from harness.engine.metrics import Metric
from harness.rendering.bands import bootstrap_bands

DPI = 100  # 1,640 px across the widest figure (16.4 in): more than a page shows
PALETTE_COLOURS = 128  # median cut, no dithering: deterministic; lines, bands and text need no more
# Fixed PNG metadata (no matplotlib version), so the same table renders to the same bytes.
PNG_METADATA: dict[str, str | None] = {"Software": None}
ROLE_COLOURS = {"reference": "#1a1a1a", "mechanism": "#1f77b4", "boundary": "#d62728"}
ROLE_MARKERS = {"reference": "D", "mechanism": "o", "boundary": "X"}
ROLE_NAMES = {"reference": "reference", "mechanism": "mechanisms", "boundary": "boundary conditions"}
# Individual runs, where a figure draws them beside a condition's mean: one neutral colour for every role, so a
# single legend swatch matches every dot.
RUN_COLOUR, RUN_ALPHA, RUN_SIZE = "0.35", 0.5, 14.0


def no_shared_line_note(metrics: Sequence[Metric]) -> str:
    """The title's note on metrics drawn without the reference's line: judges score on their own scales."""
    own_scale = [x.label for x in metrics if x.judge_scale]
    return f" (none for {', '.join(own_scale)}: each condition's judges score on their own scale)" if own_scale else ""


def dashes(role: str) -> str:
    """Boundaries are drawn dashed everywhere, so a bound is never mistaken for a method."""
    return "--" if role == "boundary" else "-"


def role_suffix(role: str) -> str:
    return {"reference": " (reference)", "boundary": " (boundary)"}.get(role, "")


def new_figure(width: float, height: float) -> Figure:
    """A figure bound to the Agg canvas directly, so no pyplot state or display backend is involved."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def fitted(fig: Figure) -> Figure:
    """`fig` with its figure-level texts (title, axis super-labels) wrapped to the canvas: a long grid or condition
    name would otherwise run past the edges, cut off in the PNG."""
    for text in fig.texts:
        text.set_wrap(True)
    return fig


def save(fig: Figure, path: Path) -> Path:
    """The figure as a PNG of PALETTE_COLOURS colours, on white: a plot's lines, bands and text need no more, and the
    file is about 40% of matplotlib's RGBA PNG."""
    buffer = io.BytesIO()
    fitted(fig).savefig(buffer, format="png", dpi=DPI, metadata=PNG_METADATA, facecolor="white")
    image = Image.open(buffer).convert("RGB")
    paletted = image.quantize(PALETTE_COLOURS, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    written = io.BytesIO()
    paletted.save(written, format="PNG", optimize=True)
    atomic_write_bytes(path, written.getvalue())
    return path


def integer_x(ax: Axes) -> None:
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def empty(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"no finite data for {what}", ha="center", va="center", transform=ax.transAxes, color="0.4")


def panels(fig: Figure, n: int, ncols: int, **kwargs: object) -> list[Axes]:
    """n axes in a grid of ncols columns; unused slots hidden."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False, **kwargs)).ravel()
    for ax in axes[n:]:
        ax.set_visible(False)
    return list(axes[:n])


def mean_band(
    ax: Axes, data: pd.DataFrame, column: str, colour: object, style: str = "-", lw: float = 2.0, alpha: float = 0.12
) -> None:
    """Mean over seeds per iteration with its 95% bootstrap band over seeds (`bands.bootstrap_bands`)."""
    band = bootstrap_bands(data, column, by=("iteration",)).sort_values("iteration")
    ax.plot(band["iteration"], band["mean"], color=colour, ls=style, lw=lw, marker="o", markersize=3)
    ax.fill_between(band["iteration"], band["low"], band["high"], color=colour, alpha=alpha, lw=0)


def wrap(name: str, width: int) -> str:
    """Wrap a condition name after '[' or ',' so long knob lists fit a small panel title."""
    lines, line = [], ""
    for piece in name.replace("[", "[\0").replace(",", ",\0").replace(" (", "\0 (").split("\0"):
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = piece.lstrip()
        else:
            line += piece
    return "\n".join([*lines, line])
