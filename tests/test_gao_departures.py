"""The study report's overoptimization pieces beyond the fits: the rule that words each claim in "Where this world
departs from the literature" (harness/report/gao_departures.py), the section from hand-made verdicts, the roles a
study's conditions play (harness/report/study_roles.py), and the extrapolation table on curves of known form."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pydantic import BaseModel, ConfigDict, Field

from harness.grid import registry
from harness.grid.contract import Mechanism
from harness.grid.knobs import PERFECT_PROXY, STUDY_ROLE, Knobs, knobs_with_role
from harness.grid.spec import Condition, GridSpec, MechanismSource, PretrainSettings
from harness.grid.study import Shape, StudySpec
from harness.inference.claims import Claim
from harness.inference.overoptimization import best_of_n_gold, rl_gold
from harness.report.gao_departures import AGREES, DEPARTS, MIXED, UNDECIDED, departures_section, reading
from harness.report.overoptimization import extrapolation_table
from harness.report.study_roles import pretraining_examples, study_roles


@pytest.mark.parametrize(
    ("verdicts", "word"),
    [
        (["holds", "holds"], AGREES),
        (["holds"], AGREES),
        (["contradicted", "undecided"], DEPARTS),
        (["not supported", "not supported"], DEPARTS),
        (["holds", "contradicted"], MIXED),
        (["holds", "not supported", "undecided"], MIXED),
        (["holds", "undecided"], UNDECIDED),
        (["untested", "untested"], UNDECIDED),
        ([], UNDECIDED),
    ],
)
def test_each_word_follows_from_the_verdicts(verdicts: list[str], word: str) -> None:
    assert reading(pd.Series(verdicts, dtype=object)) == word


def _claim(name: str, source: str) -> Claim:
    return Claim(
        name=name,
        statement=f"{name} stated",
        metric="policy_quality",
        condition="rl",
        direction="above",
        than_value=0.0,
        source=source,
    )


def test_the_section_words_every_cited_claim_and_leaves_out_the_rest() -> None:
    grid = GridSpec(
        conditions=(Condition(name="rl"),),
        claims=(_claim("falls", "Gao et al. 2022"), _claim("bends", "Gao et al. 2022"), _claim("own", "")),
    )
    study = StudySpec(name="s", shapes=(Shape(name="small", grid=grid), Shape(name="large", grid=grid)))
    within = pd.DataFrame(
        {
            "shape": ["small", "large", "small", "large", "small", "large"],
            "claim": ["falls", "falls", "bends", "bends", "own", "own"],
            "verdict": ["holds", "holds", "contradicted", "undecided", "holds", "holds"],
            "effect": [0.5, 0.4, -0.2, np.nan, 1.0, 1.0],
            "ci_low": [0.1, 0.1, -0.3, np.nan, 0.5, 0.5],
            "ci_high": [0.9, 0.7, -0.1, np.nan, 1.5, 1.5],
            "why": ["w1", "w2", "w3", "w4", "w5", "w6"],
        }
    )
    extrapolation = pd.DataFrame(columns=["shape", "condition", "optimizer", "form", "fitted_to", "rmse_beyond"])
    lines = departures_section(study, within, pd.DataFrame(), {"policy_quality": "q* ends higher."}, extrapolation)
    text = "\n".join(lines)
    assert lines[0] == "## Where this world departs from the literature"
    assert "Of 2 claims: agrees 1, departs 1, mixed 0, undecided 0." in text
    assert "- **falls stated** (Gao et al. 2022): agrees." in text
    assert "- **bends stated** (Gao et al. 2022): departs." in text
    assert "  - small: **contradicted** (effect -0.200 [-0.300, -0.100]; w3)" in text
    assert text.count("Baselines: q* ends higher.") == 2
    assert "own stated" not in text
    uncited = GridSpec(conditions=(Condition(name="rl"),), claims=(_claim("own", ""),))
    alone = StudySpec(name="s", shapes=(Shape(name="small", grid=uncited),))
    assert departures_section(alone, within, pd.DataFrame(), {}, extrapolation) == []


def test_roles_are_found_from_the_knobs() -> None:
    judged = Knobs(freeze_judge=True, judge_pretrain_steps=1000)
    conditions = (
        Condition(name="base", knobs=judged),
        Condition(name="data-64", knobs=judged.model_copy(update={"judge_pretrain_examples": 64})),
        Condition(name="gold", knobs=judged.model_copy(update={"reward_from_q_star": True})),
        Condition(name="kl", knobs=judged.model_copy(update={"kl_penalty": 0.3})),
        Condition(name="gold-kl", knobs=judged.model_copy(update={"reward_from_q_star": True, "kl_penalty": 0.3})),
        Condition(name="noisy", knobs=judged.model_copy(update={"reward_from_noisy_q_star": True})),
    )
    big = GridSpec(conditions=conditions)
    small = GridSpec(conditions=(conditions[0], conditions[3]))
    study = StudySpec(name="s", shapes=(Shape(name="small", grid=small), Shape(name="big", grid=big)))
    roles = study_roles(study)
    assert (roles.reference, roles.base, roles.data, roles.perfect_proxy, roles.noisy_proxy) == (
        "big",
        "base",
        ("base", "data-64"),
        "gold",
        "noisy",
    )


class _LabOracleKnobs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    reward_from_lab_oracle: bool = Field(False, json_schema_extra={STUDY_ROLE: PERFECT_PROXY})


def test_a_labs_knob_plays_the_role_it_declares() -> None:
    """A lab's mechanism whose knob declares the perfect-proxy role: the condition that sets it, and differs from the
    base in nothing else, is the study's perfect proxy, and is never taken for the base."""
    lab = Mechanism(name="lab_oracle", summary="the policy rewarded by a lab's oracle", knobs=_LabOracleKnobs)
    with registry.restored_catalog():
        registry.register(lab, module="lab_oracle.py", digest="0" * 64)
        assert knobs_with_role(PERFECT_PROXY) == ("reward_from_q_star", "reward_from_lab_oracle")
        oracle = Knobs(freeze_judge=True, reward_from_lab_oracle=True)
        grid = GridSpec(
            mechanisms=(MechanismSource(name="lab_oracle", module="lab_oracle.py", digest="0" * 64),),
            conditions=(Condition(name="oracle", knobs=oracle), Condition(name="base", knobs=Knobs(freeze_judge=True))),
        )
        roles = study_roles(StudySpec(name="s", shapes=(Shape(name="only", grid=grid),)))
    assert (roles.base, roles.perfect_proxy, roles.noisy_proxy) == ("base", "oracle", None)


