"""The console at 32 ranks: rank 0's lines and the others' errors, from a real launcher
process; the per-rank logs keep every line."""

from __future__ import annotations

import io
import sys
import textwrap

import pytest

from tntrun.contract.rank_logs import RankLogWriter
from tntrun.launch.console_relay import ConsoleRelay
from tntrun.launch.rank_job import RankJob

pytestmark = pytest.mark.slow

# Prints as horovodrun relays 32 ranks: labelled lines, interleaved; rank 17 fails.
RANKS = textwrap.dedent("""
    import sys
    for epoch in range(3):
        for rank in range(32):
            print(f"[{rank}]<stdout>:epoch {epoch}: loss 0.{rank}", flush=True)
    for text in ("Traceback (most recent call last):", '  File "x.py", line 1, in <module>',
                 "ValueError: rank 17's shard is empty"):
        print(f"[17]<stderr>:{text}", flush=True)
    print("Process 17 exit with status code 1.", flush=True)
    sys.exit(1)
""")


def test_32_ranks_show_rank_0_and_the_failing_rank_and_keep_every_line(tmp_path):
    out = io.StringIO()
    job = RankJob(
        [sys.executable, "-c", RANKS],
        {},
        tmp_path / "ranks.log",
        RankLogWriter(tmp_path / "logs"),
        console=ConsoleRelay(out, every_rank=False),
    )
    assert job.follow().returncode == 1
    assert out.getvalue().splitlines() == [
        "[0]<stdout>:epoch 0: loss 0.0",
        "[0]<stdout>:epoch 1: loss 0.0",
        "[0]<stdout>:epoch 2: loss 0.0",
        "[17]<stderr>:ValueError: rank 17's shard is empty",
        "Process 17 exit with status code 1.",
    ]
    assert len((tmp_path / "ranks.log").read_text().splitlines()) == 32 * 3 + 4
    for rank in range(32):
        kept = (tmp_path / "logs" / f"rank.{rank}.log").read_text().splitlines()
        assert kept[:3] == [f"epoch {e}: loss 0.{rank}" for e in range(3)]
    assert (tmp_path / "logs" / "rank.17.log").read_text().splitlines()[3:] == [
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "ValueError: rank 17's shard is empty",
    ]
