"""What a task trains on: its loss and metrics (classification or translation)."""

from __future__ import annotations

from typing import Any

import keras

TASKS = ("classification", "translation")


def compile_spec(task: str, label_smoothing: float, from_logits: bool = True) -> dict[str, Any]:
    """``model.compile``'s default arguments (loss, weighted metrics) for ``task``, when
    neither the config nor the user's compiled model states them; ``from_logits``: whether
    the model outputs logits (else probabilities, a softmax last).

    Metrics are weighted so zero-weight padding samples never count.
    """
    if task == "classification":
        if label_smoothing:
            raise ValueError(
                "train.label_smoothing applies to translation; classification uses "
                "sparse cross-entropy without smoothing: set train.label_smoothing=0"
            )
        return {
            "loss": keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits),
            "weighted_metrics": ["accuracy"],
        }
    if task == "translation":
        from tntrun.engine.translation_loss import masked_sparse_crossentropy, masked_token_accuracy

        return {
            "loss": masked_sparse_crossentropy(label_smoothing=label_smoothing),
            "weighted_metrics": [masked_token_accuracy(name="accuracy")],
        }
    raise ValueError(f"dataset task {task!r}: tntrun trains {', '.join(TASKS)}")
