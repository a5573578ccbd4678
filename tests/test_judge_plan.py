"""How many judges a condition's runs have and how they are pretrained: one host-side hook, `judge_plan(plan, knobs)
-> plan`, passed from one mechanism to the next (`ensemble` sets the count, `judge_strength` the target, `judge_data`
the data), so a lab's mechanism can change what a built-in planned instead of being refused as a clash."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from harness.grid import registry
from harness.grid.contract import JudgePlan, Mechanism, PretrainData
from harness.grid.knobs import Knobs
from harness.grid.spec import Condition, GridSpec, MechanismSource, judge_plan, judges_per_run


def test_the_built_ins_plan_one_judge_at_the_grids_target_on_fresh_data_unless_the_knobs_say_otherwise() -> None:
    assert judge_plan(Knobs(), registry.active()) == JudgePlan(count=1, target=None, data=PretrainData(0, 0.0, 0))
    knobs = Knobs(n_judges=3, judge_pretrain_target=0.5, judge_pretrain_examples=64, judge_label_corruption=0.25)
    assert judge_plan(knobs, registry.active()) == JudgePlan(3, 0.5, PretrainData(64, 0.25, 0))


def _one_more(plan: JudgePlan, knobs: Knobs) -> JudgePlan:
    return plan._replace(count=plan.count + 1)


@pytest.mark.parametrize(("order", "judges"), [({}, 4), ({"before": ("ensemble",)}, 3)])
def test_a_loaded_plan_hook_changes_the_plan_the_mechanisms_before_it_left(order: dict, judges: int) -> None:
    """After `ensemble` it adds a judge to the ensemble's 3; placed before it, the ensemble's count replaces its 2."""
    with registry.restored_catalog():
        registry.register(
            Mechanism("one_more", "one more judge", judge_plan=_one_more, **order), module="one_more.py", digest="0"
        )
        assert judges_per_run(Knobs(n_judges=3), registry.active(["one_more"])) == judges


def test_a_plan_hook_that_returns_no_judge_is_one_line() -> None:
    def none_left(plan: JudgePlan, knobs: Knobs) -> JudgePlan:
        return plan._replace(count=0)

    with registry.restored_catalog():
        registry.register(Mechanism("none_left", "no judges", judge_plan=none_left), module="none_left.py", digest="0")
        with pytest.raises(registry.MechanismError) as refused:
            judges_per_run(Knobs(), registry.active(["none_left"]))
    assert str(refused.value) == (
        "mechanism 'none_left': hook 'judge_plan' returns "
        "JudgePlan(count=0, target=None, data=PretrainData(examples=0, corruption=0.0, fixed_steps=0)), "
        "not a JudgePlan of at least one judge"
    )


def test_the_original_baseline_script_keeps_one_judge_by_the_plan_of_the_grids_own_mechanisms() -> None:
    """The original's baseline script pretrains one judge: a condition run as it is refused in one line where its
    runs would have more, by the built-ins' plan (an ensemble) or by a mechanism the grid loads (`one_more`). A grid
    that does not load `one_more` keeps its one judge, whatever else the process registered (the check once asked
    the built-ins alone, and passed the first such grid)."""
    one_more = MechanismSource(name="one_more", module="one_more.py", digest="0")

    def grid(knobs: Knobs, mechanisms: tuple[MechanismSource, ...] = ()) -> GridSpec:
        condition = Condition(name="original", knobs=knobs, original_script="baseline")
        return GridSpec(mechanisms=mechanisms, conditions=(condition,))

    with registry.restored_catalog():
        registry.register(
            Mechanism("one_more", "one more judge", judge_plan=_one_more), module="one_more.py", digest="0"
        )
        assert judges_per_run(Knobs(), grid(Knobs()).active_mechanisms) == 1
        for knobs, mechanisms, judges in ((Knobs(n_judges=3), (), 3), (Knobs(), (one_more,), 2)):
            with pytest.raises(ValidationError) as refused:
                grid(knobs, mechanisms)
            assert str(refused.value.errors()[0]["ctx"]["error"]) == (
                f"condition 'original', key 'original_script': the original's baseline script pretrains one judge, "
                f"and this condition's runs have {judges}"
            )
