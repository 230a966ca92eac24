"""train.sync_batch_norm: off by default, on with a key, refused with XLA before launch."""

from __future__ import annotations

import pytest

from tests.helpers.plans import plan_for
from tntrun.errors import PlanError


def test_sync_batch_norm_is_off_unless_asked(compose_cfg):
    assert plan_for(compose_cfg).settings.train.sync_batch_norm is False
    asked = plan_for(compose_cfg, "train.sync_batch_norm=true")
    assert asked.settings.train.sync_batch_norm is True


def test_sync_batch_norm_with_xla_is_one_line_before_launch(compose_cfg):
    with pytest.raises(PlanError) as refused:
        plan_for(compose_cfg, "train.sync_batch_norm=true", "train.jit_compile=true")
    assert refused.value.problems == [
        "train.sync_batch_norm=true: its allreduce in the forward pass is not an XLA op; "
        "set train.jit_compile=false (or train.sync_batch_norm=false)"
    ]
