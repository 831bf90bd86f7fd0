"""The public API's arguments, checked against the type hints the functions already carry.

Every function a user calls (``helpers.diagnose``, ``metrics.*``, ``plots.*``, ``export``, ...) says in its
signature what it takes: ``trace: Trace``, ``window_ms: tuple[float, float] | None``, ``path: str |
os.PathLike``. :func:`checked` reads those hints once and holds every call to them, so ``diagnose(pd.NA)``,
``diagnose(np.float64(1))``, ``explore(None)``, a ``pd.NA`` window or ``export(t, pd.NA)`` end in one
:class:`~helpers.errors.TraceError` line naming the function, the argument and what it takes, instead of
an AttributeError from deep inside. One mechanism for all of them: a new function with hints is covered
by decorating it; a hint this module does not know is not checked (never refused).

Numbers must be finite (NaN, infinity, ``pd.NA`` and ``pd.NaT`` are not numbers a figure can use);
``bool`` is not taken for a number; a NumPy scalar is taken for the Python number it holds.
"""

from __future__ import annotations

import collections.abc
import functools
import itertools
import math
import numbers
import os
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .errors import TraceError

Check = Callable[[Any], Any]  # returns the value to pass on, or raises _Refused(what it takes)


class _Refused(Exception):
    def __init__(self, wants: str) -> None:
        super().__init__(wants)
        self.wants = wants


