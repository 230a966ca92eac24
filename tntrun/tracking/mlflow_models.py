"""A run's models in MLflow 3: logged models of the run, and versions in the registry.

What ``mlflow.<flavour>.log_model`` does, done by the driver from a folder rank 0
wrote: create the logged model (its source run, the run's params, tntrun's tags),
point the folder's ``MLmodel`` at it, upload the folder, link the model's metrics
(the evaluation ones to the run's dataset), record it as the run's output (the runs
table's Model column) and mark it READY (the experiment's Models tab). No TensorFlow:
the folder is uploaded as files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml

from tntrun.tracking.logged_model import LOGGED_MODEL_TAG, ROLE_TAG, LocalModel

MLMODEL = "MLmodel"
MODEL_TYPE = "keras"
EVALUATION_PREFIXES = ("val_", "bleu")  # metrics measured on the dataset's validation split
ALREADY_EXISTS = ("RESOURCE_ALREADY_EXISTS", "ALREADY_EXISTS")
MODEL_VERSIONS_TAG = "mlflow.modelVersions"  # on a logged model: its registered versions


def find_run_model(client: Any, experiment_id: str, run_id: str, role: str) -> Any | None:
    """The run's logged model of ``role`` (the newest, READY or not), if any."""
    found = client.search_logged_models(
        experiment_ids=[experiment_id],
        filter_string=f"source_run_id = '{run_id}' AND tags.`{ROLE_TAG}` = '{role}'",
        order_by=[{"field_name": "creation_time", "ascending": False}],
        max_results=1,
    )
    return found[0] if found else None


def point_mlmodel_at(model: LocalModel, logged: Any, run_id: str) -> None:
    """Record the logged model's id, run and location in the folder's ``MLmodel``, as
    ``log_model`` does (MLflow reads them back when the model is loaded)."""
    path = model.folder / MLMODEL
    spec = yaml.safe_load(path.read_text())
    spec.update(
        model_uuid=logged.model_id,
        model_id=logged.model_id,
        run_id=run_id,
        artifact_path=logged.artifact_location,
    )
    path.write_text(yaml.safe_dump(spec, default_flow_style=False))


def linked_metrics(model: LocalModel, model_id: str, run: Any) -> list[Any]:
    """The model's metrics as MLflow metrics of the run linked to it; the evaluation ones
    also to the run's dataset input (the Models tab shows them per dataset)."""
    from mlflow.entities import Metric

    inputs = run.inputs.dataset_inputs if run.inputs else []
    dataset = inputs[0].dataset if inputs else None
    metrics = []
    for key, value, timestamp, step in model.metrics:
        evaluated = dataset is not None and key.startswith(EVALUATION_PREFIXES)
        metrics.append(
            Metric(
                key,
                value,
                timestamp,
                step,
                dataset_name=dataset.name if evaluated else None,
                dataset_digest=dataset.digest if evaluated else None,
                run_id=run.info.run_id,
                model_id=model_id,
            )
        )
    return metrics


def log_logged_model(client: Any, experiment_id: str, run_id: str, model: LocalModel) -> str:
    """Log ``model``'s folder as a logged model of the run; its id. A READY one of the same
    role is the run's already (a retried delivery); a half-logged one is replaced."""
    from mlflow.entities import LoggedModelOutput, LoggedModelStatus

    earlier = find_run_model(client, experiment_id, run_id, model.role)
    if earlier is not None:
        if earlier.status == LoggedModelStatus.READY:
            return earlier.model_id
        client.delete_logged_model(earlier.model_id)
    run = client.get_run(run_id)
    name = run.info.run_name or "model"
    logged = client.create_logged_model(
        experiment_id,
        name=name if model.role == "final" else f"{name}-{model.role}",
        source_run_id=run_id,
        tags=dict(model.tags),
        params={key: str(value) for key, value in run.data.params.items()},
        model_type=MODEL_TYPE,
    )
    point_mlmodel_at(model, logged, run_id)
    client.log_model_artifacts(logged.model_id, str(model.folder))
    client.log_batch(run_id, metrics=linked_metrics(model, logged.model_id, run))
    client.log_outputs(run_id, [LoggedModelOutput(logged.model_id, step=model.step)])
    client.finalize_logged_model(logged.model_id, LoggedModelStatus.READY)
    return logged.model_id


def register_version(
    client: Any,
    model_id: str,
    name: str,
    alias: str | None,
    tags: Mapping[str, str],
) -> str:
    """A new version of the registered model ``name`` (created if missing) from the logged
    model, with ``tags`` (which name the logged model: :func:`~.logged_model.version_tags`)
    and ``alias``; the version. The logged model's version from an earlier attempt is
    reused."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name)
    except MlflowException as err:
        if err.error_code not in ALREADY_EXISTS:
            raise
    logged = client.get_logged_model(model_id)
    run_versions = client.search_model_versions(
        f"name = '{name}' AND run_id = '{logged.source_run_id}'"
    )
    earlier = [v for v in run_versions if v.tags.get(LOGGED_MODEL_TAG) == model_id]
    version = earlier[0] if earlier else None
    if version is None:
        # The logged model's location, not models:/<id>: a local registry resolves that
        # through the process's global tracking URI, not this client's (MLflow 3.17).
        version = client.create_model_version(
            name,
            source=logged.artifact_location,
            run_id=logged.source_run_id,
            tags=dict(tags),
            model_id=model_id,
        )
    note_version(client, logged, name, version.version)
    if alias:
        client.set_registered_model_alias(name, alias, version.version)
    return str(version.version)


def note_version(client: Any, logged: Any, name: str, version: int | str) -> None:
    """Name the version on the logged model, as ``mlflow.register_model`` does (the
    client's ``create_model_version`` does not): the Models tab's "Registered models"
    column reads it. Once, through a retried attempt."""
    versions = json.loads(logged.tags.get(MODEL_VERSIONS_TAG) or "[]")
    if not any(v.get("name") == name and str(v.get("version")) == str(version) for v in versions):
        entry = {"name": name, "version": version}
        client.set_logged_model_tags(
            logged.model_id, {MODEL_VERSIONS_TAG: json.dumps([*versions, entry])}
        )
