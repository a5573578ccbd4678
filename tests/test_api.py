"""The Python API (`harness`) against what the command line writes, the files of its own run, and the README."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import tomli_w

import harness
from harness import cli
from harness.common.run_files import MANIFEST_FILE, METRICS_FILE
from harness.grid.conditions import ConditionFileError, load_grid
from harness.grid.sharding import usable_cores
from harness.rendering.figure_parts import save
from harness.report.figures import draw_figures
from tests.compile_cache_settings import compile_cache_settings_restored

ROOT = Path(__file__).resolve().parents[1]
# conditions/smoke.toml's grid, with a claim so that the verdicts table has a row. Its shape is the golden metrics'
# grid's and the notebook's: they load the programs compiled here (see SHARED_GRID_FILES in tests/conftest.py).
GRID = {
    "run": {"seeds": 2, "iterations": 2, "steps_per_iteration": 20},
    "conditions": {
        "baseline": {},
        "frozen": {"boundary": True, "freeze_judge": True},
        "slow-meta": {"judge_update_every": 5, "meta_update_every": 5, "meta_holdout_fraction": 0.05},
    },
    "claims": {
        "slow-meta-above-baseline": {
            "statement": "slower updates with meta-correction end above the baseline",
            "metric": "policy_quality",
            "condition": "slow-meta",
            "direction": "above",
            "than_condition": "baseline",
        }
    },
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> tuple[harness.GridResult, list[tuple[int, int]]]:
    """The grid run once through the API, from a dict, with the progress calls it made (its seed count given again,
    as a numpy integer: what a notebook's arithmetic gives)."""
    calls: list[tuple[int, int]] = []
    result = harness.run_grid(
        harness.grid_from_dict(GRID, name="api"),
        seeds=np.int64(2),
        run_dir=tmp_path_factory.mktemp("api") / "run",
        progress=lambda done, total: calls.append((done, total)),
    )
    return result, calls


@pytest.fixture(scope="module")
def command_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same grid written as a TOML file (by tomli_w, not by us) and run by `coevolab run`."""
    directory = tmp_path_factory.mktemp("cli")
    path = directory / "api.toml"
    path.write_bytes(tomli_w.dumps(GRID).encode())
    out = directory / "run"
    # --no-compile-cache: the command would otherwise turn this process's cache to the user's own (a module fixture
    # runs before the tests' environment points it at the session's); the programs are `ran`'s, in this process.
    with compile_cache_settings_restored():
        assert cli.main(["run", str(path), "--out", str(out), "--quiet", "--no-compile-cache"]) == cli.EXIT_OK
    return out


def test_a_dict_grid_is_its_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "api.toml"
    path.write_bytes(tomli_w.dumps(GRID).encode())
    assert harness.grid_from_dict(GRID, name="api") == load_grid(path)
    # A tuple sweeps as a TOML list does, and seeds are overridden as `coevolab run --seeds` does.
    swept = {"conditions": {"s": {"n_judges": (1, 3)}}}
    path.write_text("[conditions.s]\nn_judges = [1, 3]\n")
    assert harness.grid_from_dict(swept, name="api", seeds=range(3)) == load_grid(path, seeds=3)
    assert [c.name for c in harness.grid_from_dict(swept).conditions] == ["s[n_judges=1]", "s[n_judges=3]"]


def test_the_run_writes_what_the_command_writes(ran: tuple[harness.GridResult, list], command_run: Path) -> None:
    """Same grid, once from a dict in-process and once from a file by `coevolab run`: the same files, byte for byte
    (the manifest records times and is left out)."""
    result, _ = ran
    ours = {p.relative_to(result.run_dir) for p in result.run_dir.rglob("*") if p.is_file()}
    theirs = {p.relative_to(command_run) for p in command_run.rglob("*") if p.is_file()}
    assert ours == theirs
    assert {Path(METRICS_FILE), Path("report.md"), Path("claims.csv"), Path(MANIFEST_FILE)} <= ours
    for name in sorted(ours - {Path(MANIFEST_FILE)}):
        assert (result.run_dir / name).read_bytes() == (command_run / name).read_bytes(), name
    # The tables are those of the command's files.
    pd.testing.assert_frame_equal(result.metrics, pd.read_csv(command_run / METRICS_FILE))
    written = pd.read_csv(command_run / "summary.csv")
    assert result.summary["condition"].tolist() == written["condition"].tolist() == ["baseline", "frozen", "slow-meta"]
    for column in ("policy_quality_mean", "judge_alignment_std", "policy_quality_diff_mean"):
        np.testing.assert_allclose(result.summary[column].astype(float), written[column], rtol=1e-8, atol=1e-12)
    claims = pd.read_csv(command_run / "claims.csv")
    assert result.verdicts["claim"].tolist() == claims["claim"].tolist() == ["slow-meta-above-baseline"]
    assert result.verdicts["verdict"].tolist() == claims["verdict"].tolist()
    np.testing.assert_allclose(
        result.verdicts[["effect", "ci_low", "ci_high"]].to_numpy(float),
        claims[["effect", "ci_low", "ci_high"]],
        rtol=1e-8,
    )


def test_the_result_holds_the_run(ran: tuple[harness.GridResult, list]) -> None:
    result, _ = ran
    assert len(result.metrics) == 3 * 2 * 3  # conditions × seeds × iterations 0..2
    assert set(harness.FIGURE_KEYS) <= set(result.figure_files)
    assert all(path.parent == result.run_dir / "figures" for path in result.figure_files.values())
    # One judge per seed (no ensembles), each pretrained to its target.
    assert result.pretraining[["seed", "member"]].values.tolist() == [[0, 0], [1, 0]]
    assert (result.pretraining["spearman"] >= result.pretraining["target"]).all()
    assert {"pretrain", "compile", "train", "report"} <= set(result.times)
    # The final state's runs are the table's runs: the last iteration's judge-update counts are the state's own.
    state = result.final_state
    assert state is not None
    assert result.run_labels == [(c, s) for c in ("baseline", "frozen", "slow-meta") for s in (0, 1)]
    assert state.runs.policy.params.shape[0] == len(result.run_labels)
    last = result.metrics[result.metrics["iteration"] == 2].set_index(["condition", "seed"])
    expected = [last.loc[label, "judge_updates"] for label in result.run_labels]
    assert np.asarray(state.runs.of("judge_update").updates).tolist() == expected
    assert result.diverged.empty
    assert repr(result) == f"GridResult('api': 3 conditions × 2 seeds, 2 iterations; run_dir='{result.run_dir}')"


def test_progress_is_reported_once_per_iteration(ran: tuple[harness.GridResult, list]) -> None:
    _, calls = ran
    assert calls == [(1, 2), (2, 2)]


def test_a_saved_result_loads_back_with_the_same_tables(ran: tuple[harness.GridResult, list], tmp_path: Path) -> None:
    result, _ = ran
    saved = result.save(tmp_path / "saved")
    loaded = harness.load_result(tmp_path / "saved")
    for got in (saved, loaded):
        assert got.run_dir == tmp_path / "saved"
        assert got.spec == result.spec
        for table in ("metrics", "summary", "verdicts", "pretraining"):
            pd.testing.assert_frame_equal(getattr(got, table), getattr(result, table), obj=table)
        assert got.times == result.times
        assert {k: p.read_bytes() for k, p in got.figure_files.items()} == {
            k: p.read_bytes() for k, p in result.figure_files.items()
        }
    assert loaded.final_state is None and saved.final_state is result.final_state
    with pytest.raises(FileExistsError):
        result.save(tmp_path / "saved")  # never over a run's files unless asked
    with pytest.raises(FileNotFoundError, match=r"no metrics\.csv"):
        harness.load_result(tmp_path)


def test_figures_are_the_report_pngs(ran: tuple[harness.GridResult, list], tmp_path: Path) -> None:
    """The Figure objects, saved as the report saves them (`harness.rendering.figure_parts.save`), are the PNG
    files' bytes."""
    result, _ = ran
    figures = result.figures()
    assert list(figures) == list(harness.FIGURE_KEYS)
    for key, figure in figures.items():
        assert save(figure, tmp_path / f"{key}.png").read_bytes() == result.figure_files[key].read_bytes(), key
    with pytest.raises(ValueError, match="unknown figure keys"):
        result.figure("nope")


def test_every_figures_text_lies_inside_its_canvas(ran: tuple[harness.GridResult, list]) -> None:
    """Drawn for a grid of a long name (the titles name it): every drawn artist, titles and tick labels included,
    lies within the figure, so nothing is cut off in the PNG."""
    result, _ = ran
    for key, figure in draw_figures(result.metrics, name="a-grid-of-a-rather-long-descriptive-name" * 2).items():
        figure.canvas.draw()
        drawn = figure.get_tightbbox(figure.canvas.get_renderer())
        width, height = figure.get_size_inches()
        assert drawn.x0 >= -0.01 and drawn.y0 >= -0.01, key
        assert drawn.x1 <= width + 0.01 and drawn.y1 <= height + 0.01, (key, drawn, width, height)


def test_bad_input_fails_as_the_command_line_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown knob: the same one-line ConditionFileError, naming the grid where the command names the file."""
    bad = {"conditions": {"baseline": {"judge_update_evry": 5}}}
    with pytest.raises(ConditionFileError) as raised:
        harness.grid_from_dict(bad, name="bad")
    with pytest.raises(ConditionFileError):
        harness.run_grid(bad, run_dir=tmp_path / "never")
    assert not (tmp_path / "never").exists()  # refused before anything is written
    message = str(raised.value)
    assert message == "grid 'bad', condition 'baseline', key 'judge_update_evry': unknown key; did you mean " + (
        "'judge_update_every'?"
    )
    path = tmp_path / "bad.toml"
    path.write_bytes(tomli_w.dumps(bad).encode())
    assert cli.main(["list", str(path)]) == cli.EXIT_BAD_INPUT
    from_file = message.replace("grid 'bad'", str(path))
    assert capsys.readouterr().err == f"coevolab: error: {from_file}\n"


def test_seeds_are_whole_numbers_numpy_ones_included_and_anything_else_one_line(tmp_path: Path) -> None:
    document = {"conditions": {"a": {}}}
    assert harness.grid_from_dict(document, seeds=np.int64(2)).run.seeds == (0, 1)
    assert harness.grid_from_dict(document, seeds=np.arange(1, 4)).run.seeds == (1, 2, 3)
    spec = harness.grid_from_dict(document, name="mine")
    for bad in (2.5, "3", [0, 1.5], True, 0):
        with pytest.raises(ConditionFileError) as raised:
            harness.run_grid(spec, seeds=bad, run_dir=tmp_path / "never")
        assert str(raised.value).startswith("grid 'mine': seeds: ") and len(str(raised.value).splitlines()) == 1
        with pytest.raises(ConditionFileError, match="seeds"):
            harness.grid_from_dict(document, seeds=bad)
    assert not (tmp_path / "never").exists()


def test_load_result_refuses_a_directory_it_cannot_trust_in_one_line(
    ran: tuple[harness.GridResult, list], tmp_path: Path
) -> None:
    result, _ = ran
    for name, damage, says in (
        ("grid.json", lambda text: text.replace('"iterations": 2', '"iterations": "two"'), "grid.json"),
        ("summary.csv", lambda text: text[:-10], "summary.csv: "),
    ):
        saved = result.save(tmp_path / name)
        path = saved.run_dir / name
        path.write_text(damage(path.read_text()))
        with pytest.raises(harness.RunDirectoryError, match=says) as raised:
            harness.load_result(saved.run_dir)
        assert len(str(raised.value).splitlines()) == 1
    # A grid.json that is not a grid, in a directory whose manifest lists no files (an earlier coevolab's).
    earlier = result.save(tmp_path / "earlier").run_dir
    manifest = json.loads((earlier / MANIFEST_FILE).read_text())
    (earlier / MANIFEST_FILE).write_text(
        json.dumps({k: v for k, v in manifest.items() if k not in ("files", "manifest_sha256")})
    )
    (earlier / "grid.json").write_text(
        (earlier / "grid.json").read_text().replace('"iterations": 2', '"iterations": "two"')
    )
    with pytest.raises(harness.RunDirectoryError, match=r"grid.json: not a grid of this coevolab: run.iterations: "):
        harness.load_result(earlier)


def readme_python_api() -> str:
    """The README's Python API example: the first python block of its "Python API" section."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Python API\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_example_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Executed exactly as written (its grid has the shape of the one above, so nothing compiles again)."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(readme_python_api(), "README.md", "exec"), namespace)
    result = namespace["result"]
    assert isinstance(result, harness.GridResult)
    assert result.summary["condition"].tolist() == ["baseline", "frozen", "slow-meta"]
    assert (tmp_path / "headline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(usable_cores() < 2, reason="JAX's one default CPU device is already one per core")
def test_use_every_cpu_core_warns_once_jax_has_started() -> None:
    """In a fresh interpreter: after a JAX operation it warns, with what to do instead; before one, it works."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_NUM_CPU_DEVICES")}

    def python(code: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-W", "error::RuntimeWarning", "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=120,
        )

    late = python("import jax; jax.numpy.zeros(1); import harness; harness.use_every_cpu_core()")
    assert late.returncode != 0
    assert "RuntimeWarning: use_every_cpu_core() came after JAX started" in late.stderr
    assert "before anything initialises JAX" in late.stderr and "JAX_NUM_CPU_DEVICES" in late.stderr
    early = python("import harness, jax; harness.use_every_cpu_core(); print(jax.device_count())")
    assert early.returncode == 0, early.stderr
    assert int(early.stdout) == usable_cores()
