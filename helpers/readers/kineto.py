"""PyTorch-profiler (Kineto) Chrome-trace JSON -> events table.

Facts relied on: ``ts``/``dur`` are microseconds; GPU events carry ``args.device`` and
``args.stream``; ``args.correlation`` links a runtime call to its kernel; memcpy names spell the
memory kinds, e.g. ``Memcpy HtoD (Pageable -> Device)``.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import math
import multiprocessing
import os
import queue
import re
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pandas as pd

from ..errors import TraceError
from ..model import (
    COPY_DIRECTION,
    KIND_DTYPE,
    KINDS,
    MAX_RANK,
    build_events,
    host_memory_of,
    is_collective_kernel,
    is_host_collective,
    lane_name,
    text_column,
)
from .budget import Budget, charge_events

try:  # orjson parses large traces about 25% faster; plain json works too
    import orjson

    _loads = orjson.loads
    _DecodeError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - exercised only without orjson
    def _loads(data: bytes | bytearray | memoryview) -> Any:
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)

    _DecodeError = (ValueError,)

# One event as this reader sees it: only the fields it reads. With msgspec, a piece of the events list is
# decoded straight into these (fields not named here are skipped, never built), which is 2-3x faster than
# a dict per event; without it, or for a piece msgspec refuses, the dicts a JSON parser made are copied in.
# A field that is absent is UNSET (not None), so ``args.device`` absent falls back to ``pid`` as Kineto means.
try:
    import msgspec
except ImportError:  # pragma: no cover - exercised only without msgspec
    msgspec = None

if msgspec is not None:
    _UNSET: Any = msgspec.UNSET

    class _Args(msgspec.Struct, gc=False):
        device: Any = _UNSET
        stream: Any = _UNSET
        correlation: Any = -1
        bytes: Any = None
        input_type: Any = msgspec.field(default=_UNSET, name="Input type")
        input_dims: Any = msgspec.field(default=None, name="Input Dims")

    class _Event(msgspec.Struct, gc=False):
        ph: Any = None
        cat: Any = None
        name: Any = None
        ts: Any = None
        dur: Any = None
        pid: Any = None
        tid: Any = None
        args: _Args | None = None

    _decode_events: Any = msgspec.json.Decoder(list[_Event]).decode
    # ValidationError (a piece that is JSON but not a list of event objects) is one of these too.
    _FAST_ERRORS: tuple[type[Exception], ...] = (msgspec.MsgspecError, RecursionError)
else:  # pragma: no cover - exercised only without msgspec
    _UNSET = object()

    class _Args:  # type: ignore[no-redef]
        __slots__ = ("device", "stream", "correlation", "bytes", "input_type", "input_dims")

        def __init__(self, device: Any = _UNSET, stream: Any = _UNSET, correlation: Any = -1, bytes: Any = None,
                     input_type: Any = _UNSET, input_dims: Any = None) -> None:
            self.device, self.stream, self.correlation = device, stream, correlation
            self.bytes, self.input_type, self.input_dims = bytes, input_type, input_dims

    class _Event:  # type: ignore[no-redef]
        __slots__ = ("ph", "cat", "name", "ts", "dur", "pid", "tid", "args")

        def __init__(self, ph: Any = None, cat: Any = None, name: Any = None, ts: Any = None, dur: Any = None,
                     pid: Any = None, tid: Any = None, args: Any = None) -> None:
            self.ph, self.cat, self.name, self.ts, self.dur = ph, cat, name, ts, dur
            self.pid, self.tid, self.args = pid, tid, args

    _decode_events = None
    _FAST_ERRORS = ()

_NO_ARGS = _Args()
#: Stands in for a member of the events list that is not an object (a number, a string, a list).
_NOT_AN_OBJECT = _Event()


def _event_of(e: object) -> _Event:
    """A parsed JSON value (one member of the events list) as an event."""
    if type(e) is not dict:
        return _NOT_AN_OBJECT
    a = e.get("args")
    args = None
    if type(a) is dict:
        args = _Args(device=a.get("device", _UNSET), stream=a.get("stream", _UNSET),
                     correlation=a.get("correlation", -1), bytes=a.get("bytes"),
                     input_type=a.get("Input type", _UNSET), input_dims=a.get("Input Dims"))
    return _Event(ph=e.get("ph"), cat=e.get("cat"), name=e.get("name"), ts=e.get("ts"), dur=e.get("dur"),
                  pid=e.get("pid"), tid=e.get("tid"), args=args)


_CATEGORY_KIND = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "gpu_memset": "memset",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "python_function": "python",
    "cuda_sync": "sync",
    "os_runtime": "osrt",  # not Kineto's: what helpers' export writes for Nsight Systems' OS runtime calls
    # PyTorch 1.8-1.9 (the first Kineto releases) spelled the categories differently.
    "Kernel": "kernel",
    "Memcpy": "memcpy",
    "Memset": "memset",
    "Runtime": "runtime",
    "Operator": "cpu_op",
    "Python": "python",
    "User annotation": "annotation",
    "GPU user annotation": "gpu_annotation",
    "user annotation": "annotation",
    "gpu user annotation": "gpu_annotation",
    # ROCm builds (roctracer) name some categories after HIP; the rows are otherwise the same.
    "hip_runtime": "runtime",
    "hip_driver": "runtime",
}
#: Kineto's categories for accelerators other than CUDA and ROCm GPUs (Meta's MTIA, Glow, Intel Gaudi's HPU,
#: Intel XPU, out-of-tree PrivateUse1 backends). Their rows are counted, not read: this reader's kinds describe
#: CUDA/HIP devices, and a trace whose device work is all in these categories has no GPU activity it can analyse.
OTHER_ACCELERATOR_CATEGORIES = frozenset({
    "mtia_runtime", "mtia_ccp_events", "mtia_insight", "glow_runtime", "hpu_op", "xpu_runtime", "xpu_driver",
    "privateuse1_runtime", "privateuse1_driver"})
#: ``torch.autograd.profiler``'s own export (the legacy profiler, a bare JSON array) has no categories:
#: its rows are told apart by ``pid``, and a GPU row's ``tid`` is the device.
_LEGACY_PIDS = {"CPU functions": "cpu_op", "CUDA functions": "kernel"}
#: PyTorch 1.8-1.9 wrote the profiler's own ranges (steps, DataLoader fetches, optimizer calls) as
#: ``Operator`` rows; later releases write them as ``user_annotation``, which is what they are.
_OLD_RANGE_CATEGORY = "Operator"
_OLD_SPELLING = frozenset({"Kernel", "Memcpy", "Memset", "Runtime", "Operator", "Python"})
_OLD_RANGE_NAME = re.compile(r"^(?:ProfilerStep#\d+$|enumerate\(DataLoader\)#|Optimizer\.(?:step|zero_grad)#)")
_MEMCPY = re.compile(r"Memcpy (\w+) \((\w+) -> (\w+)\)")
_VERSION_SUFFIX = re.compile(r"_v\d+$")

_CODE = {k: i for i, k in enumerate(KINDS)}  # kind -> its number in the columns being filled
_CATEGORY_CODE = {cat: _CODE[kind] for cat, kind in _CATEGORY_KIND.items()}
_OTHER_CODE = -1  # an OTHER_ACCELERATOR_CATEGORIES row: picked out with the rest, then counted and dropped
_CATEGORY_CODE.update(dict.fromkeys(OTHER_ACCELERATOR_CATEGORIES, _OTHER_CODE))
_ON_DEVICE = np.array([k in ("kernel", "memcpy", "memset", "sync", "gpu_annotation") for k in KINDS])
_MOVES_BYTES = np.array([k in ("memcpy", "memset") for k in KINDS])
#: Bytes per element of the tensor types the profiler names in ``Input type`` (record_shapes=True), for
#: what a gloo collective sends: ``gloo:all_reduce`` carries its tensor's type and dims.
_ITEM_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "int": 4, "long int": 8, "short int": 2,
               "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1}
_PART_DTYPES = {"kind": np.int8, "name": np.int64, "start_us": np.float64, "dur_us": np.float64, "device": np.int64,
                "stream": np.int64, "pid": np.int64, "tid": np.int64, "correlation": np.int64, "bytes": np.float64}
_PART_COLUMNS = tuple(_PART_DTYPES)

# The streaming scanner (parse_stream): the top-level key that opens the events, and a place where one
# event may end and the next begin. A piece is about _PIECE bytes of events; the head before the events
# is looked for in at most _HEAD_LIMIT bytes; the list's closing bracket in at most _END_TRIES places.
_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
#: Stands in for the list already read when the members after it are parsed: a later "traceEvents"
#: key (which json.loads would let win) replaces it and is seen.
_LIST_READ_TEXT = "\x00the list read above"
_LIST_READ = json.dumps(_LIST_READ_TEXT).encode()  # a JSON string, quotes included
_CUT = re.compile(rb"\}\s*,\s*\{")
_NOT_SPACE = re.compile(rb"[^ \t\r\n]")
#: Where a segment handed to another process may end: a cut whose next object opens with a key, which a
#: string cannot imitate (a quote inside one is escaped), so a segment's end is an event's end but for
#: lists of objects nested inside an event (then the read starts again in one process).
_SEGMENT_CUT = re.compile(rb'\}\s*,\s*\{(?=\s*"[^"\\]*"\s*:)')
# 1 MB pieces: the parsed objects of one piece (about 6x its bytes) then reuse the memory the last
# piece's freed instead of mapping fresh pages; on the 2M-event trace 4 MB pieces took 380k page
# faults and 2.0-2.5 s of system time, 1 MB pieces 65k and 1.4-1.6 s (docs/benchmarks.md).
_PIECE = 1 << 20
_HEAD_LIMIT = 64 << 20
_END_TRIES = 64
_HEAD_TRIES = 16


def parse(raw: bytes, path: Path, max_events: int | None = None) -> tuple[pd.DataFrame, dict]:
    """Parse Chrome-trace JSON bytes; more than ``max_events`` trace events is refused with TraceError."""
    return parse_stream(iter((raw,)), path, max_events)


def parse_stream(blocks: Iterable[bytes], path: Path, max_events: int | None = None, *,
                 table: bool = True, budget: Budget | None = None,
                 reopen: Callable[[], Iterable[bytes]] | None = None,
                 size_hint: int = 0) -> tuple[pd.DataFrame | dict[str, np.ndarray], dict]:
    """Parse Chrome-trace JSON arriving as consecutive byte blocks (a file read piece by piece, a gzip
    stream), without ever holding the whole document or one Python dict per event of it.

    The ``traceEvents`` list (or a bare JSON array of events, Chrome's array format) is cut into pieces of
    about ``_PIECE`` bytes at ``}, {`` and each piece is parsed on its own (``[`` + piece + ``]``); a cut
    that falls inside a string or a nested value makes that parse fail, and the piece simply grows until it
    ends where an event ends. Each piece's events go straight into column arrays and are dropped. A document
    whose events this scanner does not find is parsed whole, as ``json.loads`` would read it, up to
    :data:`_WHOLE_LIMIT` bytes. With ``table=False`` the result is the columns for
    :func:`helpers.model.build_events` instead (times not yet shifted, rows not sorted), for a folder reader
    that builds one table of all ranks. ``budget`` counts the events against a folder's limits too (:mod:`.budget`).

    A document of at least :data:`PARALLEL_FROM_BYTES` (``size_hint``) is read by two processes where the
    machine has two cores (:func:`parallel_decoding`) and one of them is free now (:func:`core_to_spare`): this one reads the bytes and cuts the list into
    segments of whole events, and hands some to a helper process that parses them meanwhile; the columns come
    back in the document's order, so the table is the same row for row. Anything unusual in parallel (a cut
    that was not between two events, a damaged event, the event limit) starts the read again from
    ``reopen()`` in this process alone, so what is refused, and how, is exactly what a read in one process says.
    """
    gc_was_on = gc.isenabled()
    gc.disable()  # the pieces' objects die by reference counting; collecting would only rescan them
    try:
        if (reopen is not None and budget is None and size_hint >= PARALLEL_FROM_BYTES and parallel_decoding()
                and core_to_spare()):
            cols = _Columns(path, max_events)
            try:
                doc = _scan(iter(blocks), path, cols, segment=_segment_size(size_hint))
                return cols.finish(doc, table)
            except _Restart:
                blocks = reopen()
        cols = _Columns(path, max_events, budget)
        doc = _scan(iter(blocks), path, cols)
        return cols.finish(doc, table)
    finally:
        if gc_was_on:
            gc.enable()


#: A document at least this large (its JSON bytes) is read by two processes when a second core is free.
#: Below it, starting the second process costs more than it saves: on 2 cores (5 December 2026, best wall of 6
#: alternate reads each way) 0.157 s against 0.140 s in one process at 28.6 MB, 0.34 against 0.26 s at 54 MB,
#: 0.88 against 0.54 s at 111 MB, even at 222 MB; at 447 MB 2.42 against 2.54 s (docs/benchmarks.md;
#: ``python tools/benchmark.py --second-process``).
PARALLEL_FROM_BYTES = 256 << 20
#: Largest single event (bytes of the events list without a place where one event ends and the next begins):
#: Kineto's events are under a kilobyte, a kernel with its full template name a few; one of 64 MB is damage, and
#: reading it would cost memory a few times its size in every process that reads a rank.
_EVENT_LIMIT = 64 << 20
#: Largest document parsed whole when its events cannot be found as a list to stream (the parsed objects of
#: a document are several times its size): larger ones are refused.
_WHOLE_LIMIT = 64 << 20


def parallel_decoding() -> bool:
    """Whether a large document can be decoded by two processes here: a Linux machine with two usable cores (a
    process started by ``fork`` shares this one's memory as it is, and costs milliseconds). Whether it is, for a
    given read, is :func:`core_to_spare`'s to say."""
    if not sys.platform.startswith("linux") or "fork" not in multiprocessing.get_all_start_methods():
        return False
    try:
        return len(os.sched_getaffinity(0)) >= 2
    except (AttributeError, OSError):  # pragma: no cover - Linux always has it
        return False


#: The 1-minute load average (runnable processes, this one included) at or above which a second core is taken
#: as busy: one core's worth of slack below the machine's count of usable cores.
_SPARE_CORE_SLACK = 1.0


def core_to_spare() -> bool:
    """Whether a second core is free for the helper now: the 1-minute load average leaves one core idle.
    The helper pays only on a free core: it costs CPU of its own (the fork, the copy-on-write faults of both
    processes, its columns sent back; on the 28.6 MB benchmark trace 0.06 s of CPU beside a 0.11 s read),
    so on a busy machine it made the read slower in wall time as well as in CPU (docs/benchmarks.md)."""
    try:
        cores = len(os.sched_getaffinity(0))
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - Linux has both
        return False
    return load <= cores - _SPARE_CORE_SLACK


def _segment_size(size_hint: int) -> int:
    """The events handed out at a time: a sixteenth of the document, within 1-8 MB (small enough that
    the two processes finish close together, large enough that handing them over is cheap)."""
    return int(min(max(size_hint // 16, _PIECE), 8 * _PIECE))


class _Restart(Exception):
    """The parallel read met something it does not decide alone: read again in one process."""


def _scan(blocks: Iterator[bytes], path: Path, cols: _Columns, segment: int = 0) -> dict:
    """Feed every trace event to ``cols``; return the document's other top-level members. With ``segment``,
    the events are cut into segments of about that many bytes, parsed here or by a helper process
    (:class:`_Helper`) and merged into ``cols`` in order; :class:`_Restart` when that cannot be trusted."""
    # A bytearray: appending a block and dropping the used front cost the block's size, not the buffer's.
    buf, eof = bytearray(), False

    def more(keep_from: int = 0) -> bool:
        """Append the next block to ``buf``, dropping the ``keep_from`` bytes already used."""
        nonlocal eof
        for block in blocks:
            if block:
                del buf[:keep_from]
                buf.extend(block)
                return True
        eof = True
        return False

    # The head: everything before the top-level "traceEvents": [ (or the [ of a bare array) ... Each candidate
    # key costs a parse of the head before it, so only _HEAD_TRIES are tried (a document of nested
    # "traceEvents" keys would otherwise cost keys x head); past that the document is parsed whole.
    search_from, tries, bare, first = 0, 0, False, None
    while True:
        if first is None and (first := _first_byte(buf)) is not None and buf[first] == 0x5B:  # [
            bare, head, list_from = True, {}, first + 1
            break
        m = _EVENTS_KEY.search(buf, search_from)
        if m is not None:
            tries += 1
            if tries > _HEAD_TRIES:
                return _whole(buf, path, cols, blocks)
            head = _try_loads(buf[:m.start()] + b'"traceEvents":null}')
            if type(head) is dict:
                list_from = m.end()
                break
            search_from = m.start() + 1
            continue
        searched = len(buf)
        if searched > _HEAD_LIMIT or not more():
            return _whole(buf, path, cols, blocks)
        search_from = max(search_from, searched - 4096)  # the key may straddle two blocks
    cols.legacy = bare  # a bare array is the legacy profiler's format: its rows are told apart by pid
    helper = _Helper(path, bare) if segment else None
    try:
        tail, parts = _events(buf, list_from, more, path, cols, segment, helper, bare)
        if helper is not None:
            parts = helper.finish(parts, cols)
        for part in parts:
            cols.merge(part)
    finally:
        if helper is not None:
            helper.close()
    if bare:
        return {}
    # ... and the members after the list.
    if tail.get("traceEvents") != _LIST_READ_TEXT:
        # json.loads would keep only that later value (the last of the same keys wins): refused, not guessed
        raise TraceError(f"{path}: two 'traceEvents' keys at the top of one document (the list, then "
                         f"{_shown(tail.get('traceEvents'))}); the trace is damaged: record it again")
    head.pop("traceEvents")
    tail.pop("traceEvents")
    head.update(tail)
    return head


def _first_byte(buf: bytearray) -> int | None:
    """Where the document's first byte that is not white space is, or None when there is none yet."""
    m = _NOT_SPACE.search(buf)
    return None if m is None else m.start()


def _events(buf: bytearray, pos: int, more: Callable[[int], bool], path: Path, cols: _Columns, segment: int,
            helper: _Helper | None, bare: bool) -> tuple[dict, list]:
    """The events list from ``buf[pos]`` on, piece by piece into ``cols`` (or, with ``segment``, segment by
    segment into parts in the document's order, some parsed by ``helper``); returns the members after the
    list and the parts. A search that finds no cut is repeated only once the unparsed part has doubled: a
    long run without one (megabytes of spaces) is then scanned a bounded number of times instead of once per block."""
    step = segment or _PIECE
    piece = step
    search_at = pos + piece
    parts: list = []
    while True:
        cut = None
        if len(buf) > pos + piece and len(buf) >= search_at:
            cut = (_SEGMENT_CUT if segment else _CUT).search(buf, pos + piece)
            if cut is None:
                search_at = pos + 2 * (len(buf) - pos)
        if cut is None and len(buf) - (pos + piece) > _EVENT_LIMIT:  # a last look past what was searched
            cut = (_SEGMENT_CUT if segment else _CUT).search(buf, pos + piece)
            if cut is None:
                _refuse_huge_event(path)
        if cut is not None and cut.start() - (pos + piece) > _EVENT_LIMIT:  # nowhere to cut for that long: one event
            _refuse_huge_event(path)
        if cut is None:
            if more(pos - 1):  # the byte before the piece stays: _loads_list writes its [ there
                search_at -= pos - 1
                pos = 1
                continue
            if not segment:
                return _last_piece(bytes(memoryview(buf)[pos:]), path, cols, bare), parts
            last = _Columns(path, None, legacy=bare)
            try:
                tail = _last_piece(bytes(memoryview(buf)[pos:]), path, last, bare)
            except TraceError:  # its message, event numbers included, is the one-process read's to give
                raise _Restart from None
            parts.append(last.export())
            cols.count(last.seen)
            return tail, parts
        end = cut.start() + 1
        if segment:
            if helper is not None and helper.wants_more():
                parts.append(helper.submit(bytes(memoryview(buf)[pos - 1:end + 1])))
            else:
                parts.append(_segment(buf, pos, end, path, bare))
                cols.count(parts[-1]["seen"])
            if helper is not None:
                helper.collect(cols)
        else:
            events = _loads_list(buf, pos, end)
            if events is None:  # the cut fell inside a string or a nested value: take a longer piece
                if piece > _EVENT_LIMIT:
                    _refuse_huge_event(path)
                piece *= 2
                search_at = pos + piece
                continue
            cols.add(events)
        pos, piece = cut.end() - 1, step
        search_at = pos + piece


def _refuse_huge_event(path: Path) -> None:
    raise TraceError(f"{path}: no event ends within {_EVENT_LIMIT >> 20} MB of the events list (one event that large, or "
                     "list members that are not events); no profiler writes events this large: the file is damaged or "
                     "not a trace")


def _segment(buf: bytearray, start: int, end: int, path: Path, legacy: bool = False) -> dict:
    """``buf[start:end]``, whole events separated by commas, parsed piece by piece into columns of its own
    (:meth:`_Columns.export`); :class:`_Restart` when it does not end exactly at ``end`` with an event
    (the segment's cut was not between two events) or an event in it is damaged. ``buf[start - 1]`` and
    ``buf[end]`` are lent to the parse (made ``[`` and ``]``, then put back)."""
    cols = _Columns(path, None, legacy=legacy)
    pos, piece = start, _PIECE
    try:
        while True:
            cut = _CUT.search(buf, pos + piece, end) if pos + piece < end else None
            stop = cut.start() + 1 if cut is not None else end
            events = _loads_list(buf, pos, stop)
            if events is None:
                if stop == end:
                    raise _Restart
                piece *= 2
                continue
            cols.add(events)
            if stop == end:
                return cols.export()
            pos, piece = cut.end() - 1, _PIECE
    except TraceError:
        raise _Restart from None


class _Helper:
    """A second process (forked: it starts with this one's memory) that parses segments of the events list
    while this one reads the bytes and parses others. Segments go to it through a pipe and its columns come
    back through another, each pipe served by a thread of this process, so neither process ever waits for
    the other to take something. The helper ignores the signals a terminal sends the whole group (this
    process stops it); if this process dies, the helper's pipe ends and it exits."""

    #: Segments handed to the helper and not yet back, at most: one it parses, one waiting for it.
    IN_FLIGHT = 2

    def __init__(self, path: Path, legacy: bool) -> None:
        ctx = multiprocessing.get_context("fork")
        task_out, self._tasks = ctx.Pipe(duplex=False)
        self._results, result_in = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_helper_main, args=(task_out, result_in, self._tasks, self._results, path, legacy),
                                 daemon=True)
        self._proc.start()
        task_out.close()
        result_in.close()
        self._out: queue.SimpleQueue = queue.SimpleQueue()
        self._back: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [threading.Thread(target=self._feed, daemon=True), threading.Thread(target=self._receive, daemon=True)]
        for t in self._threads:
            t.start()
        self._pending: set[int] = set()
        self._done: dict[int, dict] = {}
        self._next = 0

    def _feed(self) -> None:
        while (item := self._out.get()) is not None:
            try:
                self._tasks.send_bytes(item[0])
                self._tasks.send_bytes(item[1])
            except OSError:  # the helper is gone: its results' pipe ends, and collect() says so
                return
        with contextlib.suppress(OSError):
            self._tasks.send_bytes(b"")

    def _receive(self) -> None:
        while True:
            try:
                self._back.put(self._results.recv())
            except (EOFError, OSError):
                self._back.put(None)
                return

    def wants_more(self) -> bool:
        return len(self._pending) < self.IN_FLIGHT

    def submit(self, data: bytes) -> int:
        """Hand a segment (with one byte either side of it, lent to the parse) over; its token in the parts."""
        token = self._next
        self._next += 1
        self._pending.add(token)
        self._out.put((token.to_bytes(8, "little"), data))
        return token

    def collect(self, cols: _Columns, wait: bool = False) -> None:
        """Take the segments the helper has finished (all of them with ``wait``), counting their events
        against ``cols``' limit."""
        while self._pending:
            if not wait and self._back.empty():
                return
            got = self._back.get()
            if got is None or got[1] is None:  # the helper died (killed for memory, say), or met the unusual
                raise _Restart
            token, part = got
            self._pending.discard(token)
            self._done[token] = part
            cols.count(part["seen"])

    def finish(self, parts: list, cols: _Columns) -> list:
        """``parts`` with every token replaced by the helper's columns for it, in order."""
        self.collect(cols, wait=True)
        return [self._done.pop(p) if isinstance(p, int) else p for p in parts]

    def close(self) -> None:
        self._out.put(None)
        self._threads[0].join(timeout=5)
        with contextlib.suppress(OSError):
            self._tasks.close()
        self._proc.join(timeout=1)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=5)
        with contextlib.suppress(OSError):
            self._results.close()
        self._threads[1].join(timeout=5)


def _helper_main(tasks, results, parent_tasks, parent_results, path: Path, legacy: bool) -> None:
    """The helper process: parse each segment it is given, send its columns back (None: cannot be trusted)."""
    for conn in (parent_tasks, parent_results):  # the parent's ends: with them closed here, a dead parent is EOF
        conn.close()
    for sig in (signal.SIGINT, signal.SIGHUP):  # a terminal's signals reach the group: the parent decides
        signal.signal(sig, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    buf = bytearray(16 << 20)
    while True:
        try:
            token = tasks.recv_bytes()
            if not token:
                return
            try:
                n = tasks.recv_bytes_into(buf)
            except multiprocessing.BufferTooShort as exc:
                buf = bytearray(exc.args[0])
                n = len(buf)
        except (EOFError, OSError):
            return
        try:
            part = _segment(buf, 1, n - 1, path, legacy)
        except Exception:  # a segment it cannot vouch for (or anything unforeseen): the parent reads alone
            part = None
        try:
            results.send((int.from_bytes(token, "little"), part))
        except OSError:
            return


def _shown(value: Any) -> str:
    return "null" if value is None else f"a value of type {type(value).__name__}"


def _last_piece(rest: bytes, path: Path, cols: _Columns, bare: bool = False) -> dict:
    """``rest`` is the list's last events, its ``]`` and the rest of the document (only white space after a
    bare array's): find that ``]``."""
    j, tries, why = len(rest), 0, "the document ends early"
    while tries < _END_TRIES:
        j = rest.rfind(b"]", 0, j)
        if j < 0:
            break
        tries += 1
        if bare:
            tail = {} if not rest[j + 1:].strip(b" \t\r\n") else None
        else:
            tail = _try_loads(b'{"traceEvents":' + _LIST_READ + rest[j + 1:])
        if type(tail) is dict:
            try:
                events = _parse_events(b"[" + rest[:j] + b"]")
            except _DecodeError as exc:
                why = str(exc).splitlines()[0][:80]
                continue
            cols.add(events)
            return tail
    raise _not_json(path, why, rest)


#: The number words Python's json writes and JSON does not have, where a value goes (after ``:``, ``,`` or ``[``).
_NOT_JSON_NUMBER = re.compile(rb"[:,\[]\s*-?(?:NaN|Infinity)\s*[,}\]]")


def _not_json(path: Path, why: str, data: bytes | bytearray = b"") -> TraceError:
    """Invalid JSON, with the advice that fits the parser's reason (a cut-off file is the common one) or what
    ``data`` (the document, or its end) shows: NUL bytes, which JSON never holds, are a file padded with zeros or
    not fully written (a crash mid-write, a preallocated copy), not a document that "ends early"."""
    end = bytes(data[-(1 << 16):]).rstrip(b" \t\r\n")
    if end.endswith(b"\0"):
        zeros = len(end) - len(end.rstrip(b"\0"))
        return TraceError(f"{path}: not valid JSON (it ends in {'at least ' if zeros == len(end) else ''}{zeros:,} NUL "
                          "bytes where JSON text should be: the file was padded with zeros or not fully written); "
                          "record or copy it again")
    if b"\0" in data:
        return TraceError(f"{path}: not valid JSON (it holds NUL bytes, which JSON text never does: the file is "
                          "damaged, or was not fully written); record or copy it again")
    said = why.lower()
    if _NOT_JSON_NUMBER.search(bytes(data[:1 << 20])) or _NOT_JSON_NUMBER.search(bytes(data[-(1 << 20):])):
        return TraceError(f"{path}: not valid JSON (it holds NaN or Infinity, which JSON has no words for: Python's "
                          "json.dump writes them for a time that is not a number); the trace is damaged: record it "
                          "again, or replace them with numbers")
    if "infinity" in said or "out of range" in said:
        return TraceError(f"{path}: not valid JSON ({why}: a number beyond any time or count a trace holds); the file "
                          "is damaged: record or copy it again")
    if "depth" in said or "recursion" in said:
        advice = "its brackets nest deeper than any trace's: the file is damaged or not a trace"
    elif "surrogate" in said or "utf-8" in said or "unicode" in said:
        advice = "it holds text that is not valid Unicode: the file is damaged or not a trace"
    else:
        advice = "the file is probably truncated: record or copy it again"
    return TraceError(f"{path}: not valid JSON ({why}); {advice}")


def _whole(buf: bytes | bytearray, path: Path, cols: _Columns, blocks: Iterable[bytes] = ()) -> dict:
    """The fallback for a document whose events list was not found (``buf`` and the ``blocks`` after it):
    parse it in one go (up to :data:`_WHOLE_LIMIT` bytes; its parsed objects are several times that), then
    feed its events in pieces."""
    for block in blocks:
        if not isinstance(buf, bytearray):
            buf = bytearray(buf)
        buf.extend(block)  # grown in place: a list of blocks joined at the end would hold the document twice
        if len(buf) > _WHOLE_LIMIT:
            raise TraceError(f"{path}: JSON of over {_WHOLE_LIMIT >> 20} MB with no top-level 'traceEvents' list in its "
                             f"first {_HEAD_LIMIT >> 20} MB, so not a PyTorch-profiler trace this reader can stream "
                             "(torch.profiler writes the list near the start); pass the trace torch.profiler wrote")
    try:
        doc = _loads(buf)
    except _DecodeError as exc:
        raise _not_json(path, str(exc).splitlines()[0][:80], buf) from None
    del buf
    if isinstance(doc, list):  # Chrome's "JSON Array Format": the events alone (streamed by _scan; here for a whole read)
        doc = {"traceEvents": doc}
        cols.legacy = True
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(
            f"{path}: JSON without a 'traceEvents' list, so not a PyTorch-profiler trace; "
            "write one with prof.export_chrome_trace(...) or tensorboard_trace_handler"
        )
    events = doc.pop("traceEvents")
    for i in range(0, len(events), 50_000):
        cols.add([_event_of(e) for e in events[i:i + 50_000]])
    return doc


def _loads_list(buf: bytearray, start: int, end: int) -> list | None:
    """``buf[start:end]`` (events separated by commas) parsed as a JSON list, or None where it is not
    one. The bytes just before and after it (a separator, or the list's own ``[``) are made ``[`` and
    ``]`` for the parse and then put back, so the piece is parsed where it lies instead of copied."""
    before, after = buf[start - 1], buf[end]
    buf[start - 1], buf[end] = 0x5B, 0x5D  # [ and ]
    view = memoryview(buf)[start - 1:end + 1]
    try:
        return _parse_events(view)
    except _DecodeError:
        return None
    finally:
        view.release()  # the buffer can grow and shrink again only once no view of it is left
        buf[start - 1], buf[end] = before, after


def _parse_events(data: bytes | bytearray | memoryview) -> list[_Event]:
    """A JSON list of events, parsed; raises _DecodeError where it is not valid JSON. msgspec decodes it
    when it can; what it refuses (a member that is not an object, an ``args`` that is not one, a number
    out of range, nesting too deep) goes to the general parser, so every valid piece reads as ``json.loads``
    reads it, and only the fields this reader uses are ever built. In the fields it skips msgspec checks
    neither number ranges nor UTF-8: a piece with ``1e400`` or a stray non-UTF-8 byte there loads, where
    orjson refuses it."""
    if _decode_events is not None:
        try:
            return _decode_events(data)
        except _FAST_ERRORS:
            pass
    return [_event_of(e) for e in _loads(data)]


def _try_loads(data: bytes | bytearray | memoryview) -> Any:
    try:
        return _loads(data)
    except _DecodeError:
        return None


class _Columns:
    """The events table's columns, filled one parsed piece of ``traceEvents`` at a time."""

    def __init__(self, path: Path, max_events: int | None, budget: Budget | None = None, *, legacy: bool = False) -> None:
        self.path, self.max_events, self.budget = path, max_events, budget
        self.legacy = legacy  # the legacy profiler's rows: categories from their pid (a bare array of events)
        self.seen = 0  # trace events of any kind so far (what max_events counts)
        self.wire_types: Counter[str] = Counter()  # "gloo:all_reduce|c10::Half" -> how many such collectives
        self.name_ids: dict[str, int] = {}  # each distinct name once; events hold its number
        self.gloo_codes: set[int] = set()  # the numbers of the names that are gloo collectives' ("gloo:...")
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in _PART_COLUMNS}
        # What the events were, tallied only while none has been understood: a refusal says what was found.
        self.unknown: Counter[str] = Counter()
        self.other_accelerator: Counter[str] = Counter()  # OTHER_ACCELERATOR_CATEGORIES rows, by category

    def add(self, raw_events: list) -> None:
        path = self.path
        base = self.seen
        self.seen += len(raw_events)
        if self.max_events is not None and self.seen > self.max_events:
            raise TraceError(f"{path}: more than {self.max_events:,} events, over the limit; "
                             "profile fewer steps, or raise the limit with --max-events (API: max_events=)")
        charge_events(self.budget, len(raw_events))
        if self.legacy:
            _legacy_rows(raw_events)
        code_of = _CATEGORY_CODE  # every category read, and the other accelerators' (counted below)
        try:  # the common case: every category hashable
            evs = [e for e in raw_events if e.ph == "X" and e.cat in code_of]
        except TypeError:
            evs = [e for e in raw_events if e.ph == "X" and type(c := e.cat) is str and c in code_of]
        kind = np.fromiter([code_of[e.cat] for e in evs], dtype=np.int8, count=len(evs))
        if (other := kind == _OTHER_CODE).any():  # rare: another accelerator's rows
            self.other_accelerator.update(e.cat for e, o in zip(evs, other.tolist()) if o)
            evs = [e for e, o in zip(evs, other.tolist()) if not o]
            kind = kind[~other]
        if not evs:
            if not self.parts["kind"]:
                self.unknown.update(_category_of(e) for e in raw_events)
            return
        ts = _times(evs, [e.ts for e in evs], "ts", path)
        dur = _times(evs, [e.dur for e in evs], "dur", path)
        names = [e.name for e in evs]
        bad = next((i for i, n in enumerate(names) if type(n) is not str), None)
        if bad is not None:
            _damaged(path, raw_events, evs[bad], "lacks a 'name'", base)
        if (dur < 0).any() or not np.isfinite(ts).all() or not np.isfinite(dur).all():
            i = int(np.flatnonzero((dur < 0) | ~np.isfinite(ts) | ~np.isfinite(dur))[0])
            _damaged(path, raw_events, evs[i], "has a negative or infinite time", base)
        ids = self.name_ids
        known = len(ids)
        name_code = np.fromiter([ids.setdefault(n, len(ids)) for n in names], dtype=np.int64, count=len(names))
        # gloo collectives carry what they send in their args: looked for once per new name, not per event
        self.gloo_codes.update(ids[nm] for nm in itertools.islice(ids, known, None) if nm.startswith("gloo:"))
        if evs[0].cat in _OLD_SPELLING:  # a trace never mixes the two spellings: one look is enough
            ranges = [i for i, e in enumerate(evs) if e.cat == _OLD_RANGE_CATEGORY and _OLD_RANGE_NAME.match(names[i])]
            kind[ranges] = _CODE["annotation"]
        no_args = _NO_ARGS
        args = [no_args if (a := e.args) is None else a for e in evs]
        on_device = _ON_DEVICE[kind]
        n = len(evs)
        device = np.full(n, -1, dtype=np.int64)
        stream = np.full(n, -1, dtype=np.int64)
        pid = np.full(n, -1, dtype=np.int64)
        tid = np.full(n, -1, dtype=np.int64)
        unset = _UNSET  # a GPU row without args.device / args.stream has them as its pid / tid
        if on_device.any():
            dev_idx = np.flatnonzero(on_device)
            dev_args = args if len(dev_idx) == n else [args[i] for i in dev_idx.tolist()]
            dev_evs = evs if len(dev_idx) == n else [evs[i] for i in dev_idx.tolist()]
            device[dev_idx] = _ints([e.pid if (v := a.device) is unset else v for a, e in zip(dev_args, dev_evs)],
                                    path, "args.device")
            stream[dev_idx] = _ints([e.tid if (v := a.stream) is unset else v for a, e in zip(dev_args, dev_evs)],
                                    path, "args.stream")
        if not on_device.all():
            host_idx = np.flatnonzero(~on_device)
            host_evs = evs if len(host_idx) == n else [evs[i] for i in host_idx.tolist()]
            pid[host_idx] = _ints([e.pid for e in host_evs], path, "pid")
            tid[host_idx] = _ints([e.tid for e in host_evs], path, "tid")
        correlation = _ints([a.correlation for a in args], path, "args.correlation")
        nbytes = np.full(n, math.nan)
        for i in np.flatnonzero(_MOVES_BYTES[kind]).tolist():
            nbytes[i] = _as_float(args[i].bytes)
        gloo = np.flatnonzero(np.isin(name_code, list(self.gloo_codes))).tolist() if self.gloo_codes else ()
        for i in gloo:  # what a gloo collective sends
            if (types := args[i].input_type) is not unset:
                nbytes[i] = _collective_bytes(types, args[i].input_dims)
                self.wire_types[f"{names[i]}|{','.join(map(str, types)) if isinstance(types, list) else types}"] += 1
        for col, values in (("kind", kind), ("name", name_code), ("start_us", ts), ("dur_us", dur), ("device", device),
                            ("stream", stream), ("pid", pid), ("tid", tid), ("correlation", correlation),
                            ("bytes", nbytes)):
            self.parts[col].append(values)

    def count(self, n: int) -> None:
        """``n`` more events, parsed elsewhere (a segment): over the limit, the read starts again in one
        process, which refuses it as it always does."""
        self.seen += n
        if self.max_events is not None and self.seen > self.max_events:
            raise _Restart

    def export(self) -> dict:
        """What a segment's columns hand to the read's own (:meth:`merge`), names as text."""
        return {"parts": {c: np.concatenate(v) if v else np.zeros(0, dtype=_PART_DTYPES[c]) for c, v in self.parts.items()},
                "names": list(self.name_ids), "seen": self.seen, "wire_types": self.wire_types,
                "unknown": self.unknown, "other": self.other_accelerator}

    def merge(self, part: dict) -> None:
        """A segment's columns after those already here (its events were counted by :meth:`count`)."""
        ids = self.name_ids
        names = part["names"]
        lut = np.fromiter((ids.setdefault(n, len(ids)) for n in names), dtype=np.int64, count=len(names))
        cols = part["parts"]
        if len(cols["kind"]):
            for c in _PART_COLUMNS:
                self.parts[c].append(lut[cols[c]] if c == "name" else cols[c])
        self.unknown.update(part["unknown"])  # used only when no event at all was understood
        self.wire_types.update(part["wire_types"])
        self.other_accelerator.update(part["other"])

    def finish(self, doc: dict, table: bool = True) -> tuple[pd.DataFrame | dict[str, np.ndarray], dict]:
        c = {col: np.concatenate(parts) if parts else np.zeros(0, dtype=_PART_DTYPES[col])
             for col, parts in self.parts.items()}
        self.parts = {}
        if not len(c["kind"]) and self.seen:
            if self.other_accelerator:
                _refuse_other_accelerator(self.path, self.seen, self.other_accelerator)
            if not _empty_window(doc, self.unknown):
                _refuse_unknown(self.path, self.seen, self.unknown)
        kind, code = c["kind"], c["name"]
        uniq = list(self.name_ids)
        self.name_ids = {}
        n_names = len(uniq)
        # Work per distinct name, not per event: traces repeat a few hundred names many times.
        collective = np.array([is_collective_kernel(u) for u in uniq], dtype=bool)
        gloo = np.array([is_host_collective(u) for u in uniq], dtype=bool)
        kind[(kind == _CODE["kernel"]) & collective[code]] = _CODE["collective"]
        kind[(kind == _CODE["annotation"]) & gloo[code]] = _CODE["collective"]
        n = len(kind)
        texts = uniq
        runtime = np.flatnonzero(kind == _CODE["runtime"])
        if runtime.size:  # a runtime call's name without its _vNNNN: codes past the names stand for those
            code = code.copy()
            code[runtime] += n_names
            texts = uniq + [_VERSION_SUFFIX.sub("", u) for u in uniq]
        names = text_column(code, texts)
        mc = kind == _CODE["memcpy"]
        parsed = [_memcpy_kind(u) for u in uniq] if mc.any() else []
        copy_code = np.where(mc, c["name"], n_names)  # code n_names: not a copy, ""
        copy_kind = text_column(copy_code, [p[0] for p in parsed] + [""] if parsed else [""] * (n_names + 1))
        host_memory = text_column(copy_code, [p[1] for p in parsed] + [""] if parsed else [""] * (n_names + 1))
        kinds = pd.Categorical.from_codes(kind, dtype=KIND_DTYPE)  # build_events takes the codes as they are
        lanes = _lanes(kind, c["device"], c["stream"], c["tid"])
        ts = c["start_us"]
        origin = float(ts.min()) if n else 0.0
        columns = {
            "kind": kinds, "lane": lanes, "name": names, "start_us": ts, "dur_us": c["dur_us"],
            "device": c["device"], "stream": c["stream"], "pid": c["pid"], "tid": c["tid"],
            "correlation": c["correlation"], "bytes": c["bytes"], "copy_kind": copy_kind, "host_memory": host_memory,
        }
        metadata = _metadata(doc, origin)
        if self.wire_types:  # what the collectives sent, by tensor type (record_shapes=True traces only)
            metadata["collective_types"] = dict(self.wire_types)
        if self.other_accelerator:  # rows of an accelerator this reader does not read, by category
            metadata["other_accelerator_events"] = dict(self.other_accelerator)
        rank = metadata["distributed"].get("rank")
        if not table:
            columns["rank"] = np.full(n, rank or 0, dtype=np.int64)
            return columns, {**metadata, "origin_us": 0.0}  # times left absolute
        events = build_events(columns)
        if rank is not None:
            events["rank"] = rank
        return events, metadata


def _legacy_rows(events: list[_Event]) -> None:
    """Give the legacy profiler's uncategorised rows the category and device Kineto would have given them
    (in place: a row with no category whose pid names CPU or CUDA functions; a GPU row's device is its tid)."""
    for e in events:
        if e.cat is None and e.ph == "X" and type(e.pid) is str and (cat := _LEGACY_PIDS.get(e.pid)):
            e.cat, e.pid = cat, 0
            if cat == "kernel":
                a = e.args or _NO_ARGS
                e.args = _Args(device=e.tid if a.device is _UNSET else a.device, stream=0 if a.stream is _UNSET else a.stream,
                               correlation=a.correlation, bytes=a.bytes, input_type=a.input_type, input_dims=a.input_dims)


def _category_of(e: _Event) -> str:
    if e is _NOT_AN_OBJECT:
        return "(not an object)"
    cat = e.cat
    if e.ph != "X":
        return f"{cat or 'uncategorised'} (phase {str(e.ph)[:8]})"
    return str(cat)[:40] if cat is not None else "(no category)"


def _refuse_other_accelerator(path: Path, seen: int, found: Counter[str]) -> None:
    """Only another accelerator's rows: no host op, range or CUDA/ROCm row to read."""
    top = ", ".join(f"{c} ({n:,})" for c, n in found.most_common(5))
    raise TraceError(
        f"{path}: {seen:,} events; the timed ones are all another accelerator's ({top}), which this tool does not read, "
        "and there is no host op, range or CUDA/ROCm row; read it in Perfetto (ui.perfetto.dev) or the accelerator's tools")


#: Kineto's own top-level members: a document with one of them is the PyTorch profiler's export.
_KINETO_MEMBERS = ("schemaVersion", "deviceProperties", "traceName", "baseTimeNanoseconds", "distributedInfo")
_BOOKKEEPING = re.compile(r"\(phase [MiI]\)$")


def _empty_window(doc: dict, found: Counter[str]) -> bool:
    """The profiler's export of a window that recorded nothing: Kineto still writes its thread-name metadata and a
    "Record Window End" instant (a schedule that never reached its active steps does this), so the file is a
    PyTorch-profiler trace with no event to read, and is read as an empty capture, not refused as another format."""
    return (isinstance(doc, dict) and any(k in doc for k in _KINETO_MEMBERS)
            and all(_BOOKKEEPING.search(cat) for cat in found))


def _refuse_unknown(path: Path, seen: int, found: Counter[str]) -> None:
    """Events were there, none of them one this reader knows: say what they were instead of reading nothing."""
    top = ", ".join(f"{c} ({n:,})" for c, n in found.most_common(5))
    more = f" and {len(found) - 5} more" if len(found) > 5 else ""
    raise TraceError(
        f"{path}: {seen:,} events, categories {top}{more}: none is a PyTorch-profiler or Chrome trace event this "
        "reader knows, so not a PyTorch-profiler trace (it reads timed 'X' events of categories such as kernel, "
        "cuda_runtime, cpu_op); record one with torch.profiler and export_chrome_trace, or nsys export --type sqlite")


def _metadata(doc: dict, origin: float) -> dict:
    dist = doc.get("distributedInfo")
    dist = dist if isinstance(dist, dict) else {}
    if not isinstance(dist.get("rank"), int) or isinstance(dist.get("rank"), bool) or not 0 <= dist["rank"] <= MAX_RANK:
        dist.pop("rank", None)
    props = doc.get("deviceProperties")
    props = props if isinstance(props, list) else []
    out = {
        "origin_us": origin,
        "device_names": [str(p.get("name", "")) for p in props if isinstance(p, dict)],
        "distributed": {k: dist[k] for k in ("backend", "rank", "world_size") if k in dist},
        "torch_version": str(doc.get("torch_version", "")),
    }
    training = _training(doc.get("training"))
    if training:
        out["training"] = training
    return out


def _training(value: object) -> dict:
    """The course's job's record of what a rank trained (helpers.workloads.communication.training_record), kept
    as numbers and short names; anything else is left out."""
    if not isinstance(value, dict):
        return {}
    out: dict = {}
    for k in ("steps", "from_plain_ddp", "ranks_apart", "moved", "fp16_from_plain_ddp"):
        v = value.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = float(v)
    code = value.get("course_code")
    if isinstance(code, list):
        out["course_code"] = [str(c)[:80] for c in code[:8]]
    return out


def _damaged(path: Path, raw_events: list[_Event], ev: _Event, problem: str, base: int = 0) -> None:
    index = base + next(i for i, e in enumerate(raw_events) if e is ev)
    raise TraceError(f"{path}: event #{index} ({str(ev.name)[:40]!r}) {problem}; the trace is damaged: record it again")


def _numeric_column(values: list) -> np.ndarray | None:
    """``values`` as a 1-D numpy array when numpy can infer one, else None."""
    if not values:
        return np.zeros(0, dtype=np.int64)
    try:
        arr = np.array(values)
    except (ValueError, TypeError, OverflowError):
        return None
    return arr if arr.ndim == 1 else None


def _times(evs: list[_Event], values: list, key: str, path: Path) -> np.ndarray:
    """``values`` (each event's ``key``) as float microseconds."""
    arr = _numeric_column(values)
    if arr is not None and arr.dtype.kind in "fiu":  # numpy inferred a numeric column: the common, fast case
        # numpy reads a JSON true or false among numbers as 1 or 0: only those values can hide one
        hidden = next((i for i in np.flatnonzero((arr == 0) | (arr == 1)).tolist() if type(values[i]) is bool), None)
        if hidden is None:
            return arr.astype(np.float64)
        _refuse_time(evs[hidden], values[hidden], key, path)
    bad = next((i for i, v in enumerate(values) if type(v) not in (int, float)), None)
    if bad is None:  # numbers all, one an integer beyond 64 bits (msgspec keeps those whole): as a float
        try:
            return np.array([float(v) for v in values], dtype=np.float64)
        except OverflowError:
            bad, big = next((e, v) for e, v in zip(evs, values) if abs(v) > 1e308)
            raise TraceError(f"{path}: an event ({str(bad.name)[:40]!r}, {bad.cat}) has a {key!r} of {len(str(abs(big))):,} "
                             "digits, beyond any time or count a trace holds; the trace is damaged: record it again") from None
    _refuse_time(evs[bad], values[bad], key, path)


def _refuse_time(ev: _Event, value: object, key: str, path: Path) -> NoReturn:
    """One refusal for a time that is not a number, whichever reader (streamed or whole) met it."""
    found = {"bool": str(value).lower(), "NoneType": "missing or null", "str": "a string", "list": "a list",
             "dict": "an object"}.get(type(value).__name__, type(value).__name__)
    raise TraceError(f"{path}: an event ({str(ev.name)[:40]!r}, {ev.cat}) lacks a numeric {key!r} (it is {found}); "
                     "the trace is damaged: record it again")


def _ints(values: list, path: Path, field: str) -> np.ndarray:
    arr = _numeric_column(values)
    if arr is not None and arr.dtype.kind in "iu" and arr.dtype.itemsize <= 8 and (arr.dtype.kind == "i" or arr.max(initial=0) < 2**63):
        return arr.astype(np.int64)
    ints = [_as_int(v) for v in values]
    for v in ints:
        if not -(2**63) <= v < 2**63:
            raise TraceError(f"{path}: an event's {field} is {str(v)[:24]}, beyond 64-bit integers; "
                             "the trace is damaged: record it again")
    return np.array(ints, dtype=np.int64)


def _memcpy_kind(name: str) -> tuple[str, str]:
    m = _MEMCPY.match(name)
    if not m:
        return "", ""
    direction = COPY_DIRECTION.get(m.group(1), m.group(1))
    return direction, host_memory_of(direction, m.group(2), m.group(3))


def _lanes(kind: np.ndarray, device: np.ndarray, stream: np.ndarray, tid: np.ndarray) -> pd.Categorical:
    """Lane names, built once per distinct (kind, device, stream, thread)."""
    n = len(kind)
    if not n:
        return text_column(np.zeros(0, dtype=np.int64), [])
    key = np.zeros(n, dtype=np.int64)
    radix, uniques = 1, []
    for values in (kind, device, stream, tid):
        codes, uniq = pd.factorize(values)
        uniques.append(uniq)
        key += codes.astype(np.int64) * radix
        radix *= len(uniq)
        if radix >= 2**62:  # absurdly many distinct threads: name the lanes one event at a time
            lanes = [lane_name(KINDS[k], d, s, t) for k, d, s, t in
                     zip(kind.tolist(), device.tolist(), stream.tolist(), tid.tolist())]
            group, names = pd.factorize(np.array(lanes, dtype=object))
            return text_column(group, list(names))
    group, keys = pd.factorize(key)
    names = []
    for k in keys.tolist():
        parts = []
        for uniq in uniques:
            parts.append(uniq[k % len(uniq)])
            k //= len(uniq)
        names.append(lane_name(KINDS[int(parts[0])], int(parts[1]), int(parts[2]), int(parts[3])))
    return text_column(group, names)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _collective_bytes(types: object, dims: object) -> float:
    """What a gloo collective range sends: its tensors' elements times their type's size (NaN if unknown)."""
    if not isinstance(types, list) or not isinstance(dims, list):
        return math.nan
    total = 0.0
    for t, d in zip(types, dims):
        size = _ITEM_BYTES.get(t) if isinstance(t, str) else None
        if size is None or not isinstance(d, list) or not all(_is_number(x) for x in d):
            return math.nan
        total += size * math.prod(_as_float(x) for x in d) if d else float(size)  # NaN past a double
    return total if math.isfinite(total) else math.nan


def _as_float(value: object) -> float:
    if not _is_number(value):
        return math.nan
    try:
        return float(value)  # type: ignore[arg-type]
    except OverflowError:  # an integer beyond a double (msgspec keeps such integers whole): no size to give
        return math.nan


def _as_int(value: object) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return int(value)
    if isinstance(value, str):
        digits = re.search(r"-?\d{1,18}", value)
        return int(digits.group()) if digits else -1
    return -1
