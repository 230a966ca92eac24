"""Rank 0's MLflow client: logs into the run the driver created (``MLFLOW_RUN_ID``)."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient


class RankMetricsLogger:
    """Logs metric dicts into the driver's run. Only the master rank creates one."""

    def __init__(self) -> None:
        self.run_id = os.environ["MLFLOW_RUN_ID"]
        self.uri = os.environ["MLFLOW_TRACKING_URI"]
        self.client = MlflowClient(tracking_uri=self.uri)

    def log(self, metrics: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, step) for k, v in sorted(metrics.items())]
        self.client.log_batch(self.run_id, metrics=batch)

    @contextmanager
    def system_metrics(self, tracking: Any, plan: Any) -> Iterator[None]:
        """MLflow's system metrics (psutil) while training; node-prefixed on multi-node runs."""
        if not tracking.system_metrics:
            yield
            return
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        monitor = SystemMetricsMonitor(
            self.run_id,
            sampling_interval=float(tracking.system_metrics_interval_s),
            node_id=socket.gethostname() if plan.nodes > 1 else None,
            tracking_uri=self.uri,
        )
        monitor.start()
        try:
            yield
        finally:
            monitor.finish()
