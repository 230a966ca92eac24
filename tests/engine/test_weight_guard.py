"""The weight-sync guard on two real Horovod ranks."""

from __future__ import annotations

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import run_on_two_ranks
from tests.helpers.paths import RANK_SCRIPTS

pytestmark = pytest.mark.slow
SCRIPT = RANK_SCRIPTS / "weight_guard.py"


def test_guard_passes_in_sync_ranks_and_stops_drifted_ones():
    result = run_on_two_ranks(SCRIPT)
    out = result.stdout
    assert_succeeded(result)
    for rank in (0, 1):
        assert f"rank {rank}: in-sync check passed, spread 0.0" in out
        assert f"rank {rank}: guard fired: ranks' weights diverged after epoch 2" in out
    assert "every update must go through the data-parallel optimizer" in out
