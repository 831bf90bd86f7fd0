"""Synthetic traces for the tests: one event list written as Kineto JSON and as an nsys SQLite export.

Times in the spec are integer nanoseconds, so both formats carry exactly the same values.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

SCHEMA = Path(__file__).parent / "fixtures" / "nsys-sqlite-schema.sql"
PID, TID, BWD_TID = 4242, 4242, 4300
DIRECTION = {"H2D": ("HtoD", 1), "D2H": ("DtoH", 2), "D2D": ("DtoD", 8)}
MEM = {"pageable": ("Pageable", 0), "pinned": ("Pinned", 1), "device": ("Device", 2)}


@dataclass
class Ev:
    kind: str  # kernel, memcpy, memset, runtime, annotation, cpu_op and python (JSON only)
    name: str
    start_ns: int
    end_ns: int
    correlation: int = -1
    device: int = 0
    stream: int = 7
    tid: int = TID
    bytes: int = 0
    copy: str = ""  # H2D / D2H / D2D
    host_mem: str = ""  # pageable / pinned
    pid: int = PID  # the process (SQLite only: globalTid / globalPid); kinds "osrt" and "mark" are SQLite only


def kineto_doc(events: list[Ev], rank: int | None = None, world: int = 1) -> dict:
    out = []
    for e in events:
        ts, dur = e.start_ns / 1000.0, (e.end_ns - e.start_ns) / 1000.0
        if e.kind == "kernel":
            out.append({"ph": "X", "cat": "kernel", "name": e.name, "pid": e.device, "tid": e.stream, "ts": ts, "dur": dur,
                        "args": {"device": e.device, "stream": e.stream, "correlation": e.correlation}})
        elif e.kind == "memcpy":
            d, _ = DIRECTION[e.copy]
            src = MEM[e.host_mem][0] if e.copy == "H2D" else "Device"
            dst = MEM[e.host_mem][0] if e.copy == "D2H" else "Device"
            out.append({"ph": "X", "cat": "gpu_memcpy", "name": f"Memcpy {d} ({src} -> {dst})", "pid": e.device,
                        "tid": e.stream, "ts": ts, "dur": dur,
                        "args": {"device": e.device, "stream": e.stream, "correlation": e.correlation, "bytes": e.bytes}})
        elif e.kind == "memset":
            out.append({"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": e.device, "tid": e.stream,
                        "ts": ts, "dur": dur, "args": {"device": e.device, "stream": e.stream, "correlation": e.correlation,
                                                       "bytes": e.bytes}})
        elif e.kind == "runtime":
            out.append({"ph": "X", "cat": "cuda_runtime", "name": e.name, "pid": PID, "tid": e.tid, "ts": ts, "dur": dur,
                        "args": {"correlation": e.correlation}})
        elif e.kind == "annotation":
            out.append({"ph": "X", "cat": "user_annotation", "name": e.name, "pid": PID, "tid": e.tid, "ts": ts, "dur": dur,
                        "args": {}})
        elif e.kind == "cpu_op":
            out.append({"ph": "X", "cat": "cpu_op", "name": e.name, "pid": PID, "tid": e.tid, "ts": ts, "dur": dur, "args": {}})
        elif e.kind == "python":  # with_stack's frames
            out.append({"ph": "X", "cat": "python_function", "name": e.name, "pid": PID, "tid": e.tid, "ts": ts, "dur": dur,
                        "args": {}})
        else:
            raise ValueError(e.kind)
        if e.correlation >= 0 and e.kind == "runtime":
            out.append({"ph": "s", "id": e.correlation, "pid": PID, "tid": e.tid, "ts": ts, "cat": "ac2g", "name": "ac2g"})
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Synthetic GPU"}], "traceEvents": out}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": world}
    return doc


def write_json(events: list[Ev], path: Path, gz: bool = False, **kw) -> Path:
    data = json.dumps(kineto_doc(events, **kw)).encode()
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


def write_sqlite(events: list[Ev], path: Path) -> Path:
    """An nsys-style export of the same events (cpu_op rows have no nsys equivalent and are left out)."""
    con = sqlite3.connect(path)
    con.executescript(SCHEMA.read_text())
    strings: dict[str, int] = {}

    def sid(s: str) -> int:
        if s not in strings:
            strings[s] = len(strings) + 1
            con.execute("INSERT INTO StringIds(id, value) VALUES (?, ?)", (strings[s], s))
        return strings[s]

    for e in events:
        gtid = lambda tid, pid=e.pid: (pid << 24) | tid  # noqa: E731
        if e.kind == "kernel":
            con.execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL(start, end, deviceId, contextId, streamId, correlationId, globalPid, "
                "demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ, staticSharedMemory, "
                "dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId) VALUES (?,?,?,?,?,?,?,?,?,32,1,1,1,128,1,1,0,0,0,0,1)",
                (e.start_ns, e.end_ns, e.device, 1, e.stream, e.correlation, e.pid << 24, sid(e.name), sid(e.name.split("(")[0])))
        elif e.kind == "memcpy":
            _, kind = DIRECTION[e.copy]
            src = MEM[e.host_mem][1] if e.copy == "H2D" else 2
            dst = MEM[e.host_mem][1] if e.copy == "D2H" else 2
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY(start, end, deviceId, contextId, streamId, correlationId, bytes, "
                        "copyKind, srcKind, dstKind) VALUES (?,?,?,?,?,?,?,?,?,?)",
                        (e.start_ns, e.end_ns, e.device, 1, e.stream, e.correlation, e.bytes, kind, src, dst))
        elif e.kind == "memset":
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET(start, end, deviceId, contextId, streamId, correlationId, value, "
                        "bytes, memKind) VALUES (?,?,?,?,?,?,0,?,2)",
                        (e.start_ns, e.end_ns, e.device, 1, e.stream, e.correlation, e.bytes))
        elif e.kind == "runtime":
            suffix = {"cudaLaunchKernel": "_v7000", "cudaMemcpyAsync": "_v3020", "cudaStreamSynchronize": "_v3020"}.get(e.name, "")
            con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME(start, end, eventClass, globalTid, correlationId, nameId, "
                        "returnValue) VALUES (?,?,1,?,?,?,0)", (e.start_ns, e.end_ns, gtid(e.tid), e.correlation, sid(e.name + suffix)))
        elif e.kind == "annotation":
            con.execute("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (?,?,59,?,?)",
                        (e.start_ns, e.end_ns, e.name, gtid(e.tid)))
        elif e.kind == "startend":  # an NVTX start/end range (not tied to a thread), by registered string
            con.execute("INSERT INTO NVTX_EVENTS(start, end, eventType, textId, globalTid) VALUES (?,?,60,?,?)",
                        (e.start_ns, e.end_ns, sid(e.name), gtid(e.tid)))
        elif e.kind == "mark":
            con.execute("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid) VALUES (?,NULL,34,?,?)",
                        (e.start_ns, e.name, gtid(e.tid)))
        elif e.kind == "osrt":
            con.execute("INSERT INTO OSRT_API(start, end, eventClass, globalTid, nameId, returnValue, callchainId) "
                        "VALUES (?,?,27,?,?,0,0)", (e.start_ns, e.end_ns, gtid(e.tid), sid(e.name)))
    con.execute("INSERT INTO TARGET_INFO_GPU(vmId, id, name) VALUES (0, 0, 'Synthetic GPU')")
    con.commit()
    con.close()
    return path


def two_step_loop() -> list[Ev]:
    """Two 1 ms steps with hand-checkable answers (see test_metrics.py).

    step 0 [0, 1000) us: data range [0, 90); kernels [100,300) and [250,400) overlap;
        sync [350, 410) (cudaStreamSynchronize); kernel [600, 700); host op [700, 950).
    step 1 [1000, 2000) us: H2D pageable copy [1050, 1100) 5 MB; kernel [1100, 1900).
    """
    us = 1000
    return [
        Ev("annotation", "step 0", 0, 1000 * us), Ev("annotation", "step 1", 1000 * us, 2000 * us),
        Ev("annotation", "data", 0, 90 * us),
        Ev("runtime", "cudaLaunchKernel", 95 * us, 99 * us, correlation=1),
        Ev("kernel", "gemm_a", 100 * us, 300 * us, correlation=1),
        Ev("runtime", "cudaLaunchKernel", 240 * us, 245 * us, correlation=2),
        Ev("kernel", "gemm_b", 250 * us, 400 * us, correlation=2, stream=8),
        Ev("runtime", "cudaStreamSynchronize", 350 * us, 410 * us, correlation=3),
        Ev("runtime", "cudaLaunchKernel", 590 * us, 598 * us, correlation=4),
        Ev("kernel", "small_k", 600 * us, 700 * us, correlation=4),
        Ev("cpu_op", "aten::addmm", 700 * us, 950 * us),
        Ev("runtime", "cudaLaunchKernel", 705 * us, 709 * us, correlation=6),
        Ev("runtime", "cudaMemcpyAsync", 1040 * us, 1045 * us, correlation=5),
        Ev("memcpy", "", 1050 * us, 1100 * us, correlation=5, bytes=5_000_000, copy="H2D", host_mem="pageable"),
        Ev("kernel", "long_k", 1100 * us, 1900 * us, correlation=6),
    ]


def host_bound_loop(steps: int = 4, gpu_us: int = 200, host_us: int = 800, sync: bool = False) -> list[Ev]:
    """Steps of one ``gpu_us`` kernel, then ``host_us`` of host work in an NVTX range
    ("metrics") that is neither data loading, launching nor a sync: the GPU idles meanwhile.
    With ``sync`` the step first waits for its kernel (a ``.item()``), as learners' loops often do."""
    us = 1000
    out: list[Ev] = []
    t = 0
    for i in range(steps):
        step_end = t + (10 + gpu_us + host_us + 10) * us
        out.append(Ev("annotation", f"ProfilerStep#{i}", t, step_end))
        out.append(Ev("runtime", "cudaLaunchKernel", t + 2 * us, t + 8 * us, correlation=100 + i))
        out.append(Ev("kernel", "gemm", t + 10 * us, t + (10 + gpu_us) * us, correlation=100 + i))
        h0 = t + (10 + gpu_us) * us
        if sync:
            out.append(Ev("runtime", "cudaStreamSynchronize", t + 9 * us, h0 + 2 * us, correlation=200 + i))
        out.append(Ev("annotation", "metrics", h0 + 5 * us, h0 + (host_us - 5) * us))
        t = step_end
    return out


def idle_capture(seconds: int = 40, kernels: int = 20) -> list[Ev]:
    """A capture without step markers that spans ``seconds`` with a few 100 us kernels in it
    (the public AlexNet benchmark trace looks like this: 0.1 s of GPU work in 43 s)."""
    us = 1000
    gap = seconds * 1_000_000 // kernels
    out: list[Ev] = []
    for i in range(kernels):
        t = i * gap * us
        out.append(Ev("runtime", "cudaLaunchKernel", t, t + 5 * us, correlation=i + 1))
        out.append(Ev("kernel", "conv", t + 10 * us, t + 110 * us, correlation=i + 1))
    return out
