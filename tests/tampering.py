"""Tampering with a finished run directory, one file at a time, and what every reading command must then do: refuse
in one line (exit 2, or one `RunDirectoryError` / `FileNotFoundError` line from the API), or give exactly the
undisturbed run's numbers; and never leave a directory that verifies while an edited input is still in it.

Shared by tests/test_tampered_runs.py (a grid whole, with and without its best-of-n table, and in seed blocks) and
tests/test_until_decided.py (a grid grown until decided, its stages)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from hypothesis import strategies as st

import harness
from harness import cli
from harness.common.integrity import RunDirectoryError
from tests.run_directories import in_process

# The files whose bytes are the run's numbers (those present are compared after a command that did not refuse).
NUMBERS = ("metrics.csv.gz", "best_of_n.parquet", "claims.csv", "summary.csv", "frontier.csv", "attractors.csv")


@dataclass(frozen=True)
class Edit:
    """One change to one file: "flip" a byte, "cut" it short, "append" bytes, "digit" (a digit replaced by another,
    so a table still parses), "delete" it."""

    kind: str
    where: float  # the position, as a fraction of the file's length
    value: int  # 1..255: the XOR mask of a flip, the byte appended, the digit added to a digit (mod 10, never 0)

    def apply(self, path: Path) -> None:
        if self.kind == "delete":
            path.unlink()
            return
        data = bytearray(path.read_bytes())
        at = min(int(self.where * len(data)), max(len(data) - 1, 0))
        if self.kind == "append" or not data:
            data += bytes([self.value])
        elif self.kind == "cut":
            del data[at:]
        elif self.kind == "digit" and (digits := [i for i, b in enumerate(data) if 48 <= b <= 57]):
            i = digits[min(int(self.where * len(digits)), len(digits) - 1)]
            data[i] = 48 + (data[i] - 48 + 1 + self.value % 9) % 10
        else:
            data[at] ^= self.value
        path.write_bytes(bytes(data))


edits = st.builds(
    Edit,
    kind=st.sampled_from(("flip", "cut", "append", "digit", "delete")),
    where=st.floats(0.0, 1.0),
    value=st.integers(1, 255),
)


def numbers(run_dir: Path) -> dict[str, bytes]:
    return {name: (run_dir / name).read_bytes() for name in NUMBERS if (run_dir / name).is_file()}


def _refused_in_one_line(code: int, err: str, what: str) -> None:
    assert code == cli.EXIT_BAD_INPUT, f"{what}: exit {code}, expected a refusal: {err}"
    assert len(err.strip().splitlines()) == 1, f"{what}: not one line: {err}"


def _verifies(run_dir: Path) -> bool:
    code, _, err = in_process("verify", run_dir)
    assert code in (cli.EXIT_OK, cli.EXIT_BAD_INPUT) and len(err.strip().splitlines()) <= 1, err
    return code == cli.EXIT_OK


def check_commands(original: Path, relative: str, edit: Edit, commands: Sequence[str]) -> None:
    """Copy `original`, apply `edit` to its file `relative`, then run each of `commands` ("verify", "load_result",
    "resume" or "resume-until-decided", "merge", "report", in that order) on the copy and hold each to the property
    of the module: a command that did not refuse leaves the run's numbers (`NUMBERS`) as the undisturbed run's, in a
    directory that verifies; after one that refused, verify still refuses the directory (unless a command before it
    had already rewritten what was edited: a resume that trains a run whose manifest was removed)."""
    expected = numbers(original)
    with tempfile.TemporaryDirectory(prefix="coevolab-tampered-") as scratch:
        run_dir = Path(shutil.copytree(original, Path(scratch) / "run"))
        edit.apply(run_dir / relative)
        repaired = False  # a command that did not refuse rewrote what was edited: later refusals are about other things
        for command in commands:
            what = f"{command} after {edit} of {relative}"
            if command == "load_result":
                try:
                    result = harness.load_result(run_dir)
                except (RunDirectoryError, FileNotFoundError) as error:
                    assert len(str(error).splitlines()) == 1, f"{what}: {error}"
                    assert repaired or not _verifies(run_dir), f"{what}: refused, yet the directory verifies"
                    continue
                assert numbers(run_dir) == expected, what
                assert result.metrics.equals(harness.load_result(original).metrics), what
                continue
            argv = {
                "verify": ("verify", run_dir),
                "resume": ("run", "--resume", run_dir, "--quiet", "--no-figures"),
                "resume-until-decided": ("run", "--resume", run_dir, "--until-decided", "--quiet", "--no-figures"),
                "merge": ("merge", run_dir, "--quiet", "--no-figures"),
                "report": ("report", run_dir, "--no-figures"),
            }[command]
            code, _, err = in_process(*argv)
            if code != cli.EXIT_OK:
                _refused_in_one_line(code, err, what)
                assert repaired or not _verifies(run_dir), f"{what}: refused, yet the directory verifies afterwards"
                continue
            assert numbers(run_dir) == expected, f"{what}: exit 0 with other numbers"
            assert _verifies(run_dir), f"{what}: exit 0, yet the directory does not verify"
            repaired = True
