"""Large-batch training rules: linear warm-up, a per-layer trust ratio (LARS) and heavy-ball momentum.

Weak scaling makes a step see 16P samples and, by default, an epoch ceil(632/P) steps: fewer, larger
steps. Plain SGD then needs a smaller step than the summed gradient asks for (the `off` rule caps its
growth at twice serial's), and at P = 16 it no longer converges in 5 epochs. The `mean` rule steps by
the mean of the P ranks' sums, serial's step size, for weak scaling that keeps serial's 632 steps. The rules here act on the step
G = base_step * (summed gradient), a flat buffer laid out like `grads`, after the exchange, so every
rank computes them on the same numbers and keeps bit-identical parameters:

    warm-up      G *= min(1, (t + 1) / warmup_steps)               for the first warmup_steps steps t
    trust ratio  G_l *= min(1, eta * ||w_l|| / ||G_l||)           per layer l (weights and biases)
    momentum     v = beta * v + G;  params -= v                    (heavy ball; v one flat buffer)

The trust ratio bounds each layer's step to eta times that layer's norm, so a large batch may use the
full linear-scaled step without one step throwing a layer far off (LARS, You et al. 2017, here on the
step rather than the raw gradient and clipped at 1, as NVIDIA's LARC does in its clipping mode: a
small step passes unchanged). docs/sync.md holds the measurements behind PRESETS.
"""
__all__ = ["LargeBatchRule", "Optimizer", "PRESETS", "WEAK_PRESET", "large_batch_rule"]

import dataclasses
import math

import numpy as np

WEAK_STEP_GROWTH_CAP = 2  # the `off` rule: the weak-scaling step may grow at most this much with P


@dataclasses.dataclass(frozen=True)
class LargeBatchRule:
    """The constants of one rule; warmup < 1 is a fraction of the run's steps, lars None = off."""

    name: str
    step_growth: str = "capped"  # weak scaling's base step: "capped" lr*min(1, 2/P), "linear" lr, "mean" lr/P
    warmup: float = 0.0
    momentum: float = 0.0
    lars: float = None

    def base_step(self, learning_rate, processes):
        """The step size of weak scaling at `processes` ranks, before warm-up, trust ratio, momentum."""
        if self.step_growth == "linear":
            return learning_rate
        if self.step_growth == "mean":
            return learning_rate / processes
        return learning_rate * min(1, WEAK_STEP_GROWTH_CAP / processes)

    def warmup_steps(self, total_steps):
        """Warm-up length in steps: `warmup` itself, or that fraction of total_steps when below 1."""
        if self.warmup < 1:
            return round(self.warmup * total_steps)
        return int(self.warmup)

    def is_plain(self):
        """True when the update is plain SGD, params -= G (no warm-up, trust ratio or momentum)."""
        return self.warmup == 0 and self.momentum == 0 and self.lars is None

    def record(self):
        """The rule's constants as a dict (for --json)."""
        return dataclasses.asdict(self)


# The named rules of `--large-batch`, every constant in one place. `lars` sits mid-plateau of the sweeps
# in docs/sync.md (eta 0.02-0.05, beta 0.7-0.8, warm-up 0.1-0.3 all did well); eta 0.07 and beta
# 0.95 diverged on some seeds, so the constants keep away from that edge.
PRESETS = {
    "off": LargeBatchRule("off"),
    "mean": LargeBatchRule("mean", step_growth="mean"),
    "lars": LargeBatchRule("lars", step_growth="linear", warmup=0.2, momentum=0.8, lars=0.03),
}
WEAK_PRESET = "lars"  # what --scaling weak uses unless told otherwise


def large_batch_rule(name="off", warmup=None, momentum=None, lars=None):
    """The preset `name` with any of warmup / momentum / lars given (not None) replacing its own.

    lars=0 turns the trust ratio off. Raises ValueError for an unknown name or a value that makes no
    sense (negative warm-up, momentum outside [0, 1), negative eta).
    """
    if name not in PRESETS:
        raise ValueError(f"large-batch rule must be one of {', '.join(PRESETS)}, got {name!r}")
    changes = {key: value for key, value in
               (("warmup", warmup), ("momentum", momentum), ("lars", lars)) if value is not None}
    rule = dataclasses.replace(PRESETS[name], **changes)
    if rule.lars == 0:
        rule = dataclasses.replace(rule, lars=None)
    if not rule.warmup >= 0:
        raise ValueError(f"warm-up must not be negative, got {rule.warmup}")
    if not 0 <= rule.momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {rule.momentum}")
    if rule.lars is not None and not rule.lars > 0:
        raise ValueError(f"lars eta must be positive, got {rule.lars}")
    return rule


class Optimizer:
    """Applies a step G (flat, laid out like the parameters) by warm-up, trust ratio and momentum.

    Holds the velocity (one flat buffer like the parameters, allocated only with momentum) and the
    number of updates done, which sets the warm-up; both go into checkpoints.
    """

    def __init__(self, rule, layer_slices, size, dtype, warmup_steps):
        """layer_slices: each layer's slice of the flat buffer (its weights, then its biases)."""
        self.rule = rule
        self.layer_slices = layer_slices
        self.warmup_steps = warmup_steps
        self.velocity = np.zeros(size, dtype=dtype) if rule.momentum else None
        self.layer_velocities = [self.velocity[layer] if rule.momentum else None for layer in layer_slices]
        self.updates = 0

    def warmup_factor(self):
        """min(1, (t + 1) / warmup_steps) at update t: the first step is already a small one."""
        if self.updates >= self.warmup_steps:
            return 1.0
        return (self.updates + 1) / self.warmup_steps

    def trust_ratio(self, w, g):
        """min(1, eta * ||w|| / ||g||) for one layer's flat parameters w and step g (1 if g = 0)."""
        g_norm = math.sqrt(np.dot(g, g))  # dot of a contiguous 1-D slice: no temporary array
        if g_norm == 0:
            return 1.0
        return min(1.0, self.rule.lars * math.sqrt(np.dot(w, w)) / g_norm)

    def apply(self, params, step):
        """params -= the step (step: G, a scratch buffer this modifies), with momentum if any.

        Per layer: the trust ratio's two dots (read only), step *= warm-up factor * trust ratio (one
        multiply, skipped when 1), velocity = beta * velocity + step (two passes: numpy has no fused
        multiply-add) and params -= velocity; numpy's fewest passes for this arithmetic (docs/sync.md).
        Element by element the same arithmetic as whole-buffer passes, so the same bits and, measured
        (bench/update.py), the same time.
        """
        warm = self.warmup_factor()
        for layer, velocity in zip(self.layer_slices, self.layer_velocities):
            w, g = params[layer], step[layer]
            factor = warm if self.rule.lars is None else warm * self.trust_ratio(w, g)
            if factor != 1.0:
                g *= factor
            if velocity is None:
                w -= g
            else:
                velocity *= self.rule.momentum
                velocity += g
                w -= velocity
        self.updates += 1
