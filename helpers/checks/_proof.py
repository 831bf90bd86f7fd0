"""Signed check results: self-check credit that only a check, in a ``selfcheck --run``, can write.

``python -m helpers selfcheck labs --run`` starts each notebook's kernel with a fresh random key, in a
file named by :data:`RUN_KEY_ENV`; the kernel's first line, before any cell, is :func:`start_run`, which
reads the file into the kernel's signing state (:data:`SIGNER`, one :class:`Signer`), deletes it and removes
the variable, so the notebook's own code finds neither. Each result an exercise's check records in that
kernel, while the engine judges that exercise (:func:`helpers.checks.exercise.judge`) in that exercise's
own lab notebook, is signed (HMAC-SHA256) over the item, the check, its verdict, the track, the notebook,
and the digests of the trace and of the learner's function the check judged; the parent verifies every
signature with the key it gave that notebook, and that the notebook is the exercise's. A results file
written any other way (by a notebook's own code, by hand, by an earlier run, by a check called from
another lab's notebook) carries no valid signature and earns nothing.

The limit, said plainly: code in the same kernel that deliberately reaches into this module (its key,
its signing function) is not defended against. The report is for self-assessment, not an exam.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field
from typing import Any

#: The variable that names the key file ``selfcheck --run`` wrote for one notebook's kernel.
RUN_KEY_ENV = "HELPERS_SELFCHECK_KEY_FILE"
KEY_LIMIT = 4096  # the key file is a hex key and a notebook's name: tens of bytes


def _take_key() -> tuple[bytes, str] | None:
    """This kernel's run key and notebook name, once: the file is deleted and the variable removed."""
    path = os.environ.pop(RUN_KEY_ENV, None)
    if not path:
        return None
    from ..errors import TraceError
    from ..outputs import read_state_json

    try:
        data = read_state_json(path, KEY_LIMIT, "run key file")  # never blocks on a pipe put in its place
        os.unlink(path)
        return bytes.fromhex(data["key"]), str(data["notebook"])
    except (OSError, ValueError, KeyError, TypeError, TraceError):
        return None  # no usable key: this kernel's results stay unsigned and earn nothing


def _source_digest(fn: Any) -> str:
    from ..sources import getsource

    try:
        text = getsource(fn)  # the file read the safe way (helpers.sources): a pipe there cannot block the check
    except (OSError, TypeError):  # a builtin, a lambda typed at a prompt, a callable object
        code = getattr(fn, "__code__", None)
        text = repr((code.co_code, code.co_consts)) if code is not None else type(fn).__qualname__
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


@dataclass
class Signer:
    """The signing state of one kernel, in one object: the run's key and the notebook it was given for
    (none outside a ``selfcheck --run``), the exercise being judged now (:func:`helpers.checks.exercise.judge`
    opens it), and what that judgement has read (the digests of the learner's traces and functions).

    A result is signed only while an exercise is open and only when it is that exercise's own (its item, its
    check): a notebook's cell that calls the recorder, or a check of one exercise recording another's item,
    signs nothing.
    """

    key: bytes | None = None
    notebook: str | None = None
    open: list = field(default_factory=list)  # the exercises being judged, innermost last
    evidence: dict[str, list[str]] = field(default_factory=lambda: {"trace": [], "source": []})

    def start(self) -> bool:
        """Take this kernel's key (``selfcheck --run`` names its file in :data:`RUN_KEY_ENV`); True if taken."""
        taken = _take_key()
        if taken is not None:
            self.key, self.notebook = taken
        return taken is not None

    @contextlib.contextmanager
    def judging(self, exercise: Any):
        """The exercise ``exercise`` is judged inside the block: its results may be signed."""
        self.open.append(exercise)
        try:
            yield exercise
        finally:
            self.open.remove(exercise)

    @property
    def current(self) -> Any:
        return self.open[-1] if self.open else None

    def note_trace(self, digest: str) -> None:
        """Note the events digest of a trace the current check judges as the learner's."""
        if digest not in self.evidence["trace"]:
            self.evidence["trace"].append(digest)

    def note_source(self, fn: Any) -> None:
        """Note a digest of the source of the learner's function the current check calls."""
        digest = _source_digest(fn)
        if digest not in self.evidence["source"]:
            self.evidence["source"].append(digest)

    def take_evidence(self) -> dict[str, list[str]]:
        """What was noted since the last recorded result, and a clean slate for the next check."""
        taken = {k: list(v) for k, v in self.evidence.items()}
        for v in self.evidence.values():
            v.clear()
        return taken

    def may_sign(self, item: str, check: str) -> bool:
        """Whether a result of ``check`` for ``item`` is the open exercise's own, in its lab's notebook."""
        ex = self.current
        return ex is not None and ex.owns(item, check) and (self.notebook is None or ex.notebook == self.notebook)

    def entry(self, item: str, check: str, passed: bool, track: str, evidence: dict[str, list[str]]) -> dict | None:
        """The signed record of one result when this kernel has a run key and may sign it; None otherwise."""
        if self.key is None or self.notebook is None or not self.may_sign(item, check):
            return None
        entry = {"passed": bool(passed), "track": track, "notebook": self.notebook,
                 "trace": evidence.get("trace", []), "source": evidence.get("source", [])}
        entry["sig"] = sign(self.key, item, check, entry)
        return entry

    def own_checks(self, item: str, result: Any) -> dict[str, bool]:
        """The results of ``item`` this kernel may build on: with a run key, only those it signed itself."""
        if not isinstance(result, dict) or not isinstance(result.get("checks"), dict):
            return {}
        if self.key is None or self.notebook is None:
            return dict(result["checks"])
        signed = result.get("signed") if isinstance(result.get("signed"), dict) else {}
        return {name: entry["passed"] for name, entry in signed.items()
                if verify({self.notebook: self.key}, item, name, entry) is None}


#: This kernel's signing state. It holds no key until :func:`start_run` (``selfcheck --run`` runs it when the
#: kernel starts, before any cell).
SIGNER = Signer()


def start_run() -> bool:
    """Take this kernel's run key into :data:`SIGNER`; the notebook's own code then finds neither file nor variable."""
    return SIGNER.start()


# The recorder's names for the signing state's methods (what the checks and their wrappers call).
def note_trace(digest: str) -> None:
    SIGNER.note_trace(digest)


def note_source(fn: Any) -> None:
    SIGNER.note_source(fn)


def take_evidence() -> dict[str, list[str]]:
    return SIGNER.take_evidence()


def _payload(item: str, check: str, entry: dict) -> bytes:
    signed = {"item": item, "check": check, "passed": entry.get("passed"), "track": entry.get("track"),
              "notebook": entry.get("notebook"), "trace": entry.get("trace"), "source": entry.get("source")}
    return json.dumps(signed, sort_keys=True, separators=(",", ":")).encode()


def sign(key: bytes, item: str, check: str, entry: dict) -> str:
    """The signature of one recorded result under ``key``."""
    return hmac.new(key, _payload(item, check, entry), "sha256").hexdigest()


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
