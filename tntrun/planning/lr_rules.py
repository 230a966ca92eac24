"""Where the learning-rate scaling rules hold: which optimizers each was shown for and up to
which global batch, and the plan's notes when a run leaves that ground.

Pure. A rule scales base_lr silently to any batch (linear to 65,536 gives 25.6 from 0.1 at
256); the papers behind the rules tested far less, and past it they train differently: with
a layer-wise adaptive optimizer and a longer warm-up. The thresholds and their sources are
stated once, here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tntrun.config.schema import ADAPTIVE_OPTIMIZERS, LAYER_WISE_OPTIMIZERS, LrScaling

GOYAL = "Goyal et al. 2017"
YOU_LARS = "You, Gitman & Ginsburg 2017"
YOU_LAMB = "You et al. 2020"
MCCANDLISH = "McCandlish et al. 2018"


@dataclass(frozen=True)
class RuleRange:
    """How far a scaling rule was shown to hold, and what the literature uses past it."""

    largest_batch: int
    shown_for: str  # the evidence, with its citation
    layer_wise: str  # the optimizer tntrun names for past it, with its citation


# The global batch each rule was validated up to, and by whom.
RULE_RANGES = {
    LrScaling.linear: RuleRange(
        8192,
        f"ResNet-50 on ImageNet with SGD and a 5-epoch warm-up [{GOYAL}]",
        f"optimizer=lars [{YOU_LARS}; experiment=resnet50_imagenet_lars]",
    ),
    LrScaling.sqrt: RuleRange(
        8192,
        "Adam-family optimizers [Malladi et al. 2022]; past ~8k You et al. trained BERT "
        f"(to 32k) with a layer-wise optimizer instead [{YOU_LAMB}]",
        f"optimizer=lamb [{YOU_LAMB}]",
    ),
}


@dataclass(frozen=True)
class LrRuleInputs:
    """What the notes read from a plan (kept apart from Plan, which imports this module)."""

    optimizer: str | None  # tntrun's name; None for a user's class (optimizer._target_)
    scaling: str
    effective_batch: int
    base_batch: int
    scaled_lr: float
    warmup_epochs: float


def lr_rule_notes(inputs: LrRuleInputs) -> list[str]:
    """The notes on the LR rule: a rule chosen for another kind of optimizer, and a global
    batch past the one the rule was shown for."""
    notes = []
    mismatch = _adaptive_with_linear(inputs)
    if mismatch:
        notes.append(mismatch)
    past = large_batch_note(inputs)
    if past:
        notes.append(past)
    return notes


def _adaptive_with_linear(inputs: LrRuleInputs) -> str | None:
    adaptive = inputs.optimizer in ADAPTIVE_OPTIMIZERS
    scaled = inputs.effective_batch != inputs.base_batch
    if not (adaptive and scaled and inputs.scaling == LrScaling.linear.value):
        return None
    return (
        f"optimizer={inputs.optimizer} with schedule.scaling=linear: the linear rule (base_lr x "
        f"{inputs.effective_batch}/{inputs.base_batch}) was shown for SGD [{GOYAL}]; for "
        "adaptive optimizers the square-root rule is the usual one: schedule.scaling=sqrt"
    )


def large_batch_note(inputs: LrRuleInputs) -> str | None:
    """One note when the global batch is past the rule's validated range (None within it, for
    a layer-wise optimizer, a user's optimizer or an LR that is not scaled)."""
    if inputs.optimizer is None or inputs.optimizer in LAYER_WISE_OPTIMIZERS:
        return None
    if inputs.scaling not in {rule.value for rule in RULE_RANGES}:
        return None
    rule = RULE_RANGES[LrScaling(inputs.scaling)]
    if inputs.effective_batch <= rule.largest_batch:
        return None
    return (
        f"global batch {inputs.effective_batch} is past {rule.largest_batch}, the largest the "
        f"{inputs.scaling} LR rule was shown for ({rule.shown_for}): its LR "
        f"{inputs.scaled_lr:g} is untested there. Past it the literature trains with a "
        f"layer-wise adaptive optimizer, {rule.layer_wise}, and {_longer_warmup(inputs)}. "
        "The run measures the gradient noise scale (metric gradient_noise_scale) "
        f"[{MCCANDLISH}]: a global batch well above it buys little from more nodes"
    )


def _longer_warmup(inputs: LrRuleInputs) -> str:
    if inputs.warmup_epochs:
        return f"a longer warm-up than {inputs.warmup_epochs:g} epochs (schedule.warmup_epochs)"
    return "a warm-up (schedule=warmup_poly or warmup_cosine, schedule.warmup_epochs)"
