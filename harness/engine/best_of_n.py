"""Best-of-n sampling, exactly: the distribution of the best of n draws from a base policy, with its gold and proxy
values and its KL to the base, for every n of a grid at once, from one sort of the outputs.

Best-of-n draws n outputs independently from the base distribution π, scores them with the proxy J (the run's judges
as aggregated) and keeps the highest-scored draw; where several draws share the highest score it keeps one of those
draws uniformly at random (each tied draw, not each tied output, is equally likely: two draws of the same output
count twice). Its distribution π_n is then exact in closed form. Let B(x) be the tie block of x, the outputs whose
score equals J(x); F_hi(x) = π(J ≤ J(x)) the base mass up to and including the block, F_lo(x) = π(J < J(x)) the mass
strictly below it, P_B = F_hi − F_lo = π(B). The highest score is J(x) with probability F_hi^n − F_lo^n, and, given
that, each of the draws that reached it is a draw of π restricted to the block, so the kept one is too:

    π_n(x) = (F_hi(x)^n − F_lo(x)^n) · π(x) / P_B(x).

Without ties this is F(x)^n − F⁻(x)^n. The formula is a distribution for every real n ≥ 1 (non-negative terms that
telescope to 1), so the grid of n may be float. n = 1 gives π.

KL(π_n ‖ π) = Σ_B π_n(B) log(π_n(B) / P_B): the ratio π_n(x)/π(x) is the same for every output of a block. It is at
most Gao's bound log n − (n − 1)/n, the KL of best-of-n over a continuous score: π_n is the continuous case (U_max,
the largest of n uniforms, has density n u^(n−1) against the uniform's 1) read only through the bins [F_lo, F_hi) of
the blocks, and reading through bins cannot increase a KL (data processing). Equality needs the ratio n u^(n−1)
constant on every bin, so it holds at n = 1 (both 0) and for n > 1 only in the limit of vanishing atoms; ties are
coarser bins, so they lower the KL further. The proxy value E_{π_n}[J] = E[max of n draws' scores] never falls as n
grows (P(max ≤ s) = F(s)^n falls with n for every s); the gold value E_{π_n}[q*] may.

Numerics (float32, n up to 10⁴ and beyond). F^n is exp(n log F), with log F_hi = log(cumulative mass) where the
mass above the block is 1/2 or more and log1p(−mass above) where it is less, so F^n stays exact for F near 1 (the
mass above is summed from the top, not found as 1 − F). F_lo^n = F_hi^n · exp(−n·drop) with drop = −log(F_lo/F_hi) =
−log1p(−P_B/F_hi) for blocks under half of F_hi (no difference of nearly equal numbers) and log F_hi − log F_lo for
the others, and 1 − exp(−n·drop) = −expm1(−n·drop), exact for small n·drop. The KL uses the same pieces in log form:
log(π_n(B)/P_B) = n log F_hi + log(−expm1(−n·drop)) − log P_B. A block whose base mass underflows float32 (below
about 1e-38) counts as empty: its π_n is below n times that, and its terms are dropped from every sum, the KL's
included (P·r log r → 0 as r → 0). Cost per run: one sort (lax.sort of score, π and q* together), O(N) segment and
cumulative sums, then for each of the G values of n (one at a time, lax.map) three transcendentals per tie block and
three reductions: O(N·G).
"""

from __future__ import annotations

import chex
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


@flax.struct.dataclass
class BestOfN:
    """Best-of-n from one base distribution, per value of n (each float32 (G,)).

    n: the grid of n; gold: E_{π_n}[q*]; proxy: E_{π_n}[J]; kl: KL(π_n ‖ π) in nats (rounding below 0 clipped to 0);
    kl_bound: Gao's bound log n − (n − 1)/n, which kl never exceeds; top_mass: π_n of the proxy's top tie block
    (its single top-scored output where no score ties it), how much of best-of-n's mass one output holds.
    """

    n: jax.Array
    gold: jax.Array
    proxy: jax.Array
    kl: jax.Array
    kl_bound: jax.Array
    top_mass: jax.Array


def kl_bound(n: jax.Array) -> jax.Array:
    """Gao et al.'s bound on KL(π_n ‖ π): log n − (n − 1)/n, exact for a continuous score."""
    n = jnp.asarray(n, jnp.float32)
    return jnp.log(n) - (n - 1.0) / n


