"""Signed check results: self-check credit that only a check, in a ``selfcheck --run``, can write.

``python -m helpers selfcheck labs --run`` starts each notebook's kernel with a fresh random key, in a
file named by :data:`RUN_KEY_ENV`; the kernel imports :mod:`helpers.checks` when it starts, before any
cell runs, and this module takes the key then: it reads the file, deletes it and removes the variable,
so the notebook's own code finds neither. Each result a check records in that kernel is signed
(HMAC-SHA256) over the item, the check, its verdict, the track, the notebook, and the digests of the
trace and of the learner's function the check judged; the parent verifies every signature with the key
it gave that notebook. A results file written any other way (by a notebook's own code, by hand, by an
earlier run) carries no valid signature and earns nothing.

The limit, said plainly: code in the same kernel that deliberately reaches into this module (its key,
its signing function) is not defended against. The report is for self-assessment, not an exam.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

#: The variable that names the key file ``selfcheck --run`` wrote for one notebook's kernel.
RUN_KEY_ENV = "HELPERS_SELFCHECK_KEY_FILE"
KEY_LIMIT = 4096  # the key file is a hex key and a notebook's name: tens of bytes


def _take_key() -> tuple[bytes, str] | None:
    """This kernel's run key and notebook name, once: the file is deleted and the variable removed."""
    path = os.environ.pop(RUN_KEY_ENV, None)
    if not path:
        return None
    try:
        with open(path, "rb") as fh:
            raw = fh.read(KEY_LIMIT)
        os.unlink(path)
        data = json.loads(raw)
        return bytes.fromhex(data["key"]), str(data["notebook"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # no usable key: this kernel's results stay unsigned and earn nothing


_RUN = _take_key()
#: What the current check has judged, noted as it goes and signed with its result.
_EVIDENCE: dict[str, list[str]] = {"trace": [], "source": []}


def note_trace(digest: str) -> None:
    """Note the events digest of a trace the current check judges as the learner's."""
    if digest not in _EVIDENCE["trace"]:
        _EVIDENCE["trace"].append(digest)


def note_source(fn: Any) -> None:
    """Note a digest of the source of the learner's function the current check calls."""
    import inspect

    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):  # a builtin, a lambda typed at a prompt, a callable object
        code = getattr(fn, "__code__", None)
        text = repr((code.co_code, code.co_consts)) if code is not None else type(fn).__qualname__
    digest = hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()
    if digest not in _EVIDENCE["source"]:
        _EVIDENCE["source"].append(digest)


def take_evidence() -> dict[str, list[str]]:
    """What was noted since the last recorded result, and a clean slate for the next check."""
    taken = {k: list(v) for k, v in _EVIDENCE.items()}
    for v in _EVIDENCE.values():
        v.clear()
    return taken


def _payload(item: str, check: str, entry: dict) -> bytes:
    signed = {"item": item, "check": check, "passed": entry.get("passed"), "track": entry.get("track"),
              "notebook": entry.get("notebook"), "trace": entry.get("trace"), "source": entry.get("source")}
    return json.dumps(signed, sort_keys=True, separators=(",", ":")).encode()


def sign(key: bytes, item: str, check: str, entry: dict) -> str:
    """The signature of one recorded result under ``key``."""
    return hmac.new(key, _payload(item, check, entry), "sha256").hexdigest()


def signed_entry(item: str, check: str, passed: bool, track: str, evidence: dict[str, list[str]]) -> dict | None:
    """The signed record of one result when this kernel has a run key; None otherwise."""
    if _RUN is None:
        return None
    key, notebook = _RUN
    entry = {"passed": bool(passed), "track": track, "notebook": notebook,
             "trace": evidence.get("trace", []), "source": evidence.get("source", [])}
    entry["sig"] = sign(key, item, check, entry)
    return entry


NOT_SIGNED = ("not signed by a check in this run: written by other code, by hand, or by a call into the "
              "checks' internals")
WRONG_KEY = "its signature is not this run's: a results file from an earlier run, or edited since"


def verify(keys: dict[str, bytes], item: str, check: str, entry: Any) -> str | None:
    """None when ``entry`` is a result a check signed with the key of the notebook it names; else why not."""
    if not isinstance(entry, dict) or not isinstance(entry.get("sig"), str) or not isinstance(entry.get("passed"), bool):
        return NOT_SIGNED
    key = keys.get(entry.get("notebook")) if isinstance(entry.get("notebook"), str) else None
    if key is None or not hmac.compare_digest(entry["sig"], sign(key, item, check, entry)):
        return WRONG_KEY
    return None


def own_checks(item: str, result: Any) -> dict[str, bool]:
    """The results of ``item`` this kernel may build on: with a run key, only those it signed itself."""
    if not isinstance(result, dict) or not isinstance(result.get("checks"), dict):
        return {}
    if _RUN is None:
        return dict(result["checks"])
    key, notebook = _RUN
    signed = result.get("signed") if isinstance(result.get("signed"), dict) else {}
    return {name: entry["passed"] for name, entry in signed.items() if verify({notebook: key}, item, name, entry) is None}
