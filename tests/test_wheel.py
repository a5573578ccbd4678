"""coevolab as a lab installs it: the wheel built from this checkout (through its sdist, as a package index would
have it), installed into a fresh environment with nothing of the repository on its path, runs its built-in grids by
name from a directory outside the repository.

To stay fast and offline the fresh environment takes its dependencies from this one (a .pth file naming this
environment's site-packages, whose own .pth files, the editable install among them, are not read from there); the
wheel itself is installed with --no-deps. The build uses this environment's setuptools (--no-isolation).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from harness.common.version import __version__

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Installed:
    """The fresh environment with the wheel installed: its interpreter's folder, the wheel, a working directory."""

    bin: Path
    wheel: Path
    workdir: Path

    def run(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.bin / args[0]), *args[1:]],
            cwd=self.workdir,
            env=env or self.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def env(self) -> dict[str, str]:
        """This process's environment less anything that would put the repository on the path."""
        return {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    work = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(work / "dist"), str(ROOT)],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (work / "dist").glob("coevolab-*.whl")

    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    fresh = Installed(venv / "bin", wheel, work / "elsewhere")
    fresh.workdir.mkdir()
    site_packages = subprocess.run(
        [str(fresh.bin / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    (Path(site_packages) / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # pip comes from this environment too; --ignore-installed: this environment's editable coevolab, on the fresh
    # one's path through the .pth, is neither upgraded nor removed.
    pip = fresh.run(
        "python", "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed", str(wheel)
    )
    assert pip.returncode == 0, pip.stderr
    return fresh


def test_the_wheel_holds_every_module_and_every_built_in_grid(installed: Installed) -> None:
    names = set(zipfile.ZipFile(installed.wheel).namelist())
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "harness").rglob("*.py")}
    grids = {f"harness/conditions/{path.name}" for path in (ROOT / "conditions").glob("*.toml")}
    assert modules <= names and "harness/cli/__main__.py" in names
    assert grids <= names and "harness/conditions/paper.toml" in names
    assert f"coevolab-{__version__}.dist-info/licenses/LICENSE" in names


def test_the_installed_package_is_the_wheel_not_the_repository(installed: Installed) -> None:
    where = installed.run("python", "-c", "import harness, harness.cli; print(harness.__file__)")
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(installed.bin.parent)


def test_version_and_a_built_in_grid_listed_by_name(installed: Installed) -> None:
    version = installed.run("coevolab", "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"coevolab {__version__}"
    listed = installed.run("coevolab", "list", "paper")
    assert listed.returncode == 0, listed.stderr
    assert "18 conditions × 5 seeds" in listed.stdout and "slow-meta" in listed.stdout


def test_a_built_in_grid_runs_by_name(installed: Installed, shared_compile_cache: Path) -> None:
    # The session's compile cache: tiny is the shape tests/test_run_directories.py compiles (tests/run_directories.py).
    env = {**installed.env(), "COEVOLAB_CACHE_DIR": str(shared_compile_cache)}
    # Without figures: drawing them is most of a tiny grid's report, and no figure is read here.
    run = installed.run("coevolab", "run", "tiny", "--out", "run", "--quiet", "--no-figures", env=env)
    assert run.returncode == 0, run.stderr
    out = installed.workdir / "run"
    assert run.stdout.strip() == "run"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["coevolab_version"] == __version__ and manifest["grid"]["name"] == "tiny"
    metrics = pd.read_csv(out / "metrics.csv.gz")
    assert list(metrics["iteration"]) == [0, 1, 2] and set(metrics["condition"]) == {"baseline"}
    assert metrics["policy_quality"].notna().all()
    assert "coevolab report: tiny" in (out / "report.md").read_text(encoding="utf-8")
