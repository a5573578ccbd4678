"""Every file of a finished run edited, cut or removed, one at a time, then every command that reads a run directory
(verify, load_result, resume, merge, report): each refuses in one line or gives the undisturbed run's numbers, and
none leaves a directory that verifies with an edited input (the property of tests/tampering.py). The runs: a grid
whole with a claim on a best-of-n measure (its figures drawn), the same grid without its best-of-n table (as a run of
an earlier coevolab), and a grid of two seed blocks, merged.

The grids are tests/run_directories.py's shape (one run per program, a world of two positions, 10 steps), so this
file is one unit with the run-directory tests (tests/conftest.py) and compiles nothing of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings

import harness
from harness import cli
from harness.common.integrity import FILES_KEY, RunDirectoryError, read_manifest
from harness.common.locks import holding_run_dir
from harness.experiment.verify import is_run_directory, replaceable_entries
from harness.grid.compile_cache import CACHE_DIR_ENV
from tests.run_directories import copy, grid_file, in_process
from tests.tampering import Edit, check_commands, edits

ROOT = Path(__file__).resolve().parent.parent
CLAIM = """record_best_of_n = true

[claims.best-of-n-gains]
statement = "best-of-n from the initial policy gains real quality over it"
metric = "bon_peak_gain"
condition = "baseline"
iteration = 0
direction = "above"
than_value = 0.0
"""
FIGURES = (
    "all_conditions",
    "attractors",
    "boundaries_and_best",
    "end_state",
    "frontier_perceived",
    "frontier_quality",
    "headline",
    "inside_vs_outside",
    "pair_audits",
)
REPORT = ("attractors.csv", "frontier.csv", "report.md", "summary.csv", "summary.md")
BLOCK = ("best_of_n.parquet", "block.json", "grid.json", "manifest.json", "metrics.csv.gz", "progress.csv")
# Every file each run lists in its manifest, and the manifest itself: the files edited, one at a time.
FILES = {
    "whole": (
        "best_of_n.parquet",
        "claims.csv",
        "grid.json",
        "manifest.json",
        "metrics.csv.gz",
        "progress.csv",
        *REPORT,
        *(f"figures/{name}.png" for name in FIGURES),
    ),
    "no-best-of-n": ("grid.json", "manifest.json", "metrics.csv.gz", "progress.csv", *REPORT),
    "blocks": (  # no merged copy of the blocks' best-of-n tables: read joined from them
        "claims.csv",
        "grid.json",
        "manifest.json",
        "metrics.csv.gz",
        *REPORT,
        *(f"blocks/{k}/{name}" for k in (0, 1) for name in BLOCK),
    ),
}
COMMANDS = {
    "whole": ("verify", "load_result", "resume", "merge", "report"),
    "no-best-of-n": ("verify", "load_result", "resume", "report"),
    "blocks": ("verify", "load_result", "resume", "merge", "report"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, shared_compile_cache: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tampered")
    made = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(shared_compile_cache))
        for name, seeds, claim, flags in (
            ("whole", 1, CLAIM, ()),
            ("no-best-of-n", 1, "", ("--no-figures",)),
            ("blocks", 2, CLAIM, ("--no-figures",)),
        ):
            grid = grid_file(root, name, seeds=seeds, iterations=2, knob=claim)
            code, _, err = in_process("run", grid, "--out", root / name, "--quiet", *flags)
            assert code == cli.EXIT_OK, err
            made[name] = root / name
    assert not list(made["no-best-of-n"].glob("best_of_n.*"))  # its grid records no best-of-n
    return made


@pytest.mark.parametrize("kind", list(FILES))
def test_the_edited_files_are_every_file_of_the_run(runs: dict[str, Path], kind: str) -> None:
    manifest = read_manifest(runs[kind])
    assert manifest is not None
    assert sorted([*manifest[FILES_KEY], "manifest.json"]) == sorted(FILES[kind])


EDITED = [(kind, relative) for kind, names in FILES.items() for relative in names]


@pytest.mark.parametrize(("kind", "relative"), EDITED)
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edit=edits)
@example(edit=Edit("delete", 0.0, 1))  # every file removed once, whatever else is drawn
def test_an_edited_file_is_refused_or_changes_no_number(
    runs: dict[str, Path], kind: str, relative: str, edit: Edit
) -> None:
    check_commands(runs[kind], relative, edit, COMMANDS[kind])


def test_report_refuses_an_edited_best_of_n_table_and_the_run_stays_refused(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """The case that once laundered: the baseline's best-of-n gold doubled, then `coevolab report` (which judged the
    claim on the edited table and sealed it) refuses, naming the file, and verify still refuses the directory."""
    out = copy(runs["whole"], tmp_path / "run")
    table = pd.read_parquet(out / "best_of_n.parquet")
    table.loc[table["condition"] == "baseline", "gold"] *= 2
    table.to_parquet(out / "best_of_n.parquet", index=False)
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    code, _, err = in_process("report", out, "--no-figures")
    assert code == cli.EXIT_BAD_INPUT and f"{out / 'best_of_n.parquet'}: " in err and len(err.splitlines()) == 1, err
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    code, _, err = in_process("verify", out)
    assert code == cli.EXIT_BAD_INPUT and "best_of_n.parquet" in err, err


def test_load_result_judges_every_claim_the_report_judges(runs: dict[str, Path]) -> None:
    """A claim on a best-of-n measure, read back by the API: the verdicts are claims.csv's, value for value."""
    for kind in ("whole", "blocks"):
        verdicts = harness.load_result(runs[kind]).verdicts
        written = pd.read_csv(runs[kind] / "claims.csv")
        assert list(verdicts["metric"]) == ["bon_peak_gain"]
        pd.testing.assert_frame_equal(verdicts.reset_index(drop=True), written, check_dtype=False, atol=1e-9)


