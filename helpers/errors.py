"""Errors the course's tools raise on purpose, each with a message a learner can act on."""

from __future__ import annotations


class TraceError(Exception):
    """A trace could not be read or used.

    The message is one line: which file, what is wrong with it, and what to do next.
    """


class NoGPUError(RuntimeError):
    """Something that needs a CUDA GPU was asked for on a machine without one."""
