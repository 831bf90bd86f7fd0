"""Fuzzing the shape, not the bytes: a valid trace whose JSON tree or SQLite tables are rearranged.

A fixed-seed loop (the same cases on every run, so a failure reproduces): each case mutates one
well-formed synthetic trace and must load and diagnose, or be refused with TraceError.
"""

from __future__ import annotations

import copy
import json
import random
import sqlite3

import pytest
from synth import kineto_doc, two_step_loop, write_sqlite

import helpers
from helpers import TraceError

ODD_VALUES = [None, True, -1, 0, 2**63, -(2**63) - 1, 1e308, float("nan"), "", "x", [], {}, [1, 2], {"a": 1}]


def _nodes(value, path=()):
    """Every (path, value) of a JSON tree."""
    yield path, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _nodes(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _nodes(v, (*path, i))


def _mutate_json(doc: dict, rng: random.Random) -> dict:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        nodes = list(_nodes(doc))
        path, value = rng.choice(nodes[1:])
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        op = rng.randrange(6)
        if op == 0:
            parent[path[-1]] = rng.choice(ODD_VALUES)  # another type
        elif op == 1:
            parent[path[-1]] = [value]  # wrapped in a list
        elif op == 2:
            parent[path[-1]] = {"traceEvents": value}  # wrapped in an object
        elif op == 3 and isinstance(parent, dict):
            del parent[path[-1]]  # a key gone
        elif op == 4 and isinstance(parent, list):
            parent.insert(rng.randrange(len(parent) + 1), copy.deepcopy(value))  # duplicated
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(nodes)[1])  # a subtree moved elsewhere
    return doc


def _load_ok_or_trace_error(path) -> None:
    try:
        trace = helpers.load(path)
    except TraceError:
        return
    helpers.diagnose(trace)  # whatever loads must also analyse


def test_json_shape_mutations(tmp_path):
    base = kineto_doc(two_step_loop())
    rng = random.Random(20261204)
    for i in range(40):
        p = tmp_path / f"m{i}.json"
        p.write_text(json.dumps(_mutate_json(base, rng)))
        _load_ok_or_trace_error(p)


def _columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def _mutate_sqlite(con: sqlite3.Connection, rng: random.Random) -> None:
    tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    filled = [t for t in tables if con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]]
    table = rng.choice(filled or tables)
    cols = _columns(con, table)
    col = rng.choice(cols)
    op = rng.randrange(6)
    if op == 0:
        con.execute(f'UPDATE "{table}" SET "{col}" = ?', (rng.choice([None, "text", b"\xff\xfe", 2**63 - 1, -(2**63), 9.3e18, 1e300, -1.5]),))
    elif op == 1:
        con.execute(f'ALTER TABLE "{table}" DROP COLUMN "{col}"') if len(cols) > 1 else None
    elif op == 2:
        con.execute(f'DROP TABLE "{table}"')
    elif op == 3:
        con.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}"')  # every row twice
    elif op == 4:
        con.execute(f'ALTER TABLE "{table}" RENAME TO "{table}_old"')
    else:
        con.execute(f'UPDATE "{table}" SET "{col}" = NULL WHERE rowid % 2 = 0')


@pytest.mark.parametrize("seed", [0])
def test_sqlite_table_mutations(tmp_path, seed):
    events = two_step_loop()
    rng = random.Random(seed)
    for i in range(6):
        db = write_sqlite(events, tmp_path / f"m{seed}_{i}.sqlite")
        con = sqlite3.connect(db)
        try:
            for _ in range(rng.randint(1, 3)):
                try:
                    _mutate_sqlite(con, rng)
                except sqlite3.DatabaseError:  # a constraint or index forbids that mutation: skipped
                    pass
            con.commit()
        finally:
            con.close()
        _load_ok_or_trace_error(db)
