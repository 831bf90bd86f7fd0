"""``python -m helpers``: signals are taken in hand first, before anything heavy is imported, so a
Ctrl-C, SIGTERM or SIGHUP at any moment ends in one line (see helpers.interrupts and helpers.cli.main)."""

import gc

from .errors import Interrupted
from .interrupts import ignore, install, stopped
from .leave import leave

install()  # kept to the very end: the process exits right after
try:
    # Importing pandas and numpy makes ~150 garbage collections (40-50 ms) that free next to nothing, and every
    # later collection (the reading processes' too, forked from this one) would walk those ~100k objects again:
    # the collector is off while the command line is imported, and what the imports made is then frozen (kept out
    # of every later collection; the ~700 objects of cycles among it live as long as this short process).
    gc.disable()
    try:
        from .cli import main
    finally:
        gc.freeze()
        gc.enable()
    status = main()
except Interrupted as exc:  # while the command line itself was still being imported
    status = stopped(exc)
ignore()  # done: a signal from here on (Python's own shutdown) changes neither the outcome nor the status
leave(status)
