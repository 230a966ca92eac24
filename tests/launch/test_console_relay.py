"""The ranks' lines on the driver's console: each line as it comes, rank 0's live progress
line redrawn in place and erased before the next ordinary line."""

from __future__ import annotations

import io

from tntrun.console import ERASE
from tntrun.contract.run_files import LIVE_PREFIX
from tntrun.launch.console_relay import ConsoleRelay, live_text


def test_a_live_line_is_known_with_or_without_the_launchers_rank_label():
    assert live_text(f"{LIVE_PREFIX} epoch 1 12/40\n") == "epoch 1 12/40"
    assert live_text(f"[0]<stdout>:{LIVE_PREFIX} epoch 1 12/40\n") == "epoch 1 12/40"
    assert live_text(f"0: {LIVE_PREFIX}step 3\n") == "step 3"
    assert live_text("[0]<stdout>:epoch 1: loss 0.3\n") is None
    assert live_text(f"[0]<stdout>:said {LIVE_PREFIX}\n") is None, "only at the line's start"


def test_live_lines_are_redrawn_and_erased_before_the_next_line():
    out = io.StringIO()
    relay = ConsoleRelay(out)
    relay.line("starting\n")
    relay.live("step 1")
    relay.live("step 2")
    relay.line("epoch 1 done\n")
    relay.line("next\n")
    relay.close()
    assert out.getvalue() == (f"starting\n{ERASE}step 1{ERASE}step 2{ERASE}epoch 1 done\nnext\n"), (
        "one erase per live line drawn, none once it is gone"
    )


def test_a_long_live_line_is_cut_to_one_terminal_line_and_erased_at_the_end():
    out = io.StringIO()
    relay = ConsoleRelay(out)
    relay.live("x" * 500)
    relay.close()
    drawn, erased = out.getvalue().split(ERASE)[1:]
    assert drawn == "x" * 200 and erased == ""


def test_a_large_runs_console_shows_rank_0_the_launcher_and_other_ranks_errors():
    out = io.StringIO()
    relay = ConsoleRelay(out, every_rank=False)
    lines = [
        "[0]<stdout>:epoch 1: loss 0.3\n",
        "[7]<stdout>:epoch 1: loss 0.3\n",  # the same story again: rank 0 tells it
        "[1,0]<stdout>:open mpi's label\n",
        "12: srun's label, not rank 0\n",
        "[9]<stderr>:Traceback (most recent call last):\n",
        '[9]<stderr>:  File "train.py", line 3, in <module>\n',
        "[9]<stderr>:ValueError: bad shard\n",
        "[9]<stderr>:tntrun: disk error: /runs/x: no space left (0 B free)\n",
        "[4]<stderr>:horovod.common.exceptions.HorovodInternalError: Horovod has been shut down.\n",
        "31: Segmentation fault (core dumped)\n",
        "Process 9 exit with status code 1.\n",
    ]
    for line in lines:
        relay.line(line)
    assert out.getvalue().splitlines() == [
        "[0]<stdout>:epoch 1: loss 0.3",
        "[1,0]<stdout>:open mpi's label",
        "[9]<stderr>:ValueError: bad shard",
        "[9]<stderr>:tntrun: disk error: /runs/x: no space left (0 B free)",
        "31: Segmentation fault (core dumped)",
        "Process 9 exit with status code 1.",
    ]
    every = io.StringIO()
    small = ConsoleRelay(every)
    for line in lines:
        small.line(line)
    assert every.getvalue() == "".join(lines), "a small run's console shows every line"
