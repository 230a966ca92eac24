"""Rank 0's metrics file and the driver's relay into MLflow."""

from __future__ import annotations

import json

from tntrun.contract.metrics import METRICS_FILE, MetricsWriter
from tntrun.tracking.metrics_stream import MetricsRelay


def test_relay_sends_each_complete_line_once_and_the_rest_on_exit(tmp_path):
    sent: list[list[tuple]] = []
    writer = MetricsWriter(tmp_path)
    with MetricsRelay(tmp_path / METRICS_FILE, sent.append, interval_s=3600) as relay:
        relay.drain()  # no file content yet: nothing to send
        writer.log({"loss": 0.5, "accuracy": 0.9}, step=0)
        relay.drain()
        with (tmp_path / METRICS_FILE).open("a") as raw:  # a line still being written
            raw.write(json.dumps({"t": 5, "step": 1, "metrics": {"loss": 0.25}})[:-2])
        relay.drain()
        assert [[(k, v, s) for k, v, _, s in batch] for batch in sent] == [
            [("accuracy", 0.9, 0), ("loss", 0.5, 0)]
        ]
        with (tmp_path / METRICS_FILE).open("a") as raw:
            raw.write("}}\n")
    writer.close()
    assert sent[-1] == [("loss", 0.25, 5, 1)]  # completed line, sent when the relay stopped
    assert len(sent) == 2


def test_relay_without_a_metrics_file_sends_nothing(tmp_path):
    sent: list = []
    with MetricsRelay(tmp_path / METRICS_FILE, sent.append, interval_s=0.01):
        pass
    assert sent == []
