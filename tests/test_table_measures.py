"""Measures read off a mechanism's per-run table (`RunTable.measures`): a lab's table declares them as best-of-n's
does, claims read them as they read a float metric, a run directory holding the table has them joined to its
metrics, and their names are checked against every metric's and measure's."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.common.run_tables import write_run_tables
from harness.engine.metrics import Metric, all_metrics, table_measures
from harness.grid import registry
from harness.grid.contract import Mechanism, RunTable
from harness.grid.spec import Condition, GridSpec, MechanismSource
from harness.inference.claims import Claim, comparable_metrics
from harness.inference.run_measures import measure_names
from harness.report import with_table_measures


def _largest_value(metrics: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """Per run and iteration: the table's largest value, and at which k."""
    best = rows.loc[rows.groupby(["condition", "seed", "iteration"], sort=False)["value"].idxmax()]
    # An int column, and one more than the declared measures: the report keeps the declared ones, as float64.
    return best.rename(columns={"value": "largest_value", "k": "largest_at"}).assign(policy_quality=-1.0)


def _table(**changes: object) -> RunTable:
    fields: dict = {
        "name": "sweep",
        "definition": "a value per k",
        "index": {"k": (0, 1, 2)},
        "columns": {"value": "a value"},
        "compute": lambda context: {},
        "measures": {"largest_value": "the largest value over k", "largest_at": "the k of the largest value"},
        "compute_measures": _largest_value,
    }
    return RunTable(**(fields | changes))


SOURCE = MechanismSource(name="sweeper", module="sweeper.py", digest="0" * 64)


def _register(table: RunTable) -> None:
    registry.register(Mechanism("sweeper", "records a sweep", tables=(table,)), module="sweeper.py", digest="0" * 64)


def test_a_labs_table_measures_are_claimable_and_leave_with_their_mechanism() -> None:
    with registry.restored_catalog():
        _register(_table())
        assert table_measures()["largest_value"] == ("sweep", "the largest value over k")
        assert {"largest_value", "largest_at"} <= set(comparable_metrics()) & set(measure_names())
        Claim(name="c", statement="s", metric="largest_value", condition="baseline", direction="above", than_value=0)
    assert "largest_value" not in table_measures()
    assert "largest_value" not in comparable_metrics()
    # best-of-n's are the same kind of entry, by the table of its own name.
    assert table_measures()["bon_peak_gain"][0] == "best_of_n"


def test_the_report_joins_a_tables_measures_where_the_run_directory_holds_it(tmp_path: Path) -> None:
    metrics = pd.DataFrame(
        {"condition": ["a", "a", "b"], "seed": [0, 0, 0], "iteration": [0, 1, 0], "policy_quality": [1.0, 2.0, 3.0]}
    )
    rows = pd.DataFrame(
        {
            "condition": ["a"] * 6 + ["b"] * 3,
            "seed": 0,
            "iteration": [0, 0, 0, 1, 1, 1, 0, 0, 0],
            "k": [0, 1, 2] * 3,
            "value": [0.1, 0.5, 0.2, 0.9, 0.3, 0.4, 0.0, 0.0, 0.7],
        }
    )
    with registry.restored_catalog():
        _register(_table())
        assert with_table_measures(tmp_path, metrics) is metrics  # no table: as it was
        write_run_tables(tmp_path, {"sweep": rows})
        joined = with_table_measures(tmp_path, metrics)
    np.testing.assert_array_equal(joined["largest_value"], [0.5, 0.9, 0.7])
    np.testing.assert_array_equal(joined["largest_at"], [1, 0, 2])
    assert joined["largest_at"].dtype == np.float64  # declared measures join as float64, whatever they were
    pd.testing.assert_frame_equal(joined[metrics.columns], metrics, check_dtype=False)
    # Once the mechanism is unregistered its table is a file the report does not read.
    assert with_table_measures(tmp_path, metrics) is metrics


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        (_table(measures={"policy_quality": "x"}), "measure 'policy_quality' of table 'sweep' of mechanism 'sweeper' "),
        (_table(measures={"bon_peak_gain": "x"}), "is taken by best_of_n"),
        (_table(measures={"ceiling_iteration": "x"}), "'ceiling_iteration' is a column the reports key by or derive"),
        (_table(measures={"iteration": "x"}), "'iteration' is a column the reports key by or derive"),
        (_table(compute_measures=None), "table 'sweep' declares measures or compute_measures without the other"),
    ],
)
def test_a_measure_of_a_taken_name_or_without_its_computation_is_refused(table: RunTable, problem: str) -> None:
    with registry.restored_catalog():
        with pytest.raises(registry.MechanismError, match=problem):
            _register(table)
        assert "sweeper" not in registry.catalog()


def test_a_refused_mechanism_leaves_none_of_its_metrics_or_measures_registered() -> None:
    """Its metric and its first table's measures register before its second table's clash is found; all go."""
    other = _table(name="second", measures={"bon_peak_gain": "taken"})
    metric = Metric("sweep_width", "sweep width", "", "a metric of the refused mechanism", lambda run: run.pi.sum())
    mechanism = Mechanism("sweeper", "refused", metrics=(metric,), tables=(_table(), other))
    with registry.restored_catalog():
        with pytest.raises(registry.MechanismError, match="is taken by best_of_n"):
            registry.register(mechanism, module="sweeper.py", digest="0" * 64)
        assert not {"largest_value", "largest_at"} & set(table_measures())
        assert "sweep_width" not in {m.name for m in all_metrics()}
        # So the same names are free for the next mechanism.
        _register(_table())
        assert table_measures()["largest_value"][0] == "sweep"


def test_a_measure_compute_measures_does_not_return_stops_the_report_in_one_line(tmp_path: Path) -> None:
    metrics = pd.DataFrame({"condition": ["a"], "seed": [0], "iteration": [0], "policy_quality": [1.0]})
    rows = pd.DataFrame({"condition": ["a"] * 3, "seed": 0, "iteration": 0, "k": [0, 1, 2], "value": [0.1, 0.5, 0.2]})
    write_run_tables(tmp_path, {"sweep": rows})
    short = _table(compute_measures=lambda metrics, rows: _largest_value(metrics, rows).drop(columns="largest_at"))
    with registry.restored_catalog():
        _register(short)
        expected = "table 'sweep': compute_measures returns no column 'largest_at'"
        with pytest.raises(registry.MechanismError, match=f"^{re.escape(expected)}$"):
            with_table_measures(tmp_path, metrics)


def test_a_claim_on_a_measure_of_a_table_no_run_records_is_refused() -> None:
    with registry.restored_catalog():
        _register(_table())
        claim = Claim(
            name="c", statement="s", metric="largest_value", condition="baseline", direction="above", than_value=0.0
        )
        GridSpec(mechanisms=(SOURCE,), conditions=(Condition(name="baseline"),), claims=(claim,))  # it records it
        refused = (
            "claim 'c' reads largest_value, a measure of the per-run table 'sweep', which no condition of the grid "
            "records (its mechanism 'sweeper' is not loaded)"
        )
        with pytest.raises(ValueError, match=re.escape(refused)):
            GridSpec(conditions=(Condition(name="baseline"),), claims=(claim,))
