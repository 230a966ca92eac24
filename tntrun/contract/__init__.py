"""The run-directory contract: what the driver and the ranks both read and write.

The bottom layer, imported by both sides and importing no other part of tntrun
(but ``tntrun.errors``): file names and ``TNTRUN_*`` variables
(:mod:`~tntrun.contract.run_files`), the metrics stream's format
(:mod:`~tntrun.contract.metrics`), each host's system-metrics file
(:mod:`~tntrun.contract.node_metrics`), the driver's heartbeat
(:mod:`~tntrun.contract.driver_alive`), stop requests
(:mod:`~tntrun.contract.stop_requests`, :mod:`~tntrun.contract.stop_signals`),
the checkpoint layout (:mod:`~tntrun.contract.checkpoints`), the ranks' logs
(:mod:`~tntrun.contract.rank_logs`) and a run's status
(:mod:`~tntrun.contract.run_status`). No TensorFlow, no MLflow.
"""
