"""Answers kept as salted digests and sealed texts, so the installed package holds no readable key.

A check compares :func:`digest` of the learner's normalised answer with the stored digest; a text
that would give an answer away (what a trace's look-alike was, the hint for a second problem) is
stored sealed with a key made from the right answer, and :func:`unseal` opens it only for that
answer. The answer spaces are small (eight patterns), so this keeps answers out of plain sight and
out of any function that hands them out; it is not a lock against someone who tries every answer.
"""

from __future__ import annotations

import base64
import hashlib

#: Mixed into every digest and key, so a digest is not a plain hash of a pattern's name.
SALT = "gpu-timeline-labs:answers:v1"
_TAG = 8  # bytes of a sealed text's check value


def digest(*parts: str) -> str:
    """The salted digest of an answer's parts (e.g. trace id, role, pattern), 20 hex digits."""
    return hashlib.sha256("\x1f".join((SALT, *parts)).encode()).hexdigest()[:20]


def _stream(key: str, n: int) -> bytes:
    out = bytearray()
    block = 0
    while len(out) < n:
        out += hashlib.sha256(f"{SALT}\x1fstream\x1f{key}\x1f{block}".encode()).digest()
        block += 1
    return bytes(out[:n])


def seal(text: str, *key: str) -> str:
    """``text`` sealed with the key ``key``: only :func:`unseal` with the same key reads it."""
    k = "\x1f".join(key)
    data = text.encode()
    tag = hashlib.sha256(f"{SALT}\x1ftag\x1f{k}".encode() + data).digest()[:_TAG]
    body = bytes(a ^ b for a, b in zip(data, _stream(k, len(data))))
    return base64.b64encode(tag + body).decode()


def unseal(blob: str, *key: str) -> str | None:
    """The text sealed in ``blob`` when ``key`` is the key it was sealed with, else None."""
    k = "\x1f".join(key)
    try:
        raw = base64.b64decode(blob, validate=True)
    except ValueError:  # not base64 (binascii.Error): nothing was sealed in it
        return None
    tag, body = raw[:_TAG], raw[_TAG:]
    data = bytes(a ^ b for a, b in zip(body, _stream(k, len(body))))
    if hashlib.sha256(f"{SALT}\x1ftag\x1f{k}".encode() + data).digest()[:_TAG] != tag:
        return None
    return data.decode()
