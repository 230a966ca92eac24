"""What a rank's model is compiled with: the user's statement, never tntrun's choice.

In order of precedence: the config's ``loss``, ``loss_weights`` and ``metrics`` keys; what
the user's builder compiled its model with; the dataset task's defaults
(:mod:`tntrun.engine.tasks`). Keras' own forms are accepted throughout: a name, a
``_target_`` mapping (instantiated), a mapping of output name to either, or a list.
Metrics from the config are Keras' ``weighted_metrics``, so padding samples (weight 0) and
the user's sample and class weights count as they count in the loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hydra.utils import instantiate

from tntrun.config.settings import Settings
from tntrun.engine import keras_internals
from tntrun.engine.tasks import compile_spec

KEPT = ("loss", "loss_weights", "metrics", "weighted_metrics")


@dataclass(frozen=True)
class CompileArgs:
    """``model.compile``'s loss and metrics, the compiled model's optimizer (None: tntrun's),
    and where each came from (``origin``: config, model or task) for the console note."""

    arguments: dict[str, Any]
    optimizer: Any = None
    origin: dict[str, str] = field(default_factory=dict)

    def note(self, target: str) -> str | None:
        """One line for rank 0 when the user's compiled model supplied anything."""
        kept = [k for k, where in self.origin.items() if where == "model"]
        if self.optimizer is None and not kept:
            return None
        what = ", ".join(kept + (["optimizer"] if self.optimizer is not None else []))
        line = f"tntrun: {target} returns a compiled model: its {what} are kept"
        if self.optimizer is not None:
            line += (
                f" ({type(self.optimizer).__name__}, averaged over the ranks; the plan's "
                "learning rate and schedule do not apply to it)"
            )
        return line + "; the config keys loss=, loss_weights=, metrics= override"


def instantiated(spec: Any) -> Any:
    """Keras' form of a config value: ``_target_`` mappings become objects, recursively."""
    if isinstance(spec, Mapping):
        if "_target_" in spec:
            return instantiate(dict(spec), _convert_="all")
        return {key: instantiated(value) for key, value in spec.items()}
    if isinstance(spec, list | tuple):
        return [instantiated(value) for value in spec]
    return spec


def compile_arguments(
    settings: Settings, task: str, model: Any, probabilities: bool = False
) -> CompileArgs:
    """The loss, loss weights and metrics ``model`` trains with (see the module's docstring);
    ``probabilities``: the model's outputs are a softmax's (the task's loss takes them so)."""
    compiled = keras_internals.compile_arguments(model)
    defaults = compile_spec(task, settings.train.label_smoothing, from_logits=not probabilities)
    arguments: dict[str, Any] = {}
    origin: dict[str, str] = {}
    stated_by_model = {k: compiled.get(k) for k in KEPT if compiled.get(k) is not None}
    if stated_by_model.get("loss") is not None:
        arguments.update(stated_by_model)
        origin.update(dict.fromkeys(stated_by_model, "model"))
    else:
        arguments.update(defaults)
        origin.update(dict.fromkeys(defaults, "task"))
    if settings.loss is not None:
        arguments["loss"], origin["loss"] = instantiated(settings.loss), "config"
    if settings.loss_weights is not None:
        arguments["loss_weights"] = instantiated(settings.loss_weights)
        origin["loss_weights"] = "config"
    if settings.metrics is not None:
        arguments.pop("metrics", None)
        origin.pop("metrics", None)
        metrics = [settings.metrics] if isinstance(settings.metrics, str) else settings.metrics
        arguments["weighted_metrics"] = instantiated(metrics)
        origin["weighted_metrics"] = "config"
    optimizer = model.optimizer if compiled else None  # the object Keras made of it
    return CompileArgs(arguments, optimizer, origin)


def states_from_logits(loss: Any) -> bool:
    """Whether a loss (or any loss of a per-output mapping or list) says ``from_logits=True``."""
    if isinstance(loss, Mapping):
        return any(states_from_logits(value) for value in loss.values())
    if isinstance(loss, list | tuple):
        return any(states_from_logits(value) for value in loss)
    get_config = getattr(loss, "get_config", None)
    return bool(get_config and get_config().get("from_logits"))
