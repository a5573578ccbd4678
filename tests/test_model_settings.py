"""The `[model]` table: parsing, the refusal under the original lab's streams, parameter counts and flat rows keyed
by the settings, the memory estimate, and a tiny grid of non-default networks trained end to end."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from harness.engine.architecture import DEFAULT_MODEL, ModelConfig, NetworkConfig
from harness.engine.flat_params import judge_layout, policy_layout
from harness.grid.conditions import ConditionFileError, grid_from_mapping
from harness.grid.knobs import Knobs
from harness.grid.layout import layout_grid
from harness.grid.memory import estimate_bytes, parameter_count
from harness.grid.spec import Condition, GridSpec, PretrainSettings, RunSettings
from harness.grid.trainer import GridTrainer
from tests.networks import init_judge, init_policy

K, L = 3, 2  # two positions (tests/worlds.py), 3 tokens: a small world for the attention networks' grid
ATTENTION = NetworkConfig("attention", embed_dim=8, hidden_dim=12, layers=2, heads=2)
SMALL_GRU = NetworkConfig("gru", embed_dim=6, hidden_dim=10)


def _model(policy: NetworkConfig, judge: NetworkConfig) -> ModelConfig:
    return ModelConfig(**{f"{role}_{field}": value for role, net in (("policy", policy), ("judge", judge))
                          for field, value in net._asdict().items()})  # fmt: skip


def test_model_table_parses_and_defaults_are_todays_networks() -> None:
    grid = grid_from_mapping(
        {"model": {"policy_family": "attention", "policy_layers": 2, "judge_hidden_dim": 8}, "conditions": {"a": {}}},
        "m.toml",
    )
    assert grid.model.policy == NetworkConfig("attention", 16, 32, 2, 1)
    assert grid.model.judge == NetworkConfig("gru", 16, 8)
    assert grid_from_mapping({"conditions": {"a": {}}}, "m.toml").model == DEFAULT_MODEL
    assert DEFAULT_MODEL.is_default and not grid.model.is_default


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ({"policy_famly": "gru"}, "did you mean 'policy_family'"),
        ({"judge_family": "lstm"}, "judge_family"),
        ({"judge_layers": 2}, "attention family only"),
        ({"policy_family": "attention", "policy_embed_dim": 10, "policy_heads": 4}, "must divide"),
    ],
)
def test_model_table_mistakes_are_named(table: dict, words: str) -> None:
    with pytest.raises(ConditionFileError, match=words):
        grid_from_mapping({"model": table, "conditions": {"a": {}}}, "m.toml")


def test_original_streams_refuse_other_networks_in_one_line() -> None:
    with pytest.raises(ConditionFileError) as error:
        grid_from_mapping(
            {"run": {"streams": "original"}, "model": {"judge_hidden_dim": 8}, "conditions": {"a": {}}}, "m.toml"
        )
    assert "\n" not in str(error.value) and "streams = 'original'" in str(error.value)
    grid_from_mapping({"run": {"streams": "original"}, "conditions": {"a": {}}}, "m.toml")  # defaults are fine


@pytest.mark.parametrize("network", [ATTENTION, SMALL_GRU, NetworkConfig("attention", 4, 4, 1, 1)])
def test_parameter_counts_and_row_layouts_follow_the_settings(network: NetworkConfig) -> None:
    """The hand count (memory.parameter_count) against flax's parameters; flat rows keyed by the settings."""
    model = _model(network, network)
    policy = ravel_pytree(init_policy(jax.random.PRNGKey(0), K, L, network))[0].size
    judge = ravel_pytree(init_judge(jax.random.PRNGKey(0), K, L, network))[0].size
    assert parameter_count(K, L, model) == (policy, judge)
    assert (policy_layout(K, L, network).width, judge_layout(K, L, network).width) == (policy, judge)
    assert policy_layout(K, L, network).width != policy_layout(K).width


def _tiny_grid(model: ModelConfig) -> GridSpec:
    return GridSpec(
        name="tiny-models",
        world={"vocab_size": K, "seq_len": L},
        model=model,
        run=RunSettings(seeds=(0,), iterations=2, steps_per_iteration=3, batch_size=8),
        pretrain=PretrainSettings(target_spearman=-0.99, check_every=5, max_steps=10),  # any judge will do
        conditions=(
            Condition(name="baseline"),
            # Most of the rows that read a network in one condition: every one is a part of the compile.
            Condition(
                name="mixed",
                knobs=Knobs(n_judges=2, anchor_fraction=0.25, meta_holdout_fraction=0.2, referee_margin=1.0),
            ),
        ),
    )


def test_memory_estimate_grows_with_the_networks() -> None:
    default = estimate_bytes(layout_grid(_tiny_grid(DEFAULT_MODEL)).shape)
    wide = _model(NetworkConfig("gru", 32, 64), NetworkConfig("attention", 32, 64, 2, 4))
    assert estimate_bytes(layout_grid(_tiny_grid(wide)).shape) > default


def test_attention_policy_and_small_gru_judge_train_end_to_end() -> None:
    """Sampling, rewards, judge updates, an ensemble, the anchor, meta-correction, the referee and the exact
    diagnostics run on non-default networks (an attention policy, a small GRU judge); the metrics are finite where
    they apply and the policy moved."""
    one_block = ATTENTION._replace(layers=1)  # two blocks are checked against numpy in tests/test_attention.py
    table = GridTrainer(_tiny_grid(_model(one_block, SMALL_GRU))).run()
    assert len(table) == 2 * 3  # conditions × iterations 0..2
    assert table["finite"].all()
    for metric in ("policy_quality", "judge_alignment", "policy_entropy", "judge_perceived_quality", "kl_from_initial"):
        assert np.isfinite(table[metric]).all(), metric
    mixed = table[table["condition"] == "mixed"]
    assert np.isfinite(mixed[["meta_accuracy", "referee_share"]].to_numpy()).all()
    assert (table.groupby("condition")["kl_from_initial"].max() > 0).all()
