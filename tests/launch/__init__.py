"""Launching ranks and ending them: failures, preemption, the driver's heartbeat, rank logs."""
