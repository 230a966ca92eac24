"""The tracked run: MLflow sessions, the metrics relay, outages, the runs table, sweeps, the UI."""
