"""Self-checks for the labs: each verifies something from a trace and says what to fix if not.

A check raises :class:`CheckFailed` (an AssertionError, so nbval fails the cell) with a message
naming what to look at and what to change. Results are noted in ``.selfcheck.json`` in the working
folder, which ``python -m helpers selfcheck`` reads; in a ``selfcheck --run`` each is signed
(:mod:`helpers.checks._proof`), and only signed results earn credit. One module per lab. Every check that earns
credit is an exercise, declared in :data:`helpers.checks.exercise.EXERCISES` and judged by one engine
(provenance of its inputs first, then the check's own tests); :data:`CREDIT`, which checks earn each
self-check item, is derived from those records: only checks of the learner's own work (an answer they
gave, code they wrote, a trace they captured), never a check that only reads a trace the course shipped.
"""

from __future__ import annotations

from . import _core, exercise, lab00, lab01, lab02, lab03, lab04, lab05, lab06, lab08, lab09, lab10, lab11, reading  # noqa: E402
from ._core import (  # noqa: F401
    DATA,
    RESULTS_FILE,
    SELF_CHECK,
    CheckFailed,
    _check,
    _close,
    _record,
    data_wait_share,
    learner_trace_problem,
    shipped,
)
from .lab00 import *  # noqa: F403
from .lab01 import *  # noqa: F403
from .lab02 import *  # noqa: F403
from .lab03 import *  # noqa: F403
from .lab04 import *  # noqa: F403
from .lab05 import *  # noqa: F403
from .lab06 import *  # noqa: F403
from .lab08 import *  # noqa: F403
from .lab09 import *  # noqa: F403
from .lab10 import *  # noqa: F403
from .lab11 import *  # noqa: F403
from .published import *  # noqa: F403
from .reading import EVIDENCE, Reading, check_reading, describe_window, pattern_intervals  # noqa: F401

#: Self-check item -> track ("gpu"/"cpu") -> the checks that must all have passed to earn it (from the records).
CREDIT: dict[str, dict[str, tuple[str, ...]]] = exercise.credit()
# every exercise's check runs under the engine, here and in its lab's module
exercise.bind_all(globals(), (lab00, lab01, lab02, lab03, lab04, lab05, lab06, lab08, lab09, lab10, lab11, reading))


# Every check holds its traces, numbers and texts to their type hints: check_longest_gap(pd.NA, trace) or a path where a
# Trace goes is one TraceError line naming the check and the argument (helpers.arguments), not an error from
# inside it. A learner's reading, dict of answers or function is left to the check, which explains its form.
from pandas import DataFrame as _DataFrame  # noqa: E402

from ..arguments import check_namespace as _check_namespace  # noqa: E402
from ..errors import CheckArgumentError as _CheckArgumentError  # noqa: E402
from ..model import Trace as _Trace  # noqa: E402

_check_namespace(globals(), [_name for _name in list(globals()) if _name.startswith("check_")], only=(_Trace, float, int, str, _DataFrame),
                error=_CheckArgumentError)
# ... and every check compares plain values: a str subclass whose __eq__ says yes to every pattern, or an answer of a
# class of the learner's own, is made plain or refused before the check sees it (_core.plain).
for _name in [_n for _n in list(globals()) if _n.startswith("check_") and callable(globals()[_n])]:
    if not getattr(globals()[_name], "__plain__", False):
        globals()[_name] = _core.plain_arguments(globals()[_name])
# The other public functions (the labs' helpers: sync_rows, ncu_long, describe_window, ...) hold every argument to
# its hint: ncu_stalls(True) would otherwise open file descriptor 1 and close it.
_check_namespace(globals())
