"""Rank-side entry point: ``python -m tntrun.worker <run_dir>`` (started by horovodrun).

Reads the resolved config and the plan the driver wrote into the run directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tntrun.worker <run_dir>", file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    from omegaconf import OmegaConf

    from tntrun.plan import Plan

    cfg = OmegaConf.load(run_dir / "config.yaml")
    plan = Plan.load(run_dir / "plan.json")

    from tntrun.engine import runtime

    runtime.init(plan.threads_per_rank, int(cfg.seed))
    from tntrun.engine.trainer import train

    final = train(cfg, plan)
    if runtime.hvd.rank() == 0:
        shown = ", ".join(f"{k}={v:.4f}" for k, v in final.items() if k.startswith("val_"))
        print(f"training done on {plan.world_size} ranks: {shown}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
