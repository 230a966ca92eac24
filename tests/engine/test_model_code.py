"""Which modules go into a logged model's code/ folder, and the tags of the load-back check
(in-process; the real runs: tests/tracking/test_model_loads.py)."""

from __future__ import annotations

import importlib
import json
import sys

from tntrun.contract.run_files import MODEL_LOADS
from tntrun.engine.model_code import user_sources
from tntrun.tracking.run_record import model_load_tags


def test_only_the_working_directorys_modules_are_shipped(tmp_path, monkeypatch):
    (tmp_path / "mylayers.py").write_text("VALUE = 1\n")
    (tmp_path / "myhelpers").mkdir()
    (tmp_path / "myhelpers" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("mylayers", "myhelpers"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        importlib.import_module(name)
    (tmp_path / "entry.py").write_text("")
    monkeypatch.setitem(sys.modules, "__main__", type(sys)("__main__"))
    sys.modules["__main__"].__file__ = str(tmp_path / "entry.py")  # a script run there
    shipped = user_sources(["mylayers", "numpy", "tntrun.models.mlp"], tmp_path.resolve())
    # numpy and tntrun are installed where the model loads, __main__ is no module to import;
    # the imported helper package goes.
    assert shipped == {
        "mylayers": (tmp_path / "mylayers.py").resolve(),
        "myhelpers": (tmp_path / "myhelpers").resolve(),
    }
    assert user_sources(["numpy", "tntrun.models.mlp"], tmp_path.resolve()) == {}


def test_the_check_becomes_the_runs_tags(tmp_path):
    assert model_load_tags(tmp_path) == {}  # no check (tracking.check_model_loads=false)
    (tmp_path / MODEL_LOADS).write_text(json.dumps({"loads": True, "seconds": 0.2}))
    assert model_load_tags(tmp_path) == {"model_loads": "true"}
    error = "Emb: Emb.__init__() got an unexpected keyword argument 'trainable'"
    (tmp_path / MODEL_LOADS).write_text(json.dumps({"loads": False, "error": error}))
    assert model_load_tags(tmp_path) == {"model_loads": "false", "model_load_error": error}
