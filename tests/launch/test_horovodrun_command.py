"""tntrun's horovodrun command asks Horovod's build the question horovodrun asks, natively."""

from __future__ import annotations

import pytest
from horovod.common.util import gloo_built

from tntrun.launch import horovodrun_command

pytestmark = pytest.mark.slow  # each answer comes from a forked child


def test_the_native_answer_is_horovodruns():
    """Horovod's own check imports TensorFlow in a forked child; the shortcut must agree."""
    assert horovodrun_command.gloo_built_natively() is True
    assert bool(gloo_built()) is True


def test_an_extension_that_does_not_load_leaves_the_question_to_horovodrun(monkeypatch, tmp_path):
    monkeypatch.setattr(horovodrun_command, "package_folder", lambda name: tmp_path)
    assert horovodrun_command.ask_the_extension() == horovodrun_command.UNKNOWN
    assert horovodrun_command.gloo_built_natively() is None