def log_n_grid(points: int = 20, largest: int = 10_000) -> np.ndarray:
    """int32 values of n from 1 to `largest`, evenly spaced in log n and rounded (duplicates after rounding
    dropped, so at small `largest` there may be fewer than `points`)."""
    if points < 2 or largest < 2:
        raise ValueError(f"a grid of n needs points >= 2 and largest >= 2, got points={points}, largest={largest}")
    return np.unique(np.rint(np.geomspace(1.0, float(largest), points))).astype(np.int32)


def best_of_n(log_probs: jax.Array, proxy: jax.Array, gold: jax.Array, n_grid: jax.Array) -> BestOfN:
    """Exact best-of-n from one base distribution, for every n of a grid (see the module docstring for π_n).

    Args:
      log_probs: float (N,): log π, the base distribution (normalised here; −inf for outputs π never draws).
      proxy: float (N,): the score best-of-n maximises, finite; equal scores are ties.
      gold: float (N,): q*, the quality best-of-n is judged by, finite.
      n_grid: float or int (G,): values of n ≥ 1 (real values allowed).

    Returns:
      BestOfN of float32 (G,) arrays. Pure and shape-static: jit it, vmap it over runs.
    """
    chex.assert_rank([log_probs, proxy, gold, n_grid], [1, 1, 1, 1])
    chex.assert_equal_shape([log_probs, proxy, gold])
    n_outputs = log_probs.shape[0]
    n = jnp.asarray(n_grid, jnp.float32)
    pi = jax.nn.softmax(log_probs.astype(jnp.float32))

    # One sort; tie blocks are runs of equal scores, numbered upwards (segments past the last block stay empty).
    score, pi, quality = jax.lax.sort((proxy.astype(jnp.float32), pi, gold.astype(jnp.float32)), num_keys=1)
    starts = jnp.concatenate([jnp.ones(1, bool), score[1:] != score[:-1]])
    block = jnp.cumsum(starts) - 1
    mass = jax.ops.segment_sum(pi, block, n_outputs, indices_are_sorted=True)  # P_B
    has_mass = mass > 0.0
    safe_mass = jnp.where(has_mass, mass, 1.0)
    block_gold = jax.ops.segment_sum(pi * quality, block, n_outputs, indices_are_sorted=True) / safe_mass
    block_score = jnp.where(has_mass, jax.ops.segment_max(score, block, n_outputs, indices_are_sorted=True), 0.0)

    # log F_hi: from the mass below and through the block where that is under 1/2, else from the mass above it.
    through = jnp.cumsum(mass)
    above = jnp.concatenate([jax.lax.cumsum(mass, reverse=True)[1:], jnp.zeros(1)])
    below = jnp.concatenate([jnp.zeros(1), through[:-1]])
    log_f_hi = jnp.where(above < 0.5, jnp.log1p(-above), jnp.log(through))
    share = jnp.where(has_mass, jnp.minimum(mass / jnp.where(has_mass, jnp.exp(log_f_hi), 1.0), 1.0), 0.0)
    # −log(F_lo / F_hi) ≥ 0: through log1p for small blocks (no difference of nearly equal logarithms).
    drop = jnp.where(share < 0.5, -jnp.log1p(-share), log_f_hi - jnp.log(below))
    log_mass = jnp.log(safe_mass)

    def at(n_value: jax.Array) -> jax.Array:
        """(gold, proxy, KL) at one n: π_n(B) = F_hi^n · (1 − (F_lo/F_hi)^n) = exp(n log F_hi) · −expm1(−n drop)."""
        reached = -jnp.expm1(-n_value * drop)  # P(the best draw is in the block | no draw above it)
        mass_n = jnp.where(has_mass, jnp.exp(n_value * log_f_hi) * reached, 0.0)
        log_ratio = n_value * log_f_hi + jnp.log(reached) - log_mass  # log π_n(x)/π(x), every x of the block
        # KL ≥ 0; rounding alone can take a KL of 0 (n = 1) to −1e-7, which √KL would turn into NaN.
        kl = jnp.maximum(jnp.sum(jnp.where(mass_n > 0.0, mass_n * log_ratio, 0.0)), 0.0)
        return jnp.stack([mass_n @ block_gold, mass_n @ block_score, kl, mass_n[top_block]])

    top_block = block[-1]  # blocks are numbered upwards: the last output's block holds the highest score
    # One n at a time (lax.map), so vmapped over runs the work in flight is (runs, N), not (runs, G, N).
    gold_n, proxy_n, kl_n, top_n = jax.lax.map(at, n).T
    return BestOfN(n=n, gold=gold_n, proxy=proxy_n, kl=kl_n, kl_bound=kl_bound(n), top_mass=top_n)
