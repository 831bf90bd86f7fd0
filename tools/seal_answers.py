"""Write the sealed form of lab 07's answer key into the package.

    python tools/seal_answers.py           # docs/instructors/triage_key.json -> helpers/checks/_triage_key.py
    python tools/seal_answers.py --check   # exit 1 if the sealed file does not match the key

The key (docs/instructors/triage_key.json) is for instructors and lives outside the installed package;
the package gets only salted digests and texts sealed with the right answer (helpers.checks._sealed).
Per trace: ``first``, the digest of the costliest pattern; ``after``, sealed with that pattern, the digests of
the trace's further patterns and the hint for a missed second problem; ``passed``, sealed with all of them,
the look-alike and the lesson a pass shows (the key's `note`, why the answer differs from what the loop was built
to show, is for instructors only); ``lessons``, one entry for every pattern (so none is left out as the
answer), sealed with that pattern: the lesson a reading naming it gets, or nothing.
"""

from __future__ import annotations

import argparse
import json
import pprint
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from helpers.checks._sealed import digest, seal  # noqa: E402
from helpers.diagnosis import PATTERNS  # noqa: E402

KEY = ROOT / "docs" / "instructors" / "triage_key.json"
OUT = ROOT / "helpers" / "checks" / "_triage_key.py"

HEADER = '''"""Lab 07's answer key, sealed: salted digests and texts only the right answer opens (helpers.checks._sealed).

Written by tools/seal_answers.py from the instructors' key; do not edit.
"""

'''


def sealed_key(cases: dict) -> dict:
    out = {}
    for tid, case in cases.items():
        first, *more = case["patterns"]
        lessons = case.get("lessons", {})
        out[tid] = {
            "first": digest(tid, "first", first),
            "after": seal(json.dumps({"more": [digest(tid, "also", p) for p in more], "second": case.get("second", "")}),
                          tid, "first", first),
            "passed": seal(json.dumps({"decoy": case.get("decoy", ""), "note": case.get("lesson", "")}),
                           tid, "all", first, *sorted(more)),
            "lessons": {digest(tid, "misread", p): seal(lessons.get(p, lessons.get("*", "")), tid, "misread", p)
                        for p in PATTERNS},
        }
    return out


def render(cases: dict) -> str:
    return HEADER + "SEALED: dict[str, dict] = " + pprint.pformat(sealed_key(cases), width=120, sort_dicts=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare; exit 1 when the sealed file is stale")
    args = ap.parse_args(argv)
    text = render(json.loads(KEY.read_text())["cases"])
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} does not match {KEY.relative_to(ROOT)}: run python tools/seal_answers.py")
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
