"""Errors the course's tools raise on purpose, each with a message a learner can act on."""

from __future__ import annotations


class TraceError(Exception):
    """A trace could not be read or used.

    The message is one line: which file, what is wrong with it, and what to do next. It is made one
    line here, whatever it quotes (a file name with a newline, a DataFrame's repr, a megabyte of text a
    user passed): line breaks become spaces and an over-long message keeps its start and its advice.
    """

    def __init__(self, *args: object) -> None:
        if args and isinstance(args[0], str):
            args = (one_line(args[0]), *args[1:])
        super().__init__(*args)


#: The longest message an error shows: a quoted value past this is cut in its middle.
MESSAGE_LIMIT = 800


def one_line(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` on one line (runs of white space, line breaks included, become one space), at most about
    ``limit`` characters: a long middle (a quoted value) gives way to "..." so the advice at the end stays."""
    if "\n" in text or "\r" in text:
        text = " ".join(text.split())
    if len(text) > limit:
        head = limit * 2 // 5
        text = text[:head] + " ... " + text[len(text) - (limit - head):]
    return text


class NoGPUError(RuntimeError):
    """Something that needs a CUDA GPU was asked for on a machine without one."""


class CheckFailed(AssertionError):
    """A self-check did not pass; the message says what to look at and what to change.

    An AssertionError, so nbval fails the cell. It lives here, not in :mod:`helpers.checks`, so the
    course layer can show it in one line without importing the checks (which import the course)."""


class CheckArgumentError(CheckFailed, TraceError):
    """A check was given an argument of the wrong kind (``check_gemm_reading(pd.NA, trace)``, a list where the
    answers' dict goes): a CheckFailed, as every check's verdict is (nbval fails the cell, the lab shows one line),
    and a TraceError, as every error a user can cause through the API is."""


class Interrupted(KeyboardInterrupt):
    """The command was stopped by a signal (Ctrl-C, SIGTERM, SIGHUP) while it ran.

    A KeyboardInterrupt, so code that lets Ctrl-C through lets this through too; raised only while
    :func:`helpers.interrupts.signals_as_exceptions` is active (the command line)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        import signal

        try:
            name = signal.Signals(self.signum).name
        except ValueError:
            name = f"signal {self.signum}"
        return "Ctrl-C (SIGINT)" if name == "SIGINT" else name


class ArgumentError(TraceError, ValueError):
    """An argument a function cannot use: a step or window the trace does not have, a cause that does not
    exist, a count below one. A TraceError (one line, like every error a user can cause) and a ValueError
    (what such an argument is in Python), so code written against either catches it."""
