"""Nsight Compute CSV (``ncu --csv --page details ...``) -> one row per profiled kernel launch.

The details page is long-form: one line per (launch, section, metric) with the columns
``"ID", ..., "Kernel Name", ..., "Section Name", "Metric Name", "Metric Unit", "Metric Value"``.
ncu prints ``==PROF==`` lines and the program's own output on the same stream, so only the quoted
lines from the header on are read. Values may carry thousands separators (``"1,234.56"``); durations
come in ``ns``/``us``/``ms`` (``nsecond``/``usecond``/``msecond`` in older releases).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pandas as pd

from ..errors import TraceError
from ..outputs import read_regular

# An ncu details CSV is a few KB a kernel; a CSV of this size would be a profile of ~10,000 kernels, far more than
# the course asks ncu for (-c 1 or a handful): anything bigger is not the file meant.
MAX_CSV_BYTES = 64 << 20
REQUIRED_COLUMNS = ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value")
#: table column -> the ncu metric name it comes from (sections SpeedOfLight and Occupancy of ``--set basic``).
METRICS = {
    "duration_us": "Duration",
    # "Memory Throughput" is the busiest memory unit's share of its peak (L1/TEX, L2 or DRAM), not DRAM
    # bandwidth: the course's fp32 GEMM reads 67% there with L1/TEX at 70% and DRAM at 2.7%.
    "memory_throughput_pct": "Memory Throughput",
    "dram_throughput_pct": "DRAM Throughput",
    "l1_throughput_pct": "L1/TEX Cache Throughput",
    "l2_throughput_pct": "L2 Cache Throughput",
    "compute_throughput_pct": "Compute (SM) Throughput",
    "achieved_occupancy_pct": "Achieved Occupancy",
    "theoretical_occupancy_pct": "Theoretical Occupancy",
}
_TIME_UNIT_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
                    "s": 1e6, "second": 1e6}
COLUMNS = ("id", "kernel", *METRICS)


def read_ncu(path: str | os.PathLike) -> pd.DataFrame:
    """Read an ncu details CSV into a table: ``id, kernel, duration_us`` and the throughput/occupancy
    percentages in :data:`METRICS` (NaN where the chosen sections did not collect a metric).

    Raises :class:`TraceError` with a one-line explanation for anything that is not such a CSV.
    """
    p = Path(path)
    try:
        text = read_regular(p, MAX_CSV_BYTES, "ncu CSV").decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise TraceError(f"{p}: no such file; run ncu with --csv --page details and save its output there") from None
    except OSError as exc:
        raise TraceError(f"{p}: cannot be opened ({exc.strerror}); check its permissions") from None
    return parse_ncu_csv(text, str(p))


def parse_ncu_csv(text: str, source: str = "ncu output") -> pd.DataFrame:
    lines = text.splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if header_at is None:
        hint = " (ncu profiled no kernel: check the -k regex and that the program launches it)" \
            if "No kernels were profiled" in text else ""
        raise TraceError(f"{source}: no ncu CSV header (\"ID\",...) found{hint}; "
                         "profile with: ncu --csv --page details --set basic -k regex:NAME -c 1 python ...")
    rows = [line for line in lines[header_at:] if line.startswith('"')]
    records = list(csv.reader(io.StringIO("\n".join(rows))))
    header, body = records[0], records[1:]
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise TraceError(f"{source}: the CSV lacks the columns {missing}; it is not ncu's --page details output "
                         "(the raw page has one column per metric): rerun with --page details")
    if not body:
        raise TraceError(f"{source}: the ncu CSV has a header but no metrics; ncu profiled no kernel: check the -k regex")
    col = {name: header.index(name) for name in REQUIRED_COLUMNS}
    table: dict[str, dict[str, object]] = {}
    wanted = {v: k for k, v in METRICS.items()}
    for rec in body:
        if len(rec) <= max(col.values()):  # trailing empty Rule columns may be left off; metric columns may not
            raise TraceError(f"{source}: a line has {len(rec)} fields, the header {len(header)}; the CSV was cut short")
        launch = rec[col["ID"]]
        row = table.setdefault(launch, {"id": _int(launch), "kernel": rec[col["Kernel Name"]]})
        key = wanted.get(rec[col["Metric Name"]])
        if key is None:
            continue
        value = _number(rec[col["Metric Value"]])
        unit = rec[col["Metric Unit"]].strip()
        if key.endswith("_pct") and unit != "%":
            continue  # e.g. MemoryWorkloadAnalysis's "Memory Throughput" in Gbyte/second (--set full)
        if key == "duration_us":
            if unit not in _TIME_UNIT_TO_US:
                raise TraceError(f"{source}: unknown duration unit {unit!r} for launch {launch}; expected ns, us or ms")
            value *= _TIME_UNIT_TO_US[unit]
        row[key] = value
    out = pd.DataFrame(list(table.values()), columns=list(COLUMNS))
    if out["duration_us"].isna().all():
        raise TraceError(f"{source}: no kernel Duration in the CSV; collect the SpeedOfLight section "
                         "(--set basic, or --section SpeedOfLight)")
    return out.astype({c: "float64" for c in METRICS}).reset_index(drop=True)


def _number(value: str) -> float:
    try:
        return float(value.replace(",", ""))
    except ValueError:
        return float("nan")  # ncu writes "n/a" for metrics a kernel does not have


def _int(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return -1


__all__ = ["COLUMNS", "METRICS", "parse_ncu_csv", "read_ncu"]
