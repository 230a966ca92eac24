"""The battery's working directory and how a command line is run and judged in-process
(tests/config/test_battery.py): the files its rows name, the real CLI entry with its output
captured, the runs tracked and the run directories left."""

from __future__ import annotations

import io
import logging
import sqlite3
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from hydra.core.global_hydra import GlobalHydra

from tests.helpers.user_data import forget_modules_from
from tntrun import cli

USER_FILES = {
    "my_callbacks_b.py": """
        import keras
        from keras.callbacks import EarlyStopping


        class Counter(keras.callbacks.Callback):
            def __init__(self, every=1):
                super().__init__()
                self.every = every


        class SubCounter(Counter):
            pass


        class Patient(EarlyStopping):
            pass


        class Needs(keras.callbacks.Callback):
            def __init__(self, path, every=1):
                super().__init__()


        class Plain:
            pass


        def every_epoch(epoch, logs):
            return None
    """,
    "my_models_b.py": """
        import keras


        def returns_none(input_shape, num_classes):
            keras.Sequential([keras.Input(shape=input_shape), keras.layers.Dense(num_classes)])


        def returns_text(input_shape, num_classes):
            return "a model"


        def deep(input_shape, num_classes, depth):
            return keras.Sequential([keras.Input(shape=input_shape)])


        def no_sizes(width=3):
            return None
    """,
    "legacy_models_b.py": """
        import tf_keras


        def build(input_shape, num_classes):
            return tf_keras.Sequential()
    """,
    "my_data_b.py": """
        class Other:
            pass
    """,
    "bad_hostfile": "alpha slots=2\nbeta gamma\n",
    "empty_nodes": "",
    "two_slots": "node1\nnode1\n",
    "not_npz.npz": "1,2,3\n",
}


def npz(path: Path, x_train, y_train) -> None:
    x = np.asarray(x_train, np.float32)
    y = np.asarray(y_train)
    np.savez(path, x_train=x, y_train=y, x_val=np.zeros((2, *x.shape[1:])), y_val=[0, 1])


def write_user_files(in_tmp: Path) -> Path:
    """Write the files the battery's rows name into ``in_tmp`` (the test's working
    directory) and return it; ``blocked`` is a file where a store's folder would be."""
    for name, text in USER_FILES.items():
        (in_tmp / name).write_text(textwrap.dedent(text).lstrip())
    (in_tmp / "blocked").write_text("a file, not a folder")
    checkpoint = in_tmp / "truncated_run" / "checkpoints" / "epoch-0001"
    checkpoint.mkdir(parents=True)
    (checkpoint / "meta.json").write_text('{"epoch": 1, "st')
    (in_tmp / "truncated_run" / "run_id").write_text("0123456789abcdef\n")
    (in_tmp / "truncated_run" / "config.yaml").write_text("seed: 1\n")
    npz(in_tmp / "nan_labels.npz", [[0.0], [1.0], [2.0]], [0.0, 1.0, np.nan])
    npz(in_tmp / "negative_labels.npz", [[0.0], [1.0], [2.0]], [0, -1, 1])
    npz(in_tmp / "empty_train.npz", np.zeros((0, 2)), np.zeros(0, np.int64))
    npz(in_tmp / "nan_features.npz", [[0.0], [np.nan], [2.0]], [0, 1, 1])
    return in_tmp


@contextmanager
def foreign_streams_shielded() -> Iterator[None]:
    """Hydra's job logging (``logging.config.dictConfig``) closes every handler alive in the
    process, and absl's (imported with TensorFlow by other test modules) closes its stream
    unless it is the current ``sys.stderr``: that stream is the capture pytest gave when the
    handler was made, and closing it would end this session's output. While the CLI runs,
    such handlers get a throwaway stream."""
    handlers = [ref() for ref in logging._handlerList]  # noqa: SLF001  # every live handler
    current = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)
    foreign = [
        (h, h.stream)
        for h in handlers
        if isinstance(h, logging.StreamHandler)
        and not isinstance(h, logging.FileHandler)
        and h.stream not in current
    ]
    for handler, _ in foreign:
        handler.stream = io.StringIO()
    try:
        yield
    finally:
        for handler, stream in foreign:
            handler.stream = stream


@contextmanager
def logging_kept() -> Iterator[None]:
    """Every logger's handlers, level and flags as they were, and Hydra's global state
    cleared, after the CLI ran in this process: Hydra's job logging replaces the root
    logger's handlers with tntrun's console and ``cli.log``, which must not outlive the
    test (their streams are its captures)."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    kept = [
        (lg, lg.handlers[:], lg.level, lg.propagate, lg.disabled)
        for lg in loggers
        if isinstance(lg, logging.Logger)
    ]
    try:
        yield
    finally:
        for logger, handlers, level, propagate, disabled in kept:
            for handler in logger.handlers:
                if handler not in handlers:
                    handler.close()
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled
        GlobalHydra.instance().clear()


def refused(args: tuple[str, ...], workdir: Path, capfd, monkeypatch) -> tuple[int, list[str]]:
    """(exit code, output lines) of ``tntrun <args>`` through the real entry, in-process."""
    argv = ["tntrun", *args, f"output_root={workdir / 'outputs'}"]
    monkeypatch.setattr(sys, "argv", argv)
    capfd.readouterr()
    try:
        with logging_kept(), foreign_streams_shielded():
            cli.main()
        code = 0
    except SystemExit as ended:
        code = ended.code
    out, err = capfd.readouterr()
    forget_modules_from(workdir)  # the user modules this run imported
    return code, [line for line in (out + err).splitlines() if line.strip()]


def tracked_runs(outputs: Path) -> int:
    store = outputs / "mlflow.db"
    if not store.exists():
        return 0
    with sqlite3.connect(store) as db:
        tables = {row[0] for row in db.execute("select name from sqlite_master")}
        return db.execute("select count(*) from runs").fetchone()[0] if "runs" in tables else 0


def left_behind(outputs: Path) -> list[Path]:
    """Run directories (anything under outputs/runs)."""
    return sorted((outputs / "runs").rglob("*")) if (outputs / "runs").exists() else []
