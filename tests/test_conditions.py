"""Condition files: defaults, sweeps, zipped sweeps, and a clear message for every mistake."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.grid.conditions import ConditionFileError, load_grid, parse_grid
from harness.grid.knobs import Knobs, knob_fields
from harness.grid.spec import GridSpec, RunSettings
from harness.mechanisms.ensemble import MAX_JUDGES

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text(text)
    return path


def test_paper_file_is_the_published_grid() -> None:
    spec = load_grid(ROOT / "conditions" / "paper.toml")
    assert len(spec.conditions) == 18
    assert spec.run.seeds == (0, 1, 2, 3, 4)
    assert (spec.run.iterations, spec.run.steps_per_iteration, spec.run.batch_size) == (10, 200, 64)
    knobs = {c.name: c.knobs for c in spec.conditions}
    assert knobs["baseline"] == Knobs()
    assert knobs["frozen"].freeze_judge
    assert sorted(k.judge_update_every for n, k in knobs.items() if n.startswith("slow-judge")) == [2, 5, 10]
    assert sorted(k.n_judges for k in knobs.values()) == [1] * 16 + [3, 5]
    assert sorted(k.anchor_fraction for k in knobs.values() if k.anchor_fraction) == [0.05, 0.1]
    meta = [k for k in knobs.values() if k.meta_holdout_fraction > 0]
    assert sorted((k.judge_update_every, k.meta_update_every, k.meta_holdout_fraction) for k in meta) == [
        (1, 1, 0.05),
        (1, 1, 0.05),
        (1, 10, 0.05),
        (1, 200, 0.05),
        (10, 10, 0.05),
        (10, 10, 0.1),
        (200, 200, 0.05),
    ]
    assert {c.name for c in spec.conditions if c.boundary} == {
        "frozen",
        "anchor[anchor_fraction=0.05]",
        "anchor[anchor_fraction=0.1]",
    }


def test_example_and_smoke_files_load() -> None:
    example = load_grid(ROOT / "conditions" / "example.toml")
    assert len(example.conditions) == 1 + 3 + 4 + 2
    smoke = load_grid(ROOT / "conditions" / "smoke.toml")
    assert (len(smoke.conditions), len(smoke.run.seeds), smoke.run.iterations, smoke.run.steps_per_iteration) == (
        3,
        2,
        2,
        20,
    )


def test_defaults_fill_everything_unset(tmp_path: Path) -> None:
    spec = load_grid(write(tmp_path, "[conditions.only]\n"))
    assert spec.run.seeds == (0, 1, 2, 3, 4)
    assert spec.world.vocab_size == 8 and spec.world.seq_len == 4
    assert spec.conditions[0].knobs == Knobs()
    assert spec.name == "grid"


def test_sweeps_expand_to_the_product_with_generated_names(tmp_path: Path) -> None:
    spec = load_grid(write(tmp_path, "[conditions.s]\nn_judges = [1, 3]\njudge_update_every = [2, 5, 10]\n"))
    names = [c.name for c in spec.conditions]
    assert len(names) == 6
    assert "s[n_judges=3,judge_update_every=5]" in names
    assert {(c.knobs.n_judges, c.knobs.judge_update_every) for c in spec.conditions} == {
        (n, k) for n in (1, 3) for k in (2, 5, 10)
    }


def test_zipped_lists_advance_together(tmp_path: Path) -> None:
    text = (
        "[conditions.z]\njudge_update_every = [1, 10]\nmeta_update_every = [1, 10]\n"
        'zip = ["judge_update_every", "meta_update_every"]\n'
    )
    spec = load_grid(write(tmp_path, text))
    assert [(c.knobs.judge_update_every, c.knobs.meta_update_every) for c in spec.conditions] == [(1, 1), (10, 10)]


def test_seed_override_count_or_list(tmp_path: Path) -> None:
    path = write(tmp_path, "[conditions.a]\n")
    assert load_grid(path, seeds=3).run.seeds == (0, 1, 2)  # a count
    assert load_grid(path, seeds=[3]).run.seeds == (3,)  # a list of one seed
    assert load_grid(path, seeds=[4, 9]).run.seeds == (4, 9)


@pytest.mark.parametrize(
    ("text", "condition", "key", "fragment"),
    [
        ("[conditions.a]\njudge_update_evry = 2\n", "a", "judge_update_evry", "did you mean 'judge_update_every'"),
        ("[conditions.a]\nanchor_fraction = 1.5\n", "a", "anchor_fraction", "less than or equal to 1"),
        ("[conditions.a]\nmeta_holdout_fraction = -0.1\n", "a", "meta_holdout_fraction", "greater than or equal"),
        ("[conditions.a]\njudge_update_every = 0\n", "a", "judge_update_every", "greater than or equal to 1"),
        ("[conditions.a]\nmeta_update_every = 0\n", "a", "meta_update_every", "greater than or equal to 1"),
        ("[conditions.a]\nn_judges = 0\n", "a", "n_judges", "greater than or equal to 1"),
        (f"[conditions.a]\nn_judges = {MAX_JUDGES + 1}\n", "a", "n_judges", "less than or equal"),
        ('[conditions.a]\nfreeze_judge = "yes"\n', "a", "freeze_judge", "valid boolean"),
        ('[conditions.a]\nlr_judge = "fast"\n', "a", "lr_judge", "valid number"),
        ("[conditions.a]\nn_judges = [1, 2.5]\n", "a[n_judges=2.5]", "n_judges", "integer"),
        ("[run]\niterations = 0\n[conditions.a]\n", None, "run.iterations", "greater than or equal to 1"),
        ("[run]\nsteps_per_iteration = 0\n[conditions.a]\n", None, "run.steps_per_iteration", "greater than"),
        ("[run]\nseeds = [1, -2]\n[conditions.a]\n", None, "run.seeds", "non-negative"),
        ("[run]\nseeds = [1, 1]\n[conditions.a]\n", None, "run.seeds", "distinct"),
        ("[run]\nseeds = 0\n[conditions.a]\n", None, "run.seeds", "at least 1"),
        ("[run]\nseeds = 99999999\n[conditions.a]\n", None, "run.seeds", "at most 10,000"),
        (f"[run]\nseeds = {list(range(10_001))}\n[conditions.a]\n", None, "run.seeds", "at most 10,000 seeds"),
        ("[world]\nvocab_size = 64\nseq_len = 8\n[conditions.a]\n", None, "world", "enumerate"),
        ("[wrld]\n[conditions.a]\n", None, "wrld", "did you mean 'world'"),
        ("[run]\n", None, "conditions", "no conditions"),
        ("[conditions.a]\n[conditions.b]\n[conditions.a2]\nn_judges = [1]\n", None, None, None),
    ],
)
def test_mistakes_name_file_condition_and_key(tmp_path: Path, text, condition, key, fragment) -> None:
    path = write(tmp_path, text)
    if fragment is None:
        load_grid(path)  # the control case loads
        return
    with pytest.raises(ConditionFileError) as caught:
        load_grid(path)
    error = caught.value
    assert error.file == str(path)
    assert error.condition == condition
    assert error.key == key
    assert fragment in str(error)
    assert str(path) in str(error)


def test_duplicate_names_after_sweep_expansion(tmp_path: Path) -> None:
    text = '[conditions."a[n_judges=2]"]\nn_judges = 2\n[conditions.a]\nn_judges = [2]\n'
    with pytest.raises(ConditionFileError, match="two conditions have this name"):
        load_grid(write(tmp_path, text))


def test_malformed_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConditionFileError, match="not valid TOML"):
        load_grid(write(tmp_path, "[conditions.a\nx = 1\n"))
    with pytest.raises(ConditionFileError, match="no such file"):
        load_grid(tmp_path / "missing.toml")


KNOB_VALUES = st.one_of(
    st.integers(-5, 300),
    st.floats(-2, 2),
    st.just(float("nan")),
    st.booleans(),
    st.text(string.ascii_letters, max_size=4),
    st.lists(st.integers(-2, 20), max_size=3),
)
KEYS = st.sampled_from([*knob_fields(), "zip", "description", "boundary", "judge_update_evry", "bogus"])


@settings(max_examples=150, deadline=None)
@given(
    conditions=st.dictionaries(
        st.text(string.ascii_lowercase + "-", min_size=1, max_size=6),
        st.dictionaries(KEYS, KNOB_VALUES, max_size=4),
        max_size=3,
    ),
    run=st.dictionaries(
        st.sampled_from(["seeds", "iterations", "steps_per_iteration", "batch_size", "bogus"]), KNOB_VALUES, max_size=3
    ),
)
def test_any_document_loads_or_fails_with_a_located_message(conditions, run) -> None:
    document = {"run": run, "conditions": conditions}
    tomli_w.dumps(document)  # every generated document is representable as TOML
    try:
        spec = parse_grid(document, "prop.toml")
    except ConditionFileError as error:
        assert str(error).startswith("prop.toml")
        assert error.key is not None or error.condition is not None
    else:
        assert isinstance(spec, GridSpec)
        assert len(spec.conditions) >= 1


@pytest.mark.parametrize(
    ("document", "condition", "key", "detail"),
    [
        ({"conditions": {"a": {"judge_pretrain_steps": 1}}}, "a", None, "pretrains its judges for 1 steps"),
        (
            {"run": {"streams": "original"}, "conditions": {"a": {"judge_pretrain_examples": 64}}},
            "a",
            None,
            "the original lab's streams draw fresh, uncorrupted batches only",
        ),
        (
            {"run": {"streams": "original"}, "model": {"policy_hidden_dim": 64}, "conditions": {"a": {}}},
            None,
            "model",
            "a non-default [model] needs streams = 'coevolab'",
        ),
    ],
)
def test_a_rule_across_tables_is_located(document: dict, condition: str | None, key: str | None, detail: str) -> None:
    # Found by the property test above: a rule the grid checks across its tables named neither condition nor key.
    with pytest.raises(ConditionFileError) as caught:
        parse_grid(document, "rules.toml")
    assert (caught.value.condition, caught.value.key) == (condition, key)
    assert detail in str(caught.value) and str(caught.value).count("condition '") == (condition is not None)


def test_the_old_name_of_coevolab_streams_still_reads() -> None:
    # Earlier condition files and every committed run's grid.json name coevolab's own streams "harness".
    assert RunSettings.model_validate({"streams": "harness"}).streams == "coevolab"
    assert RunSettings().streams == "coevolab"
    reference = Path(__file__).resolve().parent.parent / "artifacts" / "reference" / "paper" / "grid.json"
    assert '"streams": "harness"' in reference.read_text()
    assert GridSpec.model_validate_json(reference.read_text()).run.streams == "coevolab"
    with pytest.raises(ValueError, match="streams"):
        RunSettings.model_validate({"streams": "ours"})