def describe(value: object, limit: int = 48) -> str:
    """A short ``repr`` and type, as a message names a value it refuses."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a repr that raises is still a value to name
        text = f"<{type(value).__name__}>"
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[:limit] + "..."
    kind = type(value).__name__
    return text if kind in ("str", "int", "float", "bool", "NoneType") or text.startswith(kind) else f"{text} ({kind})"


#: NumPy types registered as numbers that hold no plain number: a bool, and times (np.timedelta64 is an integer
#: type to NumPy; its NaT is the smallest int64 to int()).
_NOT_NUMBERS = ("bool_", "timedelta64", "datetime64")
#: Items an iterator (or a lazy sequence such as range) may give where a list goes: a generator is taken, an endless
#: one (itertools.count()) or range(10**18) is refused instead of filling memory.
MAX_ITEMS = 1_000_000


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool,)) and type(value).__name__ not in _NOT_NUMBERS


def _int(value: Any) -> int:
    if isinstance(value, numbers.Integral) and _is_real(value):
        try:
            return int(value)
        except (TypeError, ValueError, OverflowError):
            raise _Refused("a whole number") from None
    raise _Refused("a whole number")


def _float(value: Any) -> float:
    # passed on as the Python number it holds: an np.int8 or np.uint64 would wrap around in the function's
    # arithmetic (np.int8(100) - np.int8(-100) is -56), a Fraction or np.float16 would not format as a float
    if _is_real(value):
        try:
            out = int(value) if isinstance(value, numbers.Integral) else float(value)
        except (TypeError, ValueError, OverflowError):
            raise _Refused("a finite number") from None
        if math.isfinite(out):
            return out
    raise _Refused("a finite number")


def _bool(value: Any) -> bool:
    if isinstance(value, bool) or type(value).__name__ == "bool_":
        return bool(value)
    raise _Refused("True or False")


def _str(value: Any) -> str:
    if isinstance(value, str):
        return value
    raise _Refused("text (a str)")


def _path(value: Any) -> Any:
    if isinstance(value, (str, bytes, os.PathLike)):
        try:
            text = str.__str__(os.fsdecode(value))  # a str subclass (np.str_) as the plain text it holds
        except (TypeError, ValueError):
            raise _Refused("a file path (str or pathlib.Path)") from None
        if "\0" in text:
            raise _Refused("a file path (str or pathlib.Path) without a NUL character")
        if not text:  # '' is the current folder to pathlib: never the file a user meant
            raise _Refused("a file path (str or pathlib.Path), not empty text")
        # passed on as the text it names: pathlib.Path takes no bytes (nor a PathLike that gives bytes), and a
        # PureWindowsPath made into a Path here names another file ('C:\\/x' for 'C:\\x'); a str or Path as given
        return value if type(value) in (str, type(Path())) else text
    raise _Refused("a file path (str or pathlib.Path)")


def _array(value: Any) -> Any:
    import numpy as np
    import pandas as pd

    if isinstance(value, (np.ndarray, list, tuple, pd.Series, pd.Index)):
        if isinstance(value, np.ndarray) and value.dtype.kind in "fiub":
            return value
        try:
            return np.asarray(value, dtype="float64")
        except (TypeError, ValueError):
            raise _Refused("an array of numbers (numpy.ndarray)") from None
    raise _Refused("an array of numbers (numpy.ndarray)")


def _trace(value: Any) -> Any:
    """A Trace whose fields the analysis can read (:func:`helpers.model.check_state`: a user may assign any of
    them), checked once per state of the trace: the metric store is emptied whenever its events or metadata change."""
    from .metrics._store import _memo
    from .model import Trace, check_state

    if not isinstance(value, Trace):
        raise _Refused("a Trace (from helpers.load('trace.json'))")
    if not isinstance(value.__dict__.get("_memo"), dict) or not isinstance(value.__dict__.get("metadata"), dict):
        check_state(value)  # repairs the store, or says what is wrong with the metadata, before the store reads it
    memo = _memo(value)
    if "__state_checked__" not in memo:
        check_state(value)
        memo["__state_checked__"] = True
    return value


def _instance(cls: type, words: str) -> Check:
    def check(value: Any) -> Any:
        if isinstance(value, cls):
            return value
        raise _Refused(words)
    return check


def _optional(inner: Check) -> Check:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)
    return check


def _either(checks: list[Check]) -> Check:
    def check(value: Any) -> Any:
        if isinstance(value, collections.abc.Iterator):  # drawn once: each alternative sees every item
            value = _draw(value, MAX_ITEMS + 1)
            if len(value) > MAX_ITEMS:
                raise _Refused(f"a list of at most {MAX_ITEMS:,} items")
        wants = []
        for c in checks:
            try:
                return c(value)
            except _Refused as exc:
                wants.append(exc.wants)
        raise _Refused(" or ".join(dict.fromkeys(wants)))
    return check


def _draw(value: Any, at_most: int) -> list:
    """The items of ``value``: all of a collection already in memory; of an iterator or a lazy sequence (range),
    at most ``at_most``."""
    if isinstance(value, collections.abc.Collection) and not isinstance(value, range):
        return list(value)
    return list(itertools.islice(value, at_most))


def _items(inner: Check, words: str, container: Callable | None = list, length: int | None = None) -> Check:
    """Each item held to ``inner``; the items come back in ``container`` (None: the value as it was given)."""
    def check(value: Any) -> Any:
        if isinstance(value, (str, bytes, collections.abc.Mapping)) or not isinstance(value, collections.abc.Iterable):
            raise _Refused(words)
        try:
            items = _draw(value, (MAX_ITEMS if length is None else length) + 1)
        except TypeError:  # iterable in name only: a 0-d numpy array
            raise _Refused(words) from None
        if length is None and len(items) > MAX_ITEMS:
            raise _Refused(f"{words} of at most {MAX_ITEMS:,} items")
        if length is not None and len(items) != length:
            raise _Refused(words)
        try:
            checked_items = [inner(v) for v in items]
        except _Refused:
            raise _Refused(words) from None
        if container is None:
            return value if not isinstance(value, collections.abc.Iterator) else items
        return container(checked_items)
    return check


def _mapping(key: Check, val: Check, words: str) -> Check:
    def check(value: Any) -> Any:
        if not isinstance(value, collections.abc.Mapping):
            raise _Refused(words)
        try:
            return {key(k): val(v) for k, v in value.items()}
        except _Refused:
            raise _Refused(words) from None
    return check


def _callable(value: Any) -> Any:
    if callable(value):
        return value
    raise _Refused("a function")


def check_for(hint: Any) -> Check | None:
    """The check of one type hint, or None where the hint says nothing this module checks."""
    from .model import Trace

    if hint is Trace:
        return _trace
    simple = {int: _int, float: _float, bool: _bool, str: _str}
    if hint in simple:
        return simple[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if _is_path_hint(hint):
            return _optional(_path) if type(None) in args else _path
        inner = [check_for(a) for a in args if a is not type(None)]
        if any(c is None for c in inner):
            return None
        one = inner[0] if len(inner) == 1 else _either(inner)
        return _optional(one) if type(None) in args else one
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            inner = check_for(args[0])
            return None if inner is None else _items(inner, f"a sequence of {_words(args[0])}", tuple)
        inner_checks = [check_for(a) for a in args]
        if args and all(c is not None for c in inner_checks) and len(set(args)) == 1:
            return _items(inner_checks[0], f"{len(args)} {_words(args[0], plural=True)} (a tuple)", tuple, len(args))
        return None
    if origin in (list, collections.abc.Sequence, collections.abc.Iterable):
        inner = check_for(args[0]) if args else None
        if inner is None:  # items of any kind: still a list (or tuple, ...), never a scalar or text; passed on as given
            return _items(lambda v: v, "a list", None)
        return _items(inner, f"a list of {_words(args[0], plural=True)}")
    if origin in (dict, collections.abc.Mapping):
        key, val = (check_for(a) for a in args) if len(args) == 2 else (None, None)
        if key is None or val is None:  # values of any kind: still a dict, passed on as given
            return _instance(collections.abc.Mapping, "a dict")
        return _mapping(key, val, f"a dict of {_words(args[0])} -> {_words(args[1])}")
    if origin is collections.abc.Callable or hint is collections.abc.Callable:
        return _callable
    if hint in (list, tuple, collections.abc.Sequence):  # a bare sequence hint: a list and a tuple both do
        return _items(lambda v: v, "a list or tuple", None)
    if isinstance(hint, type):
        if hint.__module__ == "numpy" and hint.__name__ == "ndarray":
            return _array
        if hint is typing.Any or hint is object:
            return None
        return _instance(hint, f"a {hint.__name__}")
    return None


def _words(hint: Any, plural: bool = False) -> str:
    names = {int: "whole number", float: "finite number", str: "str", bool: "bool"}
    word = names.get(hint, getattr(hint, "__name__", str(hint)))
    return word + ("s" if plural else "")


def checked(fn: Callable, only: tuple | None = None, error: type[TraceError] = TraceError) -> Callable:
    """``fn`` with its arguments held to its type hints (see the module's doc); the checks are built on
    the first call, so decorating costs nothing at import. ``only``: hold only the arguments whose hint is
    one of these types (or one of them or None); of the others only the shape is held (a dict where a dict goes, a
    list where a list goes), what they hold is left to ``fn``, which says more about it. ``error``: the TraceError
    (sub)class a refusal raises."""
    import inspect

    plan: list | None = None

    def build() -> list:
        hints = resolved_hints(fn)
        sig = inspect.signature(fn)
        out = []
        for name, param in sig.parameters.items():
            hint = hints.get(name)
            if hint is None:
                continue
            check = check_for(hint) if only is None or _one_of(hint, only) else _shape_of(hint)
            if check is not None and "window" in name and _is_pair(hint):
                check = _ordered(check)
            if check is not None and param.kind in (param.POSITIONAL_OR_KEYWORD, param.KEYWORD_ONLY,
                                                    param.POSITIONAL_ONLY):
                out.append((name, check))
        paths = [name for name, _ in out if _is_path_hint(hints.get(name))]
        return [sig, out, paths]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal plan
        if plan is None:
            plan = build()
        sig, checks, paths = plan
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as exc:  # a missing or unknown argument: Python's own words, one line
            raise error(f"{fn.__name__}(): {exc}") from None
        arguments = bound.arguments
        for name, check in checks:
            if name in arguments:
                try:
                    arguments[name] = check(arguments[name])
                except _Refused as exc:
                    raise error(f"{fn.__name__}(): {name}={describe(arguments[name])}: give {exc.wants}") from None
        if not paths:
            return fn(*bound.args, **bound.kwargs)
        try:
            return fn(*bound.args, **bound.kwargs)
        except OSError as exc:  # the file the user named is missing, a folder or unreadable: their error, one line
            given = {os.fsdecode(arguments[n]) for n in paths if isinstance(arguments.get(n), (str, bytes, os.PathLike))}
            if exc.filename is None or os.fsdecode(exc.filename) not in given:
                raise
            why = exc.strerror or type(exc).__name__
            raise error(f"{fn.__name__}(): {describe(os.fsdecode(exc.filename), 200)}: {why.lower()}; "
                             "check the path") from None

    wrapper.__checked__ = True  # type: ignore[attr-defined]
    return wrapper


def _is_path_hint(hint: Any) -> bool:
    """``str | os.PathLike`` (or ``str | Path``), optionally with None: a file the user names."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return False
    args = set(typing.get_args(hint)) - {type(None)}
    return str in args and any(a is os.PathLike or typing.get_origin(a) is os.PathLike
                               or (isinstance(a, type) and issubclass(a, os.PathLike)) for a in args)


def _is_pair(hint: Any) -> bool:
    """``tuple[float, float]`` (optionally ``| None``): a window's (start, end)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return len(args) == 1 and _is_pair(args[0])
    return typing.get_origin(hint) is tuple and typing.get_args(hint) in ((float, float), (int, int))


def _ordered(inner: Check) -> Check:
    """A window's check: two finite numbers, the start before the end (a reversed window draws and measures nothing)."""
    def check(value: Any) -> Any:
        out = inner(value)
        if out is not None and out[0] > out[1]:
            raise _Refused("(start, end) with the start before the end")
        return out
    return check


def resolved_hints(fn: Callable) -> dict[str, Any]:
    """``fn``'s argument hints, each resolved on its own: one that does not resolve (a return type from a module
    imported only inside the function, ``pd.DataFrame``) leaves that one unchecked, not every argument. ``Trace``
    resolves even where a module imports it only for type checkers (to keep its imports free of cycles)."""
    from .model import Trace

    names = {} if "Trace" in getattr(fn, "__globals__", {}) else {"Trace": Trace}  # the module's own name first
    try:
        return typing.get_type_hints(fn, localns=names)
    except Exception:  # noqa: BLE001 - resolved one by one below
        pass
    out = {}
    for name, hint in getattr(fn, "__annotations__", {}).items():
        if name == "return":
            continue
        try:
            out[name] = typing.get_type_hints(_Holder(fn, name, hint), localns=names)[name]
        except Exception:  # noqa: BLE001 - a hint that does not resolve: that argument goes unchecked
            pass
    return out


class _Holder:
    """One annotation of ``fn``, in ``fn``'s module, as typing.get_type_hints reads it."""

    def __init__(self, fn: Callable, name: str, hint: Any) -> None:
        self.__annotations__ = {name: hint}
        self.__globals__ = getattr(fn, "__globals__", {})
        self.__module__ = getattr(fn, "__module__", None)


def _shape_of(hint: Any) -> Check | None:
    """Only the container a hint names (a dict, a list), whatever it holds: what a check explains itself."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        shape = _shape_of(inner[0]) if len(inner) == 1 else None
        return None if shape is None else (_optional(shape) if type(None) in args else shape)
    if hint in (dict, collections.abc.Mapping) or origin in (dict, collections.abc.Mapping):
        return _instance(collections.abc.Mapping, "a dict")
    if hint is list or origin in (list, collections.abc.Sequence):
        return _items(lambda v: v, "a list", None)
    return None


def _one_of(hint: Any, types_: tuple) -> bool:
    if hint in types_:
        return True
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return bool(args) and all(a in types_ for a in args)
    return False


def check_namespace(namespace: dict, names: typing.Iterable[str] | None = None, only: tuple | None = None,
                    error: type[TraceError] = TraceError) -> None:
    """Replace each public function among ``names`` in ``namespace`` (a module's globals) by its checked
    form (``only``: see :func:`checked`); classes, constants and private names are left as they are.
    ``names`` None: the module's public names (its ``__all__``, else every public function defined in it or in
    its submodules: what a user reaches as ``module.name``), so a function added later is held to its hints
    without a list to edit. A function it only imports for its own use is left as it is (its callers inside may
    pass what a user may not: a NaN noise band, an infinite time-out)."""
    import inspect

    home = namespace.get("__name__", "")
    if names is None:
        names = namespace["__all__"] if "__all__" in namespace else [
            n for n in namespace if inspect.isfunction(namespace[n]) and public_function(namespace[n], home)]
    for name in list(names):
        value = namespace.get(name)
        if name.startswith("_") or not inspect.isfunction(value) or getattr(value, "__checked__", False):
            continue
        if not public_function(value):
            continue
        namespace[name] = checked(value, only, error)


def public_function(value: Any, home: str = "helpers") -> bool:
    """A function of this package a user can call: defined in module ``home`` or under it (not an import from
    elsewhere, not this module's own)."""
    module = getattr(value, "__module__", "") or ""
    return (module == home or module.startswith(home + ".")) and module != __name__


__all__ = ["check_for", "check_namespace", "checked", "describe", "public_function"]
