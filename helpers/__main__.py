"""``python -m helpers``: signals are taken in hand first, before anything heavy is imported, so a
Ctrl-C, SIGTERM or SIGHUP at any moment ends in one line (see helpers.interrupts and helpers.cli.main)."""

from .errors import Interrupted
from .interrupts import ignore, install, stopped
from .leave import leave

install()  # kept to the very end: the process exits right after
try:
    from .cli import main

    status = main()
except Interrupted as exc:  # while the command line itself was still being imported
    status = stopped(exc)
ignore()  # done: a signal from here on (Python's own shutdown) changes neither the outcome nor the status
leave(status)
