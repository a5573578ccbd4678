"""Which networks a grid trains: an architecture family and sizes for the policy and for the judge.

`ModelConfig` is the condition file's `[model]` table. Its keys are flat (`policy_family`, `judge_hidden_dim`, ...)
so that a misspelt key is named with a suggestion, like every other table's. Each network's settings come out as a
`NetworkConfig`, a hashable value that the engine's functions take as a static argument (it changes the program's
shape, like the world). The defaults are today's networks: GRUs with a 16-wide embedding and a 32-wide hidden state.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

Family = Literal["gru", "attention"]
FAMILIES: tuple[Family, ...] = ("gru", "attention")

# Today's sizes, the defaults of both networks.
EMBED_DIM = 16
HIDDEN_DIM = 32


class NetworkConfig(NamedTuple):
    """One network's architecture.

    family: "gru" (a GRU cell over the tokens) or "attention" (self-attention blocks, `harness.engine.attention`).
    embed_dim: E, the token embedding width (for attention, the width of the residual stream).
    hidden_dim: H, the GRU's hidden width, or the attention blocks' MLP width.
    layers: attention blocks (1 or 2); a GRU has one cell.
    heads: attention heads, dividing E; a GRU has none (1).
    """

    family: Family = "gru"
    embed_dim: int = EMBED_DIM
    hidden_dim: int = HIDDEN_DIM
    layers: int = 1
    heads: int = 1


DEFAULT_NETWORK = NetworkConfig()


class ModelConfig(BaseModel):
    """The `[model]` table: the policy's and the judge's architecture, set separately."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    policy_family: Family = Field("gru", description="the policy's architecture: 'gru' or 'attention'")
    policy_embed_dim: int = Field(EMBED_DIM, ge=1, le=512, description="the policy's embedding width")
    policy_hidden_dim: int = Field(HIDDEN_DIM, ge=1, le=1024, description="the policy's GRU or MLP width")
    policy_layers: int = Field(1, ge=1, le=2, description="the policy's attention blocks (attention only)")
    policy_heads: int = Field(1, ge=1, le=16, description="the policy's attention heads (attention only)")
    judge_family: Family = Field("gru", description="the judge's architecture: 'gru' or 'attention'")
    judge_embed_dim: int = Field(EMBED_DIM, ge=1, le=512, description="the judge's embedding width")
    judge_hidden_dim: int = Field(HIDDEN_DIM, ge=1, le=1024, description="the judge's GRU or MLP width")
    judge_layers: int = Field(1, ge=1, le=2, description="the judge's attention blocks (attention only)")
    judge_heads: int = Field(1, ge=1, le=16, description="the judge's attention heads (attention only)")

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        for role, network in (("policy", self.policy), ("judge", self.judge)):
            if network.family == "gru" and (network.layers, network.heads) != (1, 1):
                raise ValueError(
                    f"{role}_layers and {role}_heads apply to the attention family only; a GRU has 1 of each"
                )
            if network.embed_dim % network.heads:
                raise ValueError(f"{role}_heads = {network.heads} must divide {role}_embed_dim = {network.embed_dim}")
        return self

    @property
    def policy(self) -> NetworkConfig:
        return NetworkConfig(
            self.policy_family, self.policy_embed_dim, self.policy_hidden_dim, self.policy_layers, self.policy_heads
        )

    @property
    def judge(self) -> NetworkConfig:
        return NetworkConfig(
            self.judge_family, self.judge_embed_dim, self.judge_hidden_dim, self.judge_layers, self.judge_heads
        )

    @property
    def is_default(self) -> bool:
        """Whether both networks are today's GRUs (the only ones the original lab's streams can initialise)."""
        return self.policy == DEFAULT_NETWORK and self.judge == DEFAULT_NETWORK


DEFAULT_MODEL = ModelConfig()