def test_pretraining_examples_are_what_each_conditions_judges_saw() -> None:
    """A fixed dataset's size; with fresh draws, steps × batch: the condition's fixed steps, else the grid's cap."""
    grid = GridSpec(
        pretrain=PretrainSettings(batch_size=32, max_steps=4000),
        conditions=(
            Condition(name="dataset", knobs=Knobs(judge_pretrain_examples=64, judge_pretrain_steps=1000)),
            Condition(name="fixed-steps", knobs=Knobs(judge_pretrain_steps=1000)),
            Condition(name="to-target"),
        ),
    )
    examples = {c.name: pretraining_examples(grid, c.name) for c in grid.conditions}
    assert examples == {"dataset": 64, "fixed-steps": 32_000, "to-target": 128_000}


def test_extrapolation_recovers_curves_of_each_form_exactly() -> None:
    """Curves exactly of Gao's forms: fitted on the early points, each form of its own kind predicts the rest with
    no error; the quadratic cannot follow d·ln d beyond its fit."""
    n = np.unique(np.rint(np.geomspace(1, 1e6, 31)))
    d_bon = np.sqrt(np.log(n) - (n - 1) / n)
    iterations = np.arange(41)
    d_rl = 0.08 * iterations
    rows = [
        ("s", "rl", seed, "best_of_n", "judges", step, d, best_of_n_gold(d, 2.0, 0.2))
        for seed in range(3)
        for step, d in zip(n, d_bon, strict=True)
    ]
    rows += [
        ("s", "rl", seed, "rl", "judges", step, d, rl_gold(d, 1.0, 0.5))
        for seed in range(3)
        for step, d in zip(iterations, d_rl, strict=True)
    ]
    points = pd.DataFrame(rows, columns=["shape", "condition", "seed", "optimizer", "scorer", "step", "d", "gold_gain"])
    table = extrapolation_table(points).set_index(["optimizer", "form"])
    assert table.loc[("best_of_n", "best_of_n"), "rmse_beyond"] == pytest.approx(0.0, abs=1e-9)
    assert table.loc[("best_of_n", "best_of_n"), "fitted_to"] == "n ≤ 1,000"
    bon = table.loc[("best_of_n", "best_of_n")]
    assert bon["predicted_end"] == pytest.approx(bon["actual_end"], abs=1e-9)
    assert table.loc[("rl", "rl"), "rmse_beyond"] == pytest.approx(0.0, abs=1e-9)
    assert table.loc[("rl", "rl"), "fitted_to"] == "iteration ≤ 20"
    assert table.loc[("rl", "quadratic"), "rmse_beyond"] > 1e-3


def test_the_extrapolation_lines_count_the_closer_form_and_quote_the_base_condition() -> None:
    rows = [
        ("small", "rl", "best_of_n", "best_of_n", "n ≤ 1,000", 0.5, 5.0, 4.0),
        ("small", "rl", "best_of_n", "quadratic", "n ≤ 1,000", 0.4, 4.5, 4.0),
        ("small", "kl", "best_of_n", "best_of_n", "n ≤ 1,000", 0.1, 4.1, 4.0),
        ("small", "kl", "best_of_n", "quadratic", "n ≤ 1,000", 0.2, 4.4, 4.0),
    ]
    columns = ["shape", "condition", "optimizer", "form", "fitted_to", "rmse_beyond", "predicted_end", "actual_end"]
    grid = GridSpec(conditions=(Condition(name="rl"),), claims=(_claim("falls", "Gao et al. 2022"),))
    study = StudySpec(name="s", shapes=(Shape(name="small", grid=grid),))
    within = pd.DataFrame({"shape": ["small"], "claim": ["falls"], "verdict": ["holds"], "why": ["w"]})
    lines = departures_section(study, within, pd.DataFrame(), {}, pd.DataFrame(rows, columns=columns), base="rl")
    text = "\n".join(lines)
    assert "Gao's form predicts the rest more closely than the quadratic in 1 of 2 curves" in text
    assert (
        "  - small, rl: at the last step Gao's form predicts a gold gain of 5.000, the quadratic 4.500; reached: 4.000."
        in text
    )
