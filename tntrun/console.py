"""What the driver says: Python logging, shown on the console as plain lines.

Every driver-side module logs to its own ``logging.getLogger(__name__)`` (the
``tntrun`` tree): INFO for the run's story, WARNING for notes and errors, DEBUG for
what ``hydra.verbose=tntrun`` should show. Under the ``tntrun`` command Hydra's job
logging (``conf/config.yaml``) sends each record to Hydra's job log
(``<run dir>/cli.log``, with times) and to :class:`ConsoleHandler`; a process of the
user's own (the Python API) gets that handler from :func:`ensure_console` unless it set
up logging itself.
"""

from __future__ import annotations

import logging
import sys

ROOT = "tntrun"
ERASE = "\r\x1b[K"  # to the line's start, cleared to its end: a live progress line goes


class ConsoleFormatter(logging.Formatter):
    """tntrun's lines as they are written (``tntrun: ...``); other libraries' records that
    reach the console keep their logger's name and level."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.name == ROOT or record.name.startswith(f"{ROOT}."):
            return message
        return f"[{record.name}][{record.levelname}] - {message}"


class ConsoleHandler(logging.StreamHandler):
    """INFO and below to stdout, WARNING and above to stderr, as tntrun's ``print`` calls
    did; the stream is looked up per record, so a redirected ``sys.stdout`` is followed."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(ConsoleFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr if record.levelno >= logging.WARNING else sys.stdout)
        if sys.stdout.isatty():  # a live progress line may be shown (launch.console_relay)
            sys.stdout.write(ERASE)
        super().emit(record)


class RunLogFile(logging.FileHandler):
    """Hydra's job log in the run directory; on a full disk it stops, quietly: the console
    has every line, and the run names the disk itself (``failure.disk``), where logging's
    own error report would print a traceback for each line."""

    def handleError(self, record: logging.LogRecord) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            self.setLevel(logging.CRITICAL + 1)  # nothing more to this file
            return
        super().handleError(record)


def ensure_console() -> None:
    """Show tntrun's INFO lines in a process whose logging nobody configured (the Python
    API, a subcommand); a configured process (Hydra, the user's own set-up) is left as is."""
    logger = logging.getLogger(ROOT)
    if logging.getLogger().handlers or logger.handlers:
        return
    logger.addHandler(ConsoleHandler())
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.INFO)
