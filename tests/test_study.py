"""Studies: a condition file of several shapes (worlds, networks) run as one program per shape, and the claims
across shapes, tested by simulation with known truth."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.common.integrity import DIGEST_KEY, FILES_KEY, read_manifest, write_manifest
from harness.common.run_files import LEGACY_METRICS_FILE, METRICS_FILE, read_metrics_text
from harness.engine.world import WorldConfig
from harness.experiment.blocks import BlockError
from harness.experiment.merge import IN_PROCESS, run_in_blocks
from harness.experiment.study import run_study, write_study_files
from harness.grid.conditions import ConditionFileError, grid_from_mapping
from harness.grid.study import load_study, parse_study
from harness.inference.across_shapes import AcrossClaim, across_table
from harness.inference.run_measures import q_star_range, run_measures
from harness.report.study import FIGURE, MODEL_COLUMNS, SHAPE_COLUMNS
from tests.run_directories import in_process
from tools.study_block import study_block

TINY = {
    "run": {"seeds": 2, "iterations": 2, "steps_per_iteration": 5, "batch_size": 16},
    # Two positions (tests/worlds.py); 4 and 5 tokens for the two shapes (at 3, 9 outputs, a judge can miss its target).
    "world": {"vocab_size": 4, "seq_len": 2},
    "pretrain": {"max_steps": 100, "check_every": 50},
    "conditions": {"baseline": {}, "frozen": {"boundary": True, "freeze_judge": True}},
    "claims": {
        "frozen-above": {
            "statement": "frozen ends above baseline",
            "metric": "policy_quality",
            "condition": "frozen",
            "direction": "above",
            "than_condition": "baseline",
        }
    },
}


def _study(**extra: object) -> dict:
    shapes = {"small": {}, "wide": {"world": {"vocab_size": 5}, "model": {"judge_hidden_dim": 48}}}
    return {**TINY, "shapes": shapes, **extra}


def test_a_shape_is_the_files_grid_with_its_world_and_model_replaced_key_by_key() -> None:
    study = parse_study(_study(), "study.toml", "study")
    small, wide = (shape.grid for shape in study.shapes)
    assert (small.world.vocab_size, small.world.seq_len, small.model.judge.hidden_dim) == (4, 2, 32)
    assert (wide.world.vocab_size, wide.world.seq_len, wide.model.judge.hidden_dim) == (5, 2, 48)
    assert wide.model.policy == small.model.policy and wide.run == small.run
    alone = grid_from_mapping({**TINY, "world": {"vocab_size": 5, "seq_len": 2}, "model": {"judge_hidden_dim": 48}})
    assert wide.model_dump(exclude={"name"}) == alone.model_dump(exclude={"name"})


def test_a_shape_may_keep_some_conditions_and_the_claims_they_answer() -> None:
    study = parse_study(_study(shapes={"small": {}, "only-base": {"conditions": ["baseline"]}}), "s.toml", "s")
    kept = study.shape("only-base").grid
    assert [c.name for c in kept.conditions] == ["baseline"] and kept.claims == ()
    assert [c.name for c in study.shape("small").grid.claims] == ["frozen-above"]


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"shapes": {"a": {"wrold": {}}}}, "shapes.a.wrold"),
        ({"shapes": {"a": {"world": {"vocab_size": 1}}}}, "world.vocab_size"),
        ({"shapes": {"a": {"conditions": ["nope"]}}}, "shapes.a.conditions"),
        ({"across": {"c": {"statement": "s", "measure": "nope", "condition": "baseline", "shape": "small",
                           "than_shape": "wide"}}}, None),
        ({"across": {"c": {"statement": "s", "within": "no-such-claim"}}}, None),
    ],
)  # fmt: skip
def test_mistakes_name_the_file_and_the_key(extra: dict, key: str | None) -> None:
    with pytest.raises(ConditionFileError) as error:
        parse_study(_study(**extra), "study.toml", "study")
    assert error.value.file == "study.toml"
    if key is not None:
        assert error.value.key == key


def test_a_study_read_as_a_grid_says_what_it_is() -> None:
    with pytest.raises(ConditionFileError, match="a study"):
        grid_from_mapping(_study())


def test_the_scale_study_file_parses_with_its_claims() -> None:
    study = load_study(Path(__file__).resolve().parents[1] / "conditions" / "scale.toml")
    sizes = {shape.name: shape.grid.world.n_outputs for shape in study.shapes}
    assert sizes["w8x4"] == 4_096 and sizes["w16x4"] == 65_536 and sizes["w8x6"] == 262_144
    assert {c.kind for c in study.across} == {"between", "every"}
    assert {shape.grid.model.judge.family for shape in study.shapes} == {"gru", "attention"}


def test_a_study_runs_every_shape_labelled_and_each_equals_its_grid_run_alone(tmp_path: Path) -> None:
    study = parse_study(_study(), "study.toml", "study")
    outcome = run_study(study, tmp_path / "study")
    metrics = pd.read_csv(tmp_path / "study" / "metrics.csv.gz")
    assert list(metrics["shape"].unique()) == ["small", "wide"]
    assert set(metrics.groupby("shape")["vocab_size"].unique().map(tuple)) == {(4,), (5,)}
    assert len(outcome.measures) == 2 * 2 * 2  # shapes × conditions × seeds
    for shape in study.shapes:
        alone = run_in_blocks(shape.grid, tmp_path / shape.name, figures=False).metrics
        own = metrics[metrics["shape"] == shape.name].drop(columns=[*SHAPE_COLUMNS, *MODEL_COLUMNS])
        pd.testing.assert_frame_equal(own.reset_index(drop=True), alone.reset_index(drop=True), check_exact=True)
    across = pd.read_csv(tmp_path / "study" / "across.csv")
    assert across.empty  # the tiny study states no across claims
    report = (tmp_path / "study" / "report.md").read_text()
    assert report.startswith("# Study study: 2 shapes") and f"]({FIGURE})" in report
    # Without figures: the same report less its figures' lines, and nothing drawn.
    text_only = shutil.copytree(tmp_path / "study", tmp_path / "text-only", ignore=shutil.ignore_patterns("*.png"))
    write_study_files(study, text_only, IN_PROCESS, figures=False)
    assert not list(text_only.glob("figures/*.png"))
    assert (text_only / "report.md").read_text() == re.sub(r"!\[[^\]]*\]\([^)]*\.png\)\n\n", "", report)
    # A second run resumes: every shape is finished, so only the merge runs again, to the same bytes.
    before = {name: (tmp_path / "study" / name).read_bytes() for name in ("runs.csv", "report.md", "metrics.csv.gz")}
    run_study(None, tmp_path / "study")
    assert {name: (tmp_path / "study" / name).read_bytes() for name in before} == before
    assert study_block(tmp_path / "study").startswith("2 shapes × 2 conditions × 2 seeds (8 runs)")
    # A study of coevolab 0.3 (a plain metrics.csv, listed by its manifest) is re-reported into the current form and
    # still verifies.
    earlier = shutil.copytree(tmp_path / "study", tmp_path / "earlier")
    (earlier / LEGACY_METRICS_FILE).write_text(read_metrics_text(earlier / METRICS_FILE))
    (earlier / METRICS_FILE).unlink()
    write_manifest(earlier, {k: v for k, v in read_manifest(earlier).items() if k not in (FILES_KEY, DIGEST_KEY)})
    assert LEGACY_METRICS_FILE in read_manifest(earlier)[FILES_KEY]
    code, _, err = in_process("report", earlier, "--no-figures")
    assert code == 0, err
    assert in_process("verify", earlier)[0] == 0
    assert not (earlier / LEGACY_METRICS_FILE).exists() and (earlier / METRICS_FILE).is_file()
    # A study of other grids in that directory is refused, before anything runs or is written.
    other = parse_study(_study(run={**TINY["run"], "steps_per_iteration": 6}), "study.toml", "study")
    written = (tmp_path / "study" / "study.json").read_bytes()
    with pytest.raises(BlockError, match="another grid"):
        run_study(other, tmp_path / "study")
    assert (tmp_path / "study" / "study.json").read_bytes() == written


def test_run_measures_by_hand() -> None:
    """Two runs of one condition end at mode X, one at mode Y (higher q*): X is the dominant mode."""
    world = WorldConfig(vocab_size=2, seq_len=2)
    rows = []
    for seed, (mode, quality, entropy) in enumerate([("X", 0.2, 0.5), ("X", 0.2, 2.0), ("Y", 0.6, 0.3)]):
        rows.append(("c", seed, 0, 0.0, 3.0, "Z", -0.5))
        rows.append(("c", seed, 1, quality, entropy, mode, quality))
    columns = ["condition", "seed", "iteration", "policy_quality", "policy_entropy", "mode_sequence", "mode_quality"]
    table = run_measures(pd.DataFrame(rows, columns=columns), world)
    low, high = q_star_range(world)
    np.testing.assert_array_equal(table["at_dominant_mode"], [1.0, 1.0, 0.0])
    np.testing.assert_allclose(table["end_mode_gap"], (high - np.array([0.2, 0.2, 0.6])) / (high - low))
    np.testing.assert_array_equal(table["entropy_collapse_iteration"], [1.0, 2.0, 1.0])  # never collapsed: final + 1
    np.testing.assert_array_equal(table["ceiling_iteration"], [1.0, 1.0, 1.0])


def _between(direction: str = "above", resolution: float = 0.05) -> AcrossClaim:
    return AcrossClaim(
        name="c",
        statement="s",
        measure="policy_quality",
        condition="base",
        shape="big",
        than_shape="small",
        direction=direction,
        resolution=resolution,
    )


def _end_modes(rng: np.random.Generator, n: int, share_high: float) -> np.ndarray:
    """Per-run end qualities shaped like real ones: one of two end modes (0.8 or 1.0), plus float noise."""
    return np.where(rng.random(n) < share_high, 1.0, 0.8) + rng.normal(0.0, 1e-6, n)


def _verdicts(claim: AcrossClaim, shares: tuple[float, float], experiments: int, seed: int) -> list[tuple[str, bool]]:
    """(verdict, interval covers the true difference) of simulated studies, 20 runs a side as in the scale study,
    paired by seed (here drawn independently, so the pairs carry no shared stream)."""
    rng = np.random.default_rng(seed)
    truth = 0.2 * (shares[0] - shares[1])
    out = []
    for _ in range(experiments):
        values = np.concatenate([_end_modes(rng, 20, shares[0]), _end_modes(rng, 20, shares[1])])
        measures = pd.DataFrame(
            {
                "shape": ["big"] * 20 + ["small"] * 20,
                "seed": [*range(20)] * 2,
                "condition": "base",
                "policy_quality": values,
            }
        )
        row = across_table([claim], measures, pd.DataFrame()).iloc[0]
        out.append((row["verdict"], row["ci_low"] <= truth <= row["ci_high"]))
    return out


def test_between_shapes_a_true_difference_of_zero_rarely_gives_a_verdict() -> None:
    """Both shapes end at the high mode 70% of the time: "holds" or "contradicted" at most 5% + 3 sd of MC error."""
    outcomes = _verdicts(_between(), (0.7, 0.7), 150, seed=1)
    wrong = np.mean([verdict in ("holds", "contradicted") for verdict, _ in outcomes])
    assert wrong <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / 150)
    coverage = np.mean([covered for _, covered in outcomes])
    assert coverage >= 0.88  # BCa at 20 runs a side; nominal 95%


def test_between_shapes_a_real_difference_is_found_in_its_direction_and_never_contradicted() -> None:
    """The larger shape ends high 90% of the time against 30%: Δ = +0.12 in quality."""
    above = _verdicts(_between("above"), (0.9, 0.3), 60, seed=2)
    assert np.mean([verdict == "holds" for verdict, _ in above]) >= 0.8
    below = _verdicts(_between("below"), (0.9, 0.3), 60, seed=2)
    assert np.mean([verdict == "contradicted" for verdict, _ in below]) >= 0.8
    assert not any(verdict == "holds" for verdict, _ in below)


def test_an_every_shape_claim_holds_only_where_every_shape_holds() -> None:
    claim = AcrossClaim(name="e", statement="s", within="w")

    def row(*verdicts: str, p: float = 0.001) -> pd.Series:
        rows = [("w", "policy_quality", f"s{k}", 0.1, p, verdict) for k, verdict in enumerate(verdicts)]
        within = pd.DataFrame(rows, columns=["claim", "metric", "shape", "effect", "p_adjusted", "verdict"])
        return across_table([claim], pd.DataFrame(), within).iloc[0]

    expected = {
        ("holds", "holds"): "holds",
        ("holds", "contradicted"): "contradicted",
        ("holds", "not supported"): "not supported",
        ("holds", "undecided"): "undecided",
    }
    for shapes, verdict in expected.items():
        assert row(*shapes)["verdict"] == verdict
    # A contradiction in one of 8 shapes is a statement about some shape: its p is multiplied by 8.
    assert row("contradicted", *["holds"] * 7, p=0.005)["p_value"] == pytest.approx(0.04)
    assert row("contradicted", *["holds"] * 7, p=0.01)["verdict"] == "undecided"  # 0.08 > 0.05
