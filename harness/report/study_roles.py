"""The parts a study's overoptimization comparisons play, found from its conditions' knobs: no condition or shape is
named in code, so another study of the same design gets the same section."""

from __future__ import annotations

import dataclasses

from harness.grid.knobs import DATA_SIZE, NOISY_PROXY, PERFECT_PROXY, Knobs, knobs_with_role
from harness.grid.spec import GridSpec
from harness.grid.study import StudySpec


def pretraining_examples(grid: GridSpec, condition: str) -> int:
    """How many examples a condition's judges were pretrained on, as its `JudgePlan` says
    (`GridSpec.judge_data`): its fixed dataset's size, or with fresh draws its fixed steps × batch; for judges
    pretrained to a target, the most they may draw, the grid's step cap × batch."""
    data = grid.judge_data(grid.condition(condition))
    if data.examples:
        return data.examples
    return (data.fixed_steps or grid.pretrain.max_steps) * grid.pretrain.batch_size


@dataclasses.dataclass(frozen=True)
class StudyRoles:
    """What the section's comparisons read, found from the study's conditions and the roles their knobs declare
    (`harness.grid.knobs.STUDY_ROLE`; no condition or knob is named in code): reference: the shape with the most
    conditions (the first such); base: the first condition every shape has that sets no proxy knob (it is rewarded
    by its judges); data: the reference shape's conditions whose knobs differ from the base's only in data-size knobs
    (the base among them); perfect_proxy: the reference shape's condition that differs from the base only in a
    perfect-proxy knob being set (rewarded by q* itself), or None; noisy_proxy: the one that differs from the base
    only in a noisy-proxy knob being set (rewarded by q* plus random errors at its judges' alignment), or None."""

    reference: str
    base: str
    data: tuple[str, ...]
    perfect_proxy: str | None
    noisy_proxy: str | None = None


def _knobs_apart_from(knobs: Knobs, names: tuple[str, ...]) -> dict[str, object]:
    return {key: value for key, value in knobs.model_dump().items() if key not in names}


def study_roles(study: StudySpec) -> StudyRoles:
    """The `StudyRoles` of a study."""
    perfect, noisy, data_size = (knobs_with_role(role) for role in (PERFECT_PROXY, NOISY_PROXY, DATA_SIZE))
    reference = max(study.shapes, key=lambda shape: len(shape.grid.conditions))
    everywhere = set.intersection(*({c.name for c in shape.grid.conditions} for shape in study.shapes))
    own = reference.grid.condition_knobs
    base = next(
        (
            c.name
            for c in reference.grid.conditions
            if c.name in everywhere and not any(getattr(c.knobs, knob) for knob in perfect + noisy)
        ),
        reference.grid.conditions[0].name,
    )
    data = tuple(
        name
        for name, knobs in own.items()
        if _knobs_apart_from(knobs, data_size) == _knobs_apart_from(own[base], data_size)
    )

    def differing_only_in(knob_names: tuple[str, ...]) -> str | None:
        return next(
            (
                name
                for name, knobs in own.items()
                for knob in knob_names
                if getattr(knobs, knob) and _knobs_apart_from(knobs, (knob,)) == _knobs_apart_from(own[base], (knob,))
            ),
            None,
        )

    return StudyRoles(reference.name, base, data, differing_only_in(perfect), differing_only_in(noisy))
