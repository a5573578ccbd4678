"""tools.golden_diff names the columns of a regenerated golden file that moved beyond the tolerance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tools import golden_diff


def _table(**columns: list) -> pd.DataFrame:
    keys = {"condition": ["a", "a", "b"], "seed": [0, 0, 0], "iteration": [0, 1, 0]}
    return pd.DataFrame({**keys, **columns})


def test_each_column_is_named_with_its_status_and_largest_difference() -> None:
    old = _table(kept=[1.0, 2.0, 3.0], rounded=[1.0, 2.0, 3.0], moved=[1.0, 2.0, 3.0], gone=[0, 0, 0], nan=[np.nan] * 3)
    new = _table(
        kept=[1.0, 2.0, 3.0],
        rounded=[1.0, 2.0 + 1e-6, 3.0],  # another CPU's last bits
        moved=[1.0, 2.5, 3.0],  # a change of dynamics
        added=[7, 7, 7],
        nan=[np.nan] * 3,
    )
    table = golden_diff.compare(old, new.iloc[::-1], **golden_diff.TOLERANCE).set_index("column")  # row order ignored
    assert table.loc["kept", "status"] == "same" and table.loc["nan", "status"] == "same"
    assert table.loc["rounded", "status"] == "within tolerance"
    assert table.loc["rounded", "largest difference"] == pytest.approx(1e-6, rel=1e-3)
    assert table.loc["moved", "status"] == "changed"
    assert table.loc["moved", "largest difference"] == pytest.approx(0.5)
    assert table.loc["moved", "rows beyond tolerance"] == 1
    assert table.loc["gone", "status"] == "removed" and table.loc["added", "status"] == "added"


def test_the_command_exits_1_only_when_a_shared_column_moved(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    old, new, grown = tmp_path / "old.csv", tmp_path / "new.csv", tmp_path / "grown.csv"
    _table(x=[1.0, 2.0, 3.0]).to_csv(old)
    _table(x=[1.0, 2.0, 3.1]).to_csv(new)
    _table(x=[1.0, 2.0, 3.0], drift=[0.1, 0.2, 0.3]).to_csv(grown)
    assert golden_diff.main([str(old), str(new)]) == 1
    assert "changed" in capsys.readouterr().out
    assert golden_diff.main([str(old), str(grown)]) == 0  # a new metric: a column added, nothing else moved
    assert "added" in capsys.readouterr().out


def test_files_of_other_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="not have the same"):
        golden_diff.compare(_table(x=[1, 2, 3]), _table(x=[1, 2, 3]).iloc[:2], atol=0, rtol=0)
