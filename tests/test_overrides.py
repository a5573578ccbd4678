"""`--set KEY=VALUE` (harness.grid.overrides): a value set on the command line is the grid a file with that value
written in it gives (the independent reference: the file itself, written with tomli_w), every mistake is the file's
one-line error naming the key, the run's grid.json records it, and `--resume` refuses an override that changes it.
And the other check a run makes before any work: an optional part it was asked for (--tensorboard) is installed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import tomli_w
from hypothesis import given, settings
from hypothesis import strategies as st

from harness import cli
from harness.grid.conditions import ConditionFileError, load_grid
from harness.grid.overrides import OverrideError, changes, parse_override
from tests.run_directories import grid_file, in_process

BASE = {
    "run": {"seeds": 2, "iterations": 2, "steps_per_iteration": 10, "batch_size": 16},
    "world": {"vocab_size": 4, "seq_len": 2},
    "conditions": {"baseline": {}, "slow": {"judge_update_every": 5}, "swept": {"lr_judge": [0.001, 0.003]}},
}


@pytest.fixture(autouse=True)
def _compile_cache(subprocess_compile_cache: Path) -> Path:
    return subprocess_compile_cache


def _write(path: Path, document: dict) -> Path:
    path.write_text(tomli_w.dumps(document))
    return path


def _toml(value: object) -> str:
    return tomli_w.dumps({"v": value}).removeprefix("v = ").strip()


# A key, the value as the file would hold it, and where in the document it goes.
SETTINGS = st.one_of(
    st.tuples(st.just("run.iterations"), st.integers(1, 50)),
    st.tuples(st.just("run.batch_size"), st.integers(2, 512)),
    st.tuples(st.just("world.q_star"), st.sampled_from(["separable", "rugged"])),
)
KNOBS = st.one_of(
    st.tuples(st.just("judge_update_every"), st.integers(1, 20)),
    st.tuples(st.just("lr_policy"), st.floats(1e-5, 0.5, allow_nan=False)),
    st.tuples(st.just("freeze_judge"), st.booleans()),
)


@settings(max_examples=40, deadline=None)
@given(setting=SETTINGS, knob=KNOBS, condition=st.sampled_from(["baseline", "slow", "*"]))
def test_an_override_gives_the_grid_of_the_file_with_the_value_written(
    tmp_path_factory: pytest.TempPathFactory, setting: tuple[str, object], knob: tuple[str, object], condition: str
) -> None:
    root = tmp_path_factory.mktemp("overrides")
    (table, key), value = setting[0].split("."), setting[1]
    written = json.loads(json.dumps(BASE))
    written[table][key] = value
    for name in written["conditions"] if condition == "*" else [condition]:
        written["conditions"][name][knob[0]] = knob[1]
    overrides = [
        parse_override(f"{setting[0]}={_toml(value)}"),
        parse_override(f"conditions.{condition}.{knob[0]}={_toml(knob[1])}"),
    ]
    expected = load_grid(_write(root / "g.toml", written))
    assert load_grid(_write(root / "g.toml", BASE), overrides=overrides) == expected
    assert not changes(expected, overrides)  # what the grid already has is no change


def test_a_bare_word_is_a_string_and_quoted_text_is_too() -> None:
    assert parse_override("world.q_star=rugged").value == "rugged"
    assert parse_override('world.q_star="rugged"').value == "rugged"
    assert parse_override("run.seeds=[3, 5]").value == [3, 5]


@pytest.mark.parametrize(
    ("override", "key", "says"),
    [
        ("conditions.slwo.judge_update_every=5", "conditions.slwo.judge_update_every", "did you mean 'slow'?"),
        ("conditions.slow.judge_update_evry=5", "judge_update_evry", "did you mean 'judge_update_every'?"),
        ("wrld.q_star=rugged", "wrld", "did you mean 'world'?"),
        ("run.iterations=0", "run.iterations", "greater than or equal to 1"),
        ("run.iterations=three", "run.iterations", "valid integer"),
        ("run.seeds=99999999", "run.seeds", "at most 10,000"),
    ],
)
def test_a_mistake_is_the_files_one_line_error_naming_the_key(
    tmp_path: Path, override: str, key: str, says: str
) -> None:
    with pytest.raises(ConditionFileError) as caught:
        load_grid(_write(tmp_path / "g.toml", BASE), overrides=[parse_override(override)])
    assert caught.value.key == key and says in str(caught.value) and len(str(caught.value).splitlines()) == 1


@pytest.mark.parametrize("text", ["run", "run.iterations", "=3", "run.iterations=", "conditions.baseline=3", "a.b.c=1"])
def test_a_malformed_override_is_refused(text: str) -> None:
    with pytest.raises(OverrideError):
        parse_override(text)


def test_the_command_line_records_an_override_and_resume_refuses_one_that_changes_the_grid(tmp_path: Path) -> None:
    grid, out = grid_file(tmp_path, "grid", iterations=3), tmp_path / "run"
    code, _, err = in_process("run", grid, "--set", "run.iterations=2", "--out", out, "--quiet", "--no-figures")
    assert code == cli.EXIT_OK, err
    assert json.loads((out / "grid.json").read_text())["run"]["iterations"] == 2
    assert in_process("verify", out)[0] == cli.EXIT_OK

    code, _, err = in_process("run", "--resume", out, "--set", "run.iterations=3", "--quiet")
    assert code == cli.EXIT_BAD_INPUT and "--set changes the grid it runs (run.iterations: 2 → 3)" in err, err
    code, _, err = in_process("run", "--resume", out, "--set", "run.iterations=2", "--quiet")
    assert code == cli.EXIT_BAD_INPUT and "already finished" in err, err  # no change: refused only as finished

    code, _, err = in_process("run", grid, "--seeds", "2", "--set", "run.seeds=3", "--out", tmp_path / "x")
    assert code == cli.EXIT_BAD_INPUT and "give them once" in err, err
    code, _, err = in_process("run", grid, "--set", "conditions.basline.lr_judge=0.1", "--out", tmp_path / "y")
    assert code == cli.EXIT_BAD_INPUT and "did you mean 'baseline'?" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_a_missing_optional_part_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--tensorboard where tensorboardX does not import: one line with the install command for a wheel, exit 2, and
    no run directory (nothing pretrained, compiled or written)."""
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` fails as where it is missing
    out = tmp_path / "run"
    assert cli.main(["run", "tiny", "--tensorboard", "--out", str(out), "--quiet"]) == cli.EXIT_BAD_INPUT
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "pip install 'coevolab[tensorboard]'" in line, line
    assert not out.exists()
