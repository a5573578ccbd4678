"""coevolab at the oldest versions its ranges allow: `python -m tools.lowest_direct [--venv DIR]` (make test-lowest).

Lowest-direct resolution, as uv's `--resolution lowest-direct` means it: every direct runtime dependency in
pyproject.toml pinned to its range's lower bound (`floors`), and their own dependencies resolved by pip as usual.
The environment is made in a fresh virtual environment (default .venv-lowest) with this Python, coevolab installed
into it without dependencies, and then the built-in grid `tiny` is run there with an empty compile cache and checked
with `coevolab verify`, so a range's floor is a version that was seen to work, not a guess. A floor that fails is a
range to raise in pyproject.toml. Exit 0 only if the run verified.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def floors(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """Each direct runtime dependency's lower bound (`>=` or `~=`), by name.

    Raises:
        ValueError: a dependency without a lower bound (nothing to test it at).
    """
    found = {}
    for line in tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"]:
        requirement = Requirement(line)
        lows = [Version(s.version) for s in requirement.specifier if s.operator in (">=", "~=", "==")]
        if not lows:
            raise ValueError(f"{requirement.name}: no lower bound in pyproject.toml, so no oldest version to test")
        found[requirement.name] = str(max(lows))
    return found


def run(command: list[str], **kwargs: object) -> None:
    print("$", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)  # type: ignore[call-overload]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-lowest")
    args = parser.parse_args(argv)
    pins = [f"{name}=={version}" for name, version in floors().items()]
    venv = args.venv.resolve()  # the grid runs in a scratch directory: its commands are named absolutely
    if not (venv / "bin" / "python").is_file():
        run([sys.executable, "-m", "venv", str(venv)])
    python, coevolab = str(venv / "bin" / "python"), str(venv / "bin" / "coevolab")
    run([python, "-m", "pip", "install", "--quiet", *pins])
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(ROOT)])
    run([python, "-m", "pip", "freeze", "--exclude", "coevolab"])
    with tempfile.TemporaryDirectory(prefix="coevolab-lowest-") as scratch:
        out, home = Path(scratch) / "run", Path(scratch) / "home"
        home.mkdir()
        environment = {"HOME": str(home), "PATH": "/usr/bin:/bin"}
        run([coevolab, "run", "tiny", "--out", str(out), "--quiet"], cwd=scratch, env=environment)
        run([coevolab, "verify", str(out)], cwd=scratch, env=environment)
    print(f"lowest-direct: tiny ran and verified at {', '.join(pins)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