def test_growing_a_run_with_its_best_of_n_table_equals_the_grid_run_at_its_new_size(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """A finished one-seed run grown to two seeds carries its per-run tables into its first block: its merged tables
    and verdicts are the two-seed grid's, byte for byte (the best-of-n claim judged on both seeds)."""
    out = copy(runs["whole"], tmp_path / "run")
    code, _, err = in_process("run", "--resume", out, "--seeds", 2, "--quiet", "--no-figures")
    assert code == cli.EXIT_OK, err
    assert not (out / "best_of_n.parquet").exists()  # the flat run's table is block 0's now, not a merged copy
    for name in (
        "metrics.csv.gz",
        "claims.csv",
        "summary.csv",
        "blocks/0/best_of_n.parquet",
        "blocks/1/best_of_n.parquet",
    ):
        assert (out / name).read_bytes() == (runs["blocks"] / name).read_bytes(), name
    assert in_process("verify", out)[0] == cli.EXIT_OK


@pytest.mark.parametrize("added", ["notes.txt", "best_of_n.parquet", "best_of_n.csv", "blocks/0/extra.csv"])
def test_a_file_added_after_the_run_was_sealed_is_refused_by_every_reader(
    runs: dict[str, Path], tmp_path: Path, added: str
) -> None:
    """Added, not edited: verify names it, and report and load_result refuse to read the run (an added best-of-n
    table, or an earlier version's CSV of one, would otherwise be joined into the claims of a run that had none)."""
    kind = "no-best-of-n" if added.startswith("best_of_n") else "blocks"
    out = copy(runs[kind], tmp_path / "run")
    source = runs["whole"] / "best_of_n.parquet" if added.startswith("best_of_n") else runs[kind] / "summary.md"
    (out / added).write_bytes(source.read_bytes())
    for argv in (("verify", out), ("report", out, "--no-figures")):
        code, _, err = in_process(*argv)
        assert code == cli.EXIT_BAD_INPUT and f"{out / added}: not listed in" in err, err
    with pytest.raises(RunDirectoryError, match="added after the run was sealed"):
        harness.load_result(out)


def test_verify_waits_for_no_writer_and_refuses_while_one_holds_the_directory(runs: dict[str, Path]) -> None:
    """verify holds the directory's lock shared: while a report (an exclusive writer) holds it, verify says so in one
    line instead of reading a report half-written."""
    with holding_run_dir(runs["whole"]):
        code, _, err = in_process("verify", runs["whole"])
        assert code == cli.EXIT_OK, err  # this process is the writer: its own lock does not stop it
    busy = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK.format(run_dir=str(runs["whole"]))],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert busy.stdout is not None and busy.stdout.readline().strip() == "held"
        code, _, err = in_process("verify", runs["whole"])
        assert code == cli.EXIT_BAD_INPUT and "is in use by" in err and len(err.strip().splitlines()) == 1, err
    finally:
        busy.kill()
        busy.wait()
    assert in_process("verify", runs["whole"])[0] == cli.EXIT_OK


