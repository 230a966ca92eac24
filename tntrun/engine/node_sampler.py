"""This host's system metrics, sampled beside the ranks by the rank with local rank 0.

MLflow's own monitor cannot run here (no rank imports MLflow), so this module
reads what its monitors read, with psutil (and NVIDIA's NVML where
``nvidia-ml-py`` finds GPUs), under the same names and units, and appends one
line per sample to ``<run dir>/system/<host>.jsonl``
(:mod:`tntrun.contract.node_metrics`); the driver relays the lines into the run.
No TensorFlow: the sampler starts before the rank imports it.

A daemon thread samples a first time one second after it starts (the CPU
figure needs a span), then every ``tracking.system_metrics_interval_s``, and
once more when it is stopped. A sample costs about 0.15 ms (psutil calls and its line)
(BENCHMARKS.md), so it never slows training; a failed sample is skipped.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from tntrun.contract.node_metrics import NETWORK_TOTALS, Sample, SampleWriter, last_sample
from tntrun.ranks import get_local_rank

if TYPE_CHECKING:
    from tntrun.config.schema import TrackingConfig

FIRST_SAMPLE_S = 1.0  # the first sample's CPU figure spans this much of the rank's start-up
MEGABYTE = 1e6  # MLflow's monitors count megabytes of 10**6 bytes


def this_host() -> str:
    """The host as the plan names it (the launcher's ``HOROVOD_HOSTNAME``), else its name."""
    return os.environ.get("HOROVOD_HOSTNAME") or socket.gethostname()


class Gpus:
    """NVIDIA GPUs through NVML, read as MLflow's ``GPUMonitor`` reads them."""

    def __init__(self, nvml: Any, handles: list[Any]) -> None:
        self._nvml, self._handles = nvml, handles

    @classmethod
    def found(cls) -> Gpus | None:
        """The host's GPUs; None without ``nvidia-ml-py``, without a driver or with no GPU."""
        try:
            import pynvml

            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception:  # ImportError, or pynvml.NVMLError: no library, driver or device
            return None
        return cls(pynvml, handles) if handles else None

    def read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        for i, handle in enumerate(self._handles):
            for reading in (self._memory, self._utilization, self._power):
                try:
                    values.update(reading(i, handle))
                except Exception:  # a reading this GPU does not offer: the others still count
                    continue
        return values

    def _memory(self, i: int, handle: Any) -> dict[str, float]:
        memory = self._nvml.nvmlDeviceGetMemoryInfo(handle)
        return {
            f"gpu_{i}_memory_usage_percentage": memory.used / memory.total * 100,
            f"gpu_{i}_memory_usage_megabytes": memory.used / MEGABYTE,
        }

    def _utilization(self, i: int, handle: Any) -> dict[str, float]:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(handle)
        return {f"gpu_{i}_utilization_percentage": float(rates.gpu)}

    def _power(self, i: int, handle: Any) -> dict[str, float]:
        milliwatts = self._nvml.nvmlDeviceGetPowerUsage(handle)
        limit = self._nvml.nvmlDeviceGetEnforcedPowerLimit(handle)
        return {
            f"gpu_{i}_power_usage_watts": milliwatts / 1000,
            f"gpu_{i}_power_usage_percentage": milliwatts / limit * 100,
        }


def read_system(network_base: tuple[float, float], gpus: Gpus | None) -> dict[str, float]:
    """One reading, named and scaled as MLflow's CPU, disk, network and GPU monitors do
    (their averages of one reading: CPU, memory, disk and GPU rounded to 0.1).
    ``network_base``: the traffic counters, in MB, that the totals count from."""
    memory = psutil.virtual_memory()
    disk = psutil.disk_usage(os.sep)
    network = psutil.net_io_counters()
    values = {
        "cpu_utilization_percentage": psutil.cpu_percent(),  # since this thread's last call
        "system_memory_usage_megabytes": memory.used / MEGABYTE,
        "system_memory_usage_percentage": memory.used / memory.total * 100,
        "disk_usage_percentage": disk.percent,
        "disk_usage_megabytes": disk.used / MEGABYTE,
        "disk_available_megabytes": disk.free / MEGABYTE,
        **(gpus.read() if gpus is not None else {}),
    }
    values = {key: round(float(value), 1) for key, value in values.items()}
    received, sent = network.bytes_recv / MEGABYTE, network.bytes_sent / MEGABYTE
    values[NETWORK_TOTALS[0]] = received - network_base[0]
    values[NETWORK_TOTALS[1]] = sent - network_base[1]
    return values


class NodeSampler:
    """Sample this host into ``system/<node>.jsonl`` in a daemon thread (see the module doc).

    Steps and network totals go on from the node's last sample in the run directory, so
    restarted ranks and resumed runs extend the same series.
    """

    def __init__(self, run_dir: Path, node: str, interval_s: float) -> None:
        self.node, self.interval_s = node, interval_s
        previous = last_sample(run_dir, node)
        self._step = previous.step + 1 if previous is not None else 0
        carried = [previous.metrics.get(key, 0.0) if previous else 0.0 for key in NETWORK_TOTALS]
        network = psutil.net_io_counters()
        now = (network.bytes_recv / MEGABYTE, network.bytes_sent / MEGABYTE)
        self._network_base = (now[0] - carried[0], now[1] - carried[1])
        self._gpus = Gpus.found()
        self._writer = SampleWriter(run_dir, node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tntrun-node-sampler", daemon=True)

    @property
    def has_gpus(self) -> bool:
        return self._gpus is not None

    def sample(self) -> Sample:
        """Read the system now and append it as the node's next sample."""
        sample = Sample(
            int(time.time() * 1000), self._step, read_system(self._network_base, self._gpus)
        )
        self._writer.write(sample)
        self._step += 1
        return sample

    def _sample_quietly(self) -> None:
        try:
            self.sample()
        except Exception as err:  # a missing sample never fails a rank
            print(f"tntrun: warning: system metrics sample skipped: {err}", file=sys.stderr)

    def _run(self) -> None:
        psutil.cpu_percent()  # psutil's CPU % counts from this thread's previous call
        wait = min(FIRST_SAMPLE_S, self.interval_s)
        while not self._stop.wait(wait):
            self._sample_quietly()
            wait = self.interval_s
        self._sample_quietly()

    def start(self) -> NodeSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        """The last sample, then close the file."""
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join()
        self._writer.close()


@contextmanager
def sampling_this_node(tracking: TrackingConfig, run_dir: Path) -> Iterator[NodeSampler | None]:
    """On the rank with local rank 0 and with ``tracking.system_metrics``: this host's
    sampler while the block runs (None elsewhere)."""
    if not tracking.system_metrics or get_local_rank() != 0:
        yield None
        return
    try:
        sampler = NodeSampler(run_dir, this_host(), tracking.system_metrics_interval_s)
    except OSError as err:  # no system metrics never fails a rank
        print(f"tntrun: warning: no system metrics of this host: {err}", file=sys.stderr)
        yield None
        return
    sampler.start()
    try:
        yield sampler
    finally:
        sampler.stop()
