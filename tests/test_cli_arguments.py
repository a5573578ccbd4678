"""The command line's argument handling, in process: seed selection and bad paths (no training)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness import cli
from harness.grid.spec import MAX_SEEDS


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = cli.main(list(argv))
    except SystemExit as exit_:  # argparse exits on its own errors
        code = int(exit_.code or 0)
    return code, capsys.readouterr().err


seed_sets = st.lists(st.integers(0, 10_000), min_size=1, max_size=20, unique=True)


@given(seed_sets)
def test_a_seed_list_round_trips(seeds: list[int]) -> None:
    assert cli.seed_list(",".join(map(str, seeds))) == tuple(seeds)


@given(st.integers(0, 500), st.integers(0, 50), st.integers(551, 600))
def test_ranges_expand_inclusively(low: int, length: int, extra: int) -> None:
    high = low + length
    assert cli.seed_list(f"{low}-{high}, {extra}") == (*range(low, high + 1), extra)


@given(st.integers(1, MAX_SEEDS))
def test_a_count_is_a_count(n: int) -> None:
    assert cli.seed_count(str(n)) == n


@given(st.integers(MAX_SEEDS + 1, 10**12))
def test_a_count_above_the_cap_is_refused(n: int) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="at most 10,000"):
        cli.seed_count(str(n))


@given(st.integers(max_value=0))
def test_a_count_below_one_is_refused(n: int) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="at least 1"):
        cli.seed_count(str(n))


@given(st.text(alphabet="0123456789,- ax.", max_size=12))
def test_any_seed_text_parses_or_is_refused_cleanly(text: str) -> None:
    try:
        seeds = cli.seed_list(text)
    except argparse.ArgumentTypeError as error:
        assert str(error) and "\n" not in str(error)
    else:
        assert seeds and len(set(seeds)) == len(seeds) and min(seeds) >= 0


def test_a_huge_range_is_refused_at_once() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="more than"):
        cli.seed_list("0-99999999999")


@given(seed_sets.filter(lambda s: len(s) >= 2))
def test_a_repeated_seed_is_refused(seeds: list[int]) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="given twice"):
        cli.seed_list(",".join(map(str, [*seeds, seeds[0]])))


def test_single_seed_other_than_zero(tmp_path: Path) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text("[conditions.a]\n")
    args = cli.build_parser().parse_args(["run", str(grid), "--seed-list", "3"])
    assert args.seed_list == (3,) and args.seeds is None
    from harness.grid.conditions import load_grid

    assert load_grid(grid, seeds=args.seed_list).run.seeds == (3,)
    assert load_grid(grid, seeds=cli.seed_count("3")).run.seeds == (0, 1, 2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--seeds", "0"], "command line: argument --seeds: a seed count must be at least 1"),
        (["run", "--seeds", "2", "--seed-list", "3"], "not allowed with argument --seeds"),
        (["run", "--seed-list", "4-2"], "is empty"),
        (["report", "{missing}"], "no such directory"),
        (["report", "{file}"], "not a directory"),
        (["report", "{empty}"], "no metrics.csv.gz"),
        (["run", "--resume", "{missing}"], "no such directory"),
        (["run", "--resume", "{file}"], "not a directory"),
        (["run", "--resume", "{empty}"], "no grid.json"),
        (["run", "{grid}", "--out", "{file}"], "exists and is not a directory"),
        (["run", "{grid}", "--out", "{file}/below"], "cannot create"),
        (["run", "{missing}"], "no such file"),
        (["run", "{empty}"], "is a directory, not a condition file"),
        (["list", "{empty}"], "is a directory, not a condition file"),
    ],
)
def test_bad_arguments_and_paths_exit_2_with_one_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "g.toml").write_text("[run]\nseeds = 1\niterations = 1\n[conditions.a]\n")
    places = {k: str(tmp_path / v) for k, v in {"missing": "nope", "file": "file", "empty": "empty"}.items()}
    places["grid"] = str(tmp_path / "g.toml")
    code, err = run_cli(capsys, *(arg.format(**places) for arg in argv))
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_file_errors_lose_pydantic_prefixes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = tmp_path / "g.toml"
    grid.write_text("[run]\nseeds = 0\n[conditions.a]\n")
    code, err = run_cli(capsys, "list", str(grid))
    assert code == 2 and "a seed count must be at least 1" in err and "Value error" not in err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("coevolab ")
