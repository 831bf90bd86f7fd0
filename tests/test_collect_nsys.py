"""tools/collect_nsys.py: a re-recording replaces its files' manifest entries where they stand, adds new ones, and
leaves every other entry (other traces, the other ncu files) as it was."""

from __future__ import annotations

import json
import sys

from conftest import ROOT
from synth import two_step_loop, write_json


def _meta(variant: str, date: str) -> dict:
    name = f"triage__{variant}__h200"
    return {"name": name, "workload": "triage", "variant": variant, "tag": "h200", "device": "NVIDIA H200",
            "torch": "2.11.0+cu130", "python": "3.12.3", "date": date, "run": f"{name}@{date}",
            "command": f"python -m tools.triage_cases --variant {variant} --steps 5 --warmup 10 --profile runs",
            "profiled_steps": 2, "warmup_steps": 10, "file": f"{name}.json.gz"}


def test_a_rerecording_replaces_its_entries_in_place_and_keeps_the_rest(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    import collect_nsys

    data, session = tmp_path / "data", tmp_path / "session"
    data.mkdir()
    session.mkdir()
    old = {**_meta("t2", "2026-12-02"), "format": "torch-json", "file": "triage__t2__h200.json.gz"}
    other = {"file": "zz_first.json.gz", "workload": "zz", "variant": "a", "tag": "zz", "format": "torch-json"}  # sorts last
    ncu = [{"file": "nsight/b.ncu.csv"}, {"file": "nsys/sync_stall__fixed__h200.ncu.csv", "date": "old"}]
    manifest = {"traces": [other, old], "ncu": ncu, "recordings": [other, old], "recorded_elsewhere": {"x": 1}}
    (data / "manifest.json").write_text(json.dumps(manifest))
    for variant in ("t2", "t11"):
        meta = _meta(variant, "2026-12-05")
        write_json(two_step_loop(), session / meta["file"], gz=True)
        (session / f"{meta['name']}.torch.meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr(collect_nsys, "DATA", data)

    assert collect_nsys.main([str(session)]) == 0
    got = json.loads((data / "manifest.json").read_text())
    for section in ("traces", "recordings"):
        files = [e["file"] for e in got[section]]
        assert files == ["zz_first.json.gz", "triage__t2__h200.json.gz", "triage__t11__h200.json.gz"], section
        assert got[section][0] == other
        assert got[section][1]["date"] == "2026-12-05" and got[section][1]["run"] == "triage__t2__h200@2026-12-05"
    assert got["ncu"] == ncu  # no ncu CSV in this session: the list is untouched
    assert got["recorded_elsewhere"] == {"x": 1}
    assert (data / "triage__t2__h200.json.gz").read_bytes() == (session / "triage__t2__h200.json.gz").read_bytes()


def test_an_ncu_csv_is_dated_by_the_recording_made_beside_it(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    import collect_nsys

    csv = tmp_path / "sync_stall__fixed__h200.ncu.csv"
    csv.write_text('"ID","Kernel Name"\n')
    made = collect_nsys._ncu_made(csv)  # alone: the CSV's own date, not a fixed one
    assert len(made["date"]) == 10 and made["date"] != "2026-12-02"
    (tmp_path / "sync_stall__fixed__h200.meta.json").write_text(json.dumps({"device": "NVIDIA H200 NVL",
                                                                          "date": "2027-01-09"}))
    assert collect_nsys._ncu_made(csv) == {"device": "NVIDIA H200 NVL", "date": "2027-01-09"}
