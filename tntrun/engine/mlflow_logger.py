"""Rank 0's MLflow client: logs into the run the driver created (``MLFLOW_RUN_ID``)."""

from __future__ import annotations

import os
import time

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient


class RankMetricsLogger:
    """Logs metric dicts into the driver's run. Only the master rank creates one."""

    def __init__(self) -> None:
        self.run_id = os.environ["MLFLOW_RUN_ID"]
        self.client = MlflowClient(tracking_uri=os.environ["MLFLOW_TRACKING_URI"])

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        batch = [Metric(k, v, now, step) for k, v in sorted(metrics.items())]
        self.client.log_batch(self.run_id, metrics=batch)
