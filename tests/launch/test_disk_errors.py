"""A full disk under the run directory, in-process: named with its path and free space,
never taken for an outage of the tracking store, and the driver's heartbeat goes on."""

from __future__ import annotations

import errno

from tntrun.contract.disk import DiskError, disk_error_of, size
from tntrun.contract.driver_alive import write_beat
from tntrun.tracking.outage import is_outage

REMOTE = "http://127.0.0.1:9"  # is_outage judges remote stores only


def test_a_disk_error_names_the_path_and_the_free_space_of_its_filesystem(tmp_path):
    where = tmp_path / "checkpoints" / ".epoch-0003.tmp-1" / "state.index"  # not there yet
    found = disk_error_of(OSError(errno.ENOSPC, "No space left on device"), where)
    assert isinstance(found, DiskError) and found.errno == errno.ENOSPC
    assert str(found).startswith(f"No space left on device writing {where} (")
    assert " free of " in str(found) and str(found).endswith(")")
    named = OSError(errno.EDQUOT, "Disk quota exceeded", str(tmp_path / "metrics.jsonl"))
    assert f"writing {tmp_path / 'metrics.jsonl'} " in str(disk_error_of(named, where))
    assert disk_error_of(ValueError("bad value"), where) is None
    assert disk_error_of(OSError(errno.ECONNREFUSED, "refused"), where) is None
    assert [size(0), size(1536), size(3 * 2**30)] == ["0 B", "1.5 KiB", "3.0 GiB"]


def test_a_full_disk_is_no_outage_of_the_tracking_store():
    try:
        raise RuntimeError("the run's record") from OSError(errno.ENOSPC, "No space left")
    except RuntimeError as wrapped:
        assert not is_outage(wrapped, REMOTE)
    assert is_outage(ConnectionRefusedError(errno.ECONNREFUSED, "refused"), REMOTE)


def test_the_heartbeat_is_rewritten_in_place_when_no_new_file_can_be_written(tmp_path):
    path = tmp_path / "driver.alive"
    write_beat(path, "host 1", 1)
    path.with_suffix(".tmp").mkdir()  # the beat written aside fails, as on a full disk
    write_beat(path, "host 1", 12)
    assert path.read_text() == "host 1 12\n"
    write_beat(path, "host 1", 3)
    assert path.read_text() == "host 1 3\n"


class FullDisk:
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def test_the_run_log_stops_quietly_on_a_full_disk(tmp_path, capsys):
    import logging

    from tntrun.console import RunLogFile

    handler = RunLogFile(str(tmp_path / "cli.log"))
    handler.stream.close()
    handler.stream = FullDisk()
    record = logging.LogRecord("tntrun.driver", logging.INFO, __file__, 1, "a line", (), None)
    handler.handle(record)
    handler.handle(record)
    assert capsys.readouterr().err == "", "no 'Logging error' traceback per line"
    assert handler.level > logging.CRITICAL