HOLD_LOCK = """
import sys, time
from harness.common.locks import holding_run_dir
with holding_run_dir("{run_dir}"):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_run_whose_manifest_was_removed_is_finished_by_the_command_verify_names(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    """Metrics but no manifest (and no checkpoint): verify names --resume, and --resume trains the run again and seals
    it, the same numbers (no round of advice that ends where it began)."""
    out = copy(runs["whole"], tmp_path / "run")
    (out / "manifest.json").unlink()
    code, _, err = in_process("verify", out)
    assert code == cli.EXIT_BAD_INPUT and f"coevolab run --resume {out}" in err, err
    code, _, err = in_process("run", "--resume", out, "--quiet", "--no-figures")
    assert code == cli.EXIT_OK, err
    for name in ("metrics.csv.gz", "best_of_n.parquet", "claims.csv"):
        assert (out / name).read_bytes() == (runs["whole"] / name).read_bytes(), name
    assert in_process("verify", out)[0] == cli.EXIT_OK


def test_force_keeps_a_users_files_and_a_folder_with_a_foreign_manifest(runs: dict[str, Path], tmp_path: Path) -> None:
    """A project folder with its own manifest.json is no run: --force refuses it and deletes nothing; a run directory
    that also holds a user's file is refused too, naming the file; the run alone is replaced."""
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "manifest.json").write_text('{"name": "our project"}\n')
    (project / "notes.txt").write_text("notes\n")
    (project / "data" / "important.csv").write_text("a,b\n1,2\n")
    before = {path: path.read_bytes() for path in project.rglob("*") if path.is_file()}
    grid = runs["whole"].parent / "whole.toml"
    code, _, err = in_process("run", grid, "--out", project, "--force", "--quiet")
    assert code == cli.EXIT_BAD_INPUT and "no coevolab run" in err, err
    assert {path: path.read_bytes() for path in project.rglob("*") if path.is_file()} == before

    out = copy(runs["blocks"], tmp_path / "run")
    (out / "notes.txt").write_text("mine\n")
    code, _, err = in_process("run", grid, "--out", out, "--force", "--quiet", "--no-figures")
    assert code == cli.EXIT_BAD_INPUT and "notes.txt, which no coevolab run writes" in err, err
    assert (out / "notes.txt").read_text() == "mine\n" and (out / "blocks").is_dir()
    (out / "notes.txt").unlink()
    code, _, err = in_process("run", grid, "--out", out, "--force", "--quiet", "--no-figures")
    assert code == cli.EXIT_OK, err
    assert not (out / "blocks").exists() and in_process("verify", out)[0] == cli.EXIT_OK


def test_every_committed_reference_is_a_run_that_force_replaces_whole() -> None:
    """`make reference*` reruns each committed reference with --force: each is a coevolab run (their manifests are of
    before manifests listed files, and no lock file is committed), and --force would remove every entry it holds."""
    references = sorted(
        path for path in (ROOT / "artifacts" / "reference").iterdir() if (path / "manifest.json").is_file()
    )
    assert len(references) >= 6
    for reference in references:
        assert is_run_directory(reference), reference
        assert replaceable_entries(reference).foreign == [], reference
