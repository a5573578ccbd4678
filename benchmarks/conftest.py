"""Session fixtures of the benchmark suite, and the writer of artifacts/bench/.

Every benchmark reports its figures through the `figures` fixture (they also land in
`benchmark.extra_info`). When benchmarks are enabled, the session ends by writing
artifacts/bench/bench.json (figures, machine, FP32 peak derivation, package versions,
date, JAX devices) and artifacts/bench/bench.md (a table), each atomically.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import importlib.metadata
import json
import math
import os
import platform
import re
import tempfile
from pathlib import Path
from typing import Any

import jax
import pytest

import harness.mechanisms  # noqa: F401  (registers the built-in mechanisms, which every grid uses)
from benchmarks import machine, support
from harness.common.run_files import PACKAGES
from harness.grid.pretrain import PretrainResult
from harness.grid.sharding import use_every_cpu_core

# The benchmark process starts here: one CPU device per core, as the command line does.
use_every_cpu_core()

BENCH_DIR = support.ROOT / "artifacts" / "bench"
_BOOK = pytest.StashKey["FigureBook"]()


@dataclasses.dataclass
class Figure:
    name: str
    value: float
    unit: str
    note: str
    test: str


class FigureBook:
    """Every figure of the session, in the order recorded; names are unique (a later one replaces)."""

    def __init__(self) -> None:
        self.figures: dict[str, Figure] = {}

    def add(self, benchmark: Any, name: str, value: float, unit: str, note: str = "") -> None:
        value = float(value)
        benchmark.extra_info[name] = value
        self.figures[name] = Figure(name, value, unit, note, str(getattr(benchmark, "fullname", "")))

    def scaling(self) -> dict[int, float]:
        """µs per run-step by number of runs, from the scaling benchmark."""
        return {
            int(match.group(1)): figure.value
            for name, figure in self.figures.items()
            if (match := re.fullmatch(r"scaling: µs per run-step, runs=(\d+)", name))
        }

    def derive(self) -> None:
        """Figures that need several benchmarks: where batching saturates, and how far the largest sizes are from
        the best."""
        scaling = self.scaling()
        if len(scaling) >= 2:
            best = min(scaling.values())
            saturated = min(n for n, us in scaling.items() if us <= best / 0.9)
            one = scaling.get(min(scaling))
            self.figures["scaling: runs to reach 90% of best throughput"] = Figure(
                "scaling: runs to reach 90% of best throughput",
                saturated,
                "runs",
                f"fewest runs whose µs per run-step is within 1/0.9 of the best ({best:.1f} µs); "
                f"best speedup over {min(scaling)} run(s): {one / best:.1f}×",
                "derived",
            )
            for n_runs in sorted(scaling)[-2:]:
                name = f"scaling: runs={n_runs} over the best size"
                self.figures[name] = Figure(
                    name, scaling[n_runs] / best, "×", f"µs per run-step at {n_runs} runs / the best size's", "derived"
                )


def plot_scaling(scaling: dict[int, float], path: Path) -> None:
    """µs per run-step against runs in one program (log x), saved as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = sorted(scaling)
    figure, axis = plt.subplots(figsize=(6, 4))
    axis.plot(runs, [scaling[n] for n in runs], marker="o")
    axis.set_xscale("log")
    axis.set_ylim(bottom=0)
    axis.set_xlabel("runs in one program (baseline condition × seeds)")
    axis.set_ylabel("µs per run-step (median)")
    axis.set_title("Cost per run as the grid grows")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_BOOK] = FigureBook()


@pytest.fixture(scope="session")
def sizes(request: pytest.FixtureRequest) -> support.Sizes:
    return support.sizes_for(request.config)


@pytest.fixture(scope="session")
def figures(request: pytest.FixtureRequest) -> FigureBook:
    return request.config.stash[_BOOK]


@pytest.fixture(scope="session")
def judge_pool(sizes: support.Sizes) -> PretrainResult:
    """Judges for the published grid's seeds and largest ensemble, pretrained once per session."""
    return support.judge_pool(sizes)


def write_atomically(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and os.replace, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {}
    for name in (*PACKAGES, "pytest", "pytest-benchmark"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _format(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return str(value)
    if value == int(value) and abs(value) < 1e9:
        return f"{int(value):,}"
    return f"{value:,.4g}" if abs(value) >= 1 else f"{value:.4g}"


def _markdown(payload: dict[str, Any]) -> str:
    peak = payload["machine"]["fp32_peak"]
    title = "# Benchmarks" + (f" — {payload['mode'].upper()} MODE (reduced sizes)" if payload["mode"] != "full" else "")
    lines = [
        title,
        "",
        f"- date: {payload['date']}",
        f"- mode: {payload['mode']} (complete: {payload['complete']})",
        f"- machine: {payload['machine']['cpu']}, {peak['cores']} cores",
        f"- JAX devices: {', '.join(payload['jax_devices'])}",
        f"- FP32 peak: {peak['derivation']}",
        f"- jax {payload['packages'].get('jax')}, jaxlib {payload['packages'].get('jaxlib')}",
        f"- command: `{payload['command']}`",
        "",
        "| figure | value | unit | note |",
        "|---|---:|---|---|",
    ]
    for figure in payload["figures"]:
        note = figure["note"].replace("|", "\\|")
        lines.append(f"| {figure['name']} | {_format(figure['value'])} | {figure['unit']} | {note} |")
    return "\n".join(lines) + "\n"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    book = config.stash.get(_BOOK, None)
    if book is None or not book.figures or support.benchmarks_disabled(config):
        return
    book.derive()
    sizes = support.sizes_for(config)
    payload = {
        "mode": sizes.mode,
        "sizes": dataclasses.asdict(sizes),
        "complete": exitstatus == 0,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python -m pytest", *config.invocation_params.args]),
        "machine": {**machine.machine_summary(), "platform": platform.platform(), "python": platform.python_version()},
        "packages": _versions(),
        "jax_devices": [str(device) for device in jax.devices()],
        "figures": [dataclasses.asdict(f) for f in book.figures.values()],
    }
    write_atomically(BENCH_DIR / "bench.json", json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    write_atomically(BENCH_DIR / "bench.md", _markdown(payload))
    if len(book.scaling()) >= 2:
        plot_scaling(book.scaling(), BENCH_DIR / "scaling.png")
