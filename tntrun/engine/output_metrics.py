"""The task's metrics for a model of several outputs: one set per output.

Keras applies one loss to every output, but refuses a flat metrics list for several
outputs ("should be a dict or a list matching the output names"): each output gets
the task's metrics by name, in the structure of the model's outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def per_output(spec: Mapping[str, Any], model: Any) -> dict[str, Any]:
    """``spec`` (``model.compile`` arguments) with its weighted metrics repeated for each
    output when the model has several and the metrics are names (metric objects hold
    state, so they cannot be shared between outputs: left as they are)."""
    spec = dict(spec)
    outputs = getattr(model, "outputs", None)
    metrics = spec.get("weighted_metrics")
    if not metrics or not outputs or len(outputs) < 2:
        return spec
    if not all(isinstance(m, str) for m in metrics):
        return spec
    names = getattr(model, "output_names", None) or []
    if isinstance(model.output, Mapping) or len(names) == len(outputs):
        spec["weighted_metrics"] = {name: list(metrics) for name in names}
    else:
        spec["weighted_metrics"] = [list(metrics) for _ in outputs]
    return spec
