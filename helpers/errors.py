"""Errors the course's tools raise on purpose, each with a message a learner can act on."""

from __future__ import annotations


class TraceError(Exception):
    """A trace could not be read or used.

    The message is one line: which file, what is wrong with it, and what to do next.
    """


class NoGPUError(RuntimeError):
    """Something that needs a CUDA GPU was asked for on a machine without one."""


class CheckFailed(AssertionError):
    """A self-check did not pass; the message says what to look at and what to change.

    An AssertionError, so nbval fails the cell. It lives here, not in :mod:`helpers.checks`, so the
    course layer can show it in one line without importing the checks (which import the course)."""


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
