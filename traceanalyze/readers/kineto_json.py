"""PyTorch profiler (Kineto) Chrome-trace JSON: `*.pt.trace.json`, `*.json.gz`.

Produced by `torch.profiler.profile(...)` with `on_trace_ready=tensorboard_trace_handler(dir)` or
`prof.export_chrome_trace("x.json")`, and by Kineto's on-demand/dynolog tracing. Tested with the
Holistic Trace Analysis sample traces (formats.md §5): PyTorch 2.x on V100 (ns-resolution epoch
µs, 2024), A100 (integer epoch µs, 2023; CUPTI range profiler; Triton with `cuda_driver`, 2024
`baseTimeNanoseconds` style) and ROCm 6.2 on MI250.

Layout: `{"schemaVersion", "deviceProperties": [...], "distributedInfo": {...}, "traceEvents":
[...], "baseTimeNanoseconds"?, ...}`; every key but `traceEvents` is optional. Only the keys the
tables need are decoded (a typed msgspec decoder skips the rest), so identifying keys that
Meta-internal traces carry (`username`, `host_name`, `tw_*`, `mast_*`, `INFO` log lines) never
reach the output.

Time (formats.md §5): `ts`/`dur` are always µs. Three styles exist:

* integer epoch µs (`1695835542514261`, older traces);
* float epoch µs with ns fractions (`1712195495505583.123`). float64 cannot hold these exactly
  (its spacing is 0.25 µs at this magnitude), so numbers are never converted through float: the
  decoder hands floats over as their decimal text (`float_hook=str`) and polars parses the text
  as a fixed-point decimal (`Decimal(38, 3)`), then int64 ns;
* float µs relative to the top-level `baseTimeNanoseconds` (2024+): `abs = base + round(ts*1000)`.

All three are stored as absolute Unix-epoch ns with `sources.time_origin_epoch_ns = 0`, so ranks
of one job line up without an extra step. Digits finer than 1 ns round half to even.

Tables:

* `kernels` (`cat` kernel): `device_id` = `args.device`, else `pid` (GPU events use `pid` =
  device, `tid` = stream); `stream_id` = `args.stream`, else an integer `tid`. Kineto's
  `"shared memory"` arg is static + dynamic shared memory summed (libkineto `CuptiActivity.cpp`),
  which fits neither `static_smem_bytes` nor `dynamic_smem_bytes` (both stay null): it goes to
  `total_smem_bytes`.
  `kernel_id` is the launch index in start-time order.
* `memcpy` (`gpu_memcpy`, `gpu_memset`): `Memcpy HtoD (Pageable -> Device)` gives kind `HtoD`,
  src `Pageable`, dst `Device`; `Memset (Device)` gives kind `memset`, dst `Device`.
* `api_calls`: `cuda_runtime` → `runtime`, `cuda_driver` → `driver` (ROCm's `hip*` calls also
  use `cuda_runtime`); `cbid` (ROCm: `cid`) → `callback_id`.
* `ops`: `cpu_op`, `python_function` (and the old `Operator`); `External id` → `external_id`.
* `markers`: `user_annotation` (host), `gpu_user_annotation` (`device_id` = pid, `stream_id` =
  tid, no process or thread: pid/tid are device/stream there) and instant events (`ph` `i`/`I`,
  null end).
* `iterations`: `ProfilerStep#N` host annotations (user_annotation, or cpu_op in older PyTorch);
  `rank` from `distributedInfo`, `device_id` null (the trace does not map ranks to devices).
* `sources`: tool `pytorch-profiler`, `tool_version` null (Kineto writes no PyTorch version;
  `cupti_version`/`cuda_runtime_version` are not the tool's), `rank`/`world_size` from
  `distributedInfo`.
* `kernel_metrics`: `cuda_profiler_range` events (CUPTI range profiler) carry counter name → value
  maps in `args`; one row per counter, `kernel_id` = the range's ordinal in the file, `unit` null
  (the trace does not state units; raw counters are mostly instruction counts, never guessed).
* `devices` from `deviceProperties` (AMD: computeMajor/Minor is the gfx arch, e.g. gfx90a → 9.0).

Old traces (PyTorch ≤ 1.9) use `Kernel`, `Runtime`, `Memcpy`, `Memset`, string `tid`s like
`"stream 7"` and lower-case `external id`; categories are matched case-insensitively. Events with
string `pid`/`tid` (`"Spans"`, `"Traces"`, `""`) get null ids. Flows (`s`/`f`/`t`) and metadata
(`M`) are skipped.
"""

from __future__ import annotations

import importlib
import operator
import re
import zlib
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import msgspec
import polars as pl
from msgspec import Struct, field

from ..errors import MalformedInput
from ..tables import Tables
from ._common import (
    GZIP_MAGIC,
    PathLike,
    current_limits,
    gunzip_stream,
    head_bytes,
    reader_entry,
    too_large_value,
    warn,
)

_inflate: Any
try:  # ISA-L inflates ~2.5x faster than zlib (10 vs 27 ms for the ResNet trace); optional
    _inflate = importlib.import_module("isal.isal_zlib")
except ImportError:  # pragma: no cover - depends on the environment
    _inflate = zlib

TOOL = "pytorch-profiler"

_MEMSET = ("gpu_memset", "memset")
_OPS = ("cpu_op", "python_function", "operator")
_RANGE = "cuda_profiler_range"

_STEP = "ProfilerStep#"  # `ProfilerStep#<N>` host ranges


# --- decoder types ----------------------------------------------------------------------------
# `Any` for values whose type varies between producers (ROCm writes stream "0x0", Triton ops
# write grid as a string): conversion to columns casts non-conforming values to null instead of
# failing the whole file. gc=False: these objects never form cycles, and the collector would
# otherwise walk ~10^5 of them.


class _Args(Struct, frozen=True, gc=False):
    external_id: Any = field(default=None, name="External id")
    external_id_old: Any = field(default=None, name="external id")
    device: Any = None
    context: Any = None
    stream: Any = None
    correlation: Any = None
    registers: Any = field(default=None, name="registers per thread")
    smem: Any = field(default=None, name="shared memory")
    grid: Any = None
    block: Any = None
    bytes: Any = None
    cbid: Any = None
    cid: Any = None


_NO_ARGS = _Args()

_EVENT_FIELDS: dict[str, Any] = {
    "cat": None,
    "name": None,
    "pid": None,
    "tid": None,
    "ts": None,
    "dur": None,
    "args": _NO_ARGS,
}

# Events the tables use: complete (`X`) and instant (`i`, legacy `I`) events.
_KEPT_PHASES = ("X", "i", "I")
_INSTANT = "\x00instant"
# Every other Chrome trace phase decodes to an empty object (its fields are skipped, not built),
# which matters for the ~30% of events that are flows. An unknown phase makes the tagged decode
# fail; the file is then decoded with the untagged `_AnyEvent`.
_SKIPPED_PHASES = (
    "B", "E", "C", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "M", "V", "v", "R", "c",
    "(", ")",
)  # fmt: skip


def _event_struct(ph: str) -> type[Struct]:
    cls = msgspec.defstruct(
        f"_Event_{ph}",
        [
            # instants usually have no category: a sentinel default routes them to markers
            ("cat", Any, None if ph == "X" else _INSTANT),
            ("name", Any, None),
            ("pid", Any, None),
            ("tid", Any, None),
            ("ts", Any, None),
            ("dur", Any, None),
            # "args": null fails this type; such a batch is decoded with `_AnyEvent` instead
            ("args", _Args, _NO_ARGS),
        ],
        tag_field="ph",
        tag=ph,
        gc=False,
    )
    cls.ph = ph  # type: ignore[attr-defined]  # the tag is not stored per instance
    return cls


def _skipped_struct(ph: str) -> type[Struct]:
    cls = msgspec.defstruct(f"_Skip_{ph}", [], tag_field="ph", tag=ph, gc=False)
    cls.ph = ph  # type: ignore[attr-defined]
    for k, v in _EVENT_FIELDS.items():  # class attributes, so attrgetter sees the same columns
        setattr(cls, k, v)
    return cls


class _AnyEvent(Struct, gc=False):
    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: _Args | None = None


class _Device(Struct, gc=False):
    id: Any = None
    name: Any = None
    totalGlobalMem: Any = None  # noqa: N815 - the trace's key
    computeMajor: Any = None  # noqa: N815
    computeMinor: Any = None  # noqa: N815
    numSms: Any = None  # noqa: N815


class _Dist(Struct, gc=False):
    rank: Any = None
    world_size: Any = None


_TAGGED = tuple(
    [_event_struct(p) for p in _KEPT_PHASES] + [_skipped_struct(p) for p in _SKIPPED_PHASES]
)


def _doc_type(event_type: Any) -> type[Struct]:
    return msgspec.defstruct(
        "_Doc",
        [
            ("traceEvents", list[event_type]),
            ("deviceProperties", list[_Device] | None, None),
            ("distributedInfo", _Dist | None, None),
            ("baseTimeNanoseconds", Any, None),
        ],
    )


# float_hook=str: untyped JSON floats arrive as their exact decimal text (see the docstring).
_TAGGED_UNION: Any = _TAGGED[0]
for _cls in _TAGGED[1:]:
    _TAGGED_UNION = _TAGGED_UNION | _cls
_DECODER = msgspec.json.Decoder(_doc_type(_TAGGED_UNION), float_hook=str)
_DECODER_ANY = msgspec.json.Decoder(_doc_type(_AnyEvent), float_hook=str)


class _RangeEvent(Struct, gc=False):
    cat: Any = None
    name: Any = None
    pid: Any = None
    args: Any = None


class _RangeDoc(Struct, gc=False):
    traceEvents: list[_RangeEvent]  # noqa: N815


_RANGE_DECODER = msgspec.json.Decoder(list[_RangeEvent])
_RANGE_DOC_DECODER = msgspec.json.Decoder(_RangeDoc)
_BATCH_DECODER = msgspec.json.Decoder(list[_TAGGED_UNION], float_hook=str)
_BATCH_DECODER_ANY = msgspec.json.Decoder(list[_AnyEvent], float_hook=str)


# --- file access ------------------------------------------------------------------------------


def sniff(path: PathLike) -> bool:
    """A JSON object whose head names `traceEvents` (Chrome trace) or Kineto's `schemaVersion`."""
    head = head_bytes(path, 65536).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"{") and (b'"traceEvents"' in head or b'"schemaVersion"' in head)


_CHUNK = 1 << 21


def _chunks(path: PathLike) -> Iterator[bytes]:
    """The file's bytes in pieces of at most `_CHUNK`, gunzipped (every member, with ISA-L when
    it is installed) when it is gzip."""
    with open(path, "rb") as f:
        if f.read(2) != GZIP_MAGIC:
            f.seek(0)
            while b := f.read(_CHUNK):
                yield b
            return
        f.seek(0)
        yield from gunzip_stream(f, path, out_chunk=_CHUNK, inflate=_inflate)


# The start of the events array, and a candidate boundary between two events. A candidate may
# lie inside a string or a nested array of objects; the left part then is not valid JSON (an
# unterminated string or unbalanced brackets), so every cut is confirmed by decoding it.
_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_CUT = re.compile(rb"\}\s*,\s*\{")
_BYTE_POS = re.compile(r"\(byte (\d+)\)")
_CUT_WINDOW = 1 << 16

# Lower-cased category -> table. Old (PyTorch <= 1.9) capitalised names (`Kernel`, `Runtime`,
# `Memcpy`, `Memset`) are the same after lower-casing; `operator` is the pre-1.9 `cpu_op`.
_ROLE: dict[str, str] = {
    "kernel": "kernels",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memcpy",
    "memset": "memcpy",
    "cuda_runtime": "api_calls",
    "runtime": "api_calls",
    "cuda_driver": "api_calls",
    "cpu_op": "ops",
    "python_function": "ops",
    "operator": "ops",
    "user_annotation": "markers",
    "gpu_user_annotation": "markers",
    "cpu_instant_event": "markers",
    _INSTANT.lower(): "markers",
    _RANGE: "range",
}


_ROLE_NAMES = sorted(set(_ROLE.values()))
_ROLE_CODE = {cat: _ROLE_NAMES.index(role) for cat, role in _ROLE.items()}


class _Parts:
    """What the streaming pass collects: per-table frames per batch, ranges, the header docs."""

    def __init__(self) -> None:
        self.frames: dict[str, list[pl.DataFrame]] = {t: [] for t in _BUILDERS}
        self.ranges: list[Any] = []
        self.docs: list[Any] = []

    def add_events(self, events: list[Any], raw: Any, range_decoder: Any) -> None:
        """Split one batch by table and build each table's rows."""
        if not events:
            return
        for role, sub in _split(events).items():
            if role == "range":
                # CUPTI range-profiler counters live in free-form args: decode this batch again
                # with `args` untyped (only traces that have such events pay for it).
                self.ranges += _range_events(range_decoder.decode(raw))
            else:
                self.frames[role].append(_BUILDERS[role](sub))


def _range_events(decoded: Any) -> list[Any]:
    events = decoded.traceEvents if isinstance(decoded, _RangeDoc) else decoded
    return [e for e in events if isinstance(e.cat, str) and e.cat.lower() == _RANGE]


def _stream(path: PathLike) -> _Parts:
    """Decode the trace batch by batch (`_CHUNK`, 2 MiB of text) without holding the whole text.

    `pending` always starts with `[` followed by the next undecoded event, so a batch is decoded
    in place: the byte after its last event is set to `]` for the decode and restored.
    """
    parts = _Parts()
    pending = bytearray()
    consumed = 0  # file offset of pending[1]
    in_events = False
    # `pending` holds one undecoded event at most (and a chunk): past the bound it is one giant
    # value (a 2 GB string) or no event boundary at all; refused before it fills memory.
    lim = current_limits()
    for chunk in _chunks(path):
        if len(pending) > lim.max_value_bytes:
            _oversized(path, pending, consumed, in_events, lim)
        pending += chunk
        if not in_events:
            if pending.startswith(b"\xef\xbb\xbf"):  # a UTF-8 BOM (Windows editors)
                del pending[:3]
            m = _ARRAY_START.search(pending)
            if m is None:
                continue
            # Header keys before the array (deviceProperties, distributedInfo): close the array
            # and the object and decode them as a document without events.
            parts.docs.append(_decode_doc(path, bytes(pending[: m.end()]) + b"]}", 0))
            consumed = m.end()
            del pending[: m.end() - 1]  # keep the `[`
            in_events = True
        used = _decode_front(pending, parts)
        if used:
            consumed += used
            del pending[1 : 1 + used]
    if not in_events:
        # No events array: decode what is there for the decoder's own message (empty, garbage,
        # a JSON document without traceEvents).
        _decode_doc(path, bytes(pending), 0)
        raise MalformedInput("no traceEvents array", path=path)
    # The last events, `]`, and any trailing keys (baseTimeNanoseconds is often last): reopen
    # the object around them and decode it as a document.
    prefix = b'{"traceEvents":'
    tail = prefix + bytes(pending)
    doc = _decode_doc(path, tail, consumed - len(prefix) - 1)
    parts.add_events(doc.traceEvents, tail, _RANGE_DOC_DECODER)
    doc.traceEvents = []
    parts.docs.append(doc)
    return parts


def _oversized(
    path: PathLike, pending: bytearray, consumed: int, in_events: bool, lim: Any
) -> NoReturn:
    """`pending` is past the value bound. A syntax error inside it (no event boundary could be
    confirmed because the JSON is broken) is reported as such, with its line; otherwise it is
    one value too large to hold."""
    prefix = b'{"traceEvents":' if in_events else b""
    offset = consumed - len(prefix) - 1 if in_events else 0
    try:
        _DECODER_ANY.decode(prefix + bytes(pending))
    except msgspec.DecodeError as e:
        if "truncated" not in str(e):
            _decode_doc(path, prefix + bytes(pending), offset)  # raises, naming the line
    raise too_large_value("JSON value", f"at byte {consumed} of the JSON text", lim, path)


def _decode_front(pending: bytearray, parts: _Parts) -> int:
    """Decode the complete events at the front of `pending`; return how many bytes they used."""
    lo = max(1, len(pending) - _CUT_WINDOW)
    cands = [m.start() + 1 for m in _CUT.finditer(pending, lo)]
    if not cands and lo > 1:
        cands = [m.start() + 1 for m in _CUT.finditer(pending, 1)]
    for end in reversed(cands[-3:]):
        saved = pending[end]
        pending[end] = 0x5D  # "]"
        with memoryview(pending) as whole, whole[: end + 1] as raw:
            events = _decode_batch(raw)
            if events is not None:
                parts.add_events(events, raw, _RANGE_DECODER)
        pending[end] = saved
        if events is not None:
            return pending.find(b"{", end) - 1  # up to the next event, comma skipped
    return 0


def _decode_batch(raw: memoryview) -> list[Any] | None:
    """The events of one batch; None when the cut was not between two top-level events."""
    try:
        events: list[Any] = _BATCH_DECODER.decode(raw)
        return events
    except msgspec.ValidationError:
        # A phase outside the Chrome trace spec (or none), `"args": null`, or a cut that is not
        # between top-level events: decode without the tag (None if that fails too).
        try:
            events = _BATCH_DECODER_ANY.decode(raw)
            return events
        except (msgspec.ValidationError, msgspec.DecodeError):
            return None
    except msgspec.DecodeError:
        return None


def _decode_doc(path: PathLike, text: bytes, file_offset: int) -> Any:
    """Decode a whole-document text; `file_offset` maps its byte 0 to the file for errors."""
    if not text.strip():
        raise MalformedInput("empty file", path=path)
    try:
        try:
            return _DECODER.decode(text)
        except msgspec.ValidationError:  # see _decode_batch
            return _DECODER_ANY.decode(text)
    except msgspec.ValidationError as e:  # a subclass of DecodeError: first
        raise MalformedInput(
            f"not a Kineto trace: expected an object with a traceEvents array ({e})", path=path
        ) from None
    except msgspec.DecodeError as e:
        msg, line = str(e), None
        m = _BYTE_POS.search(msg)
        if m:  # the decoder counts in this text; report the file's (decompressed) offset
            pos = max(file_offset + int(m.group(1)), 0)
            line = _line_at(path, pos)
            msg = _BYTE_POS.sub(f"(byte {pos} of the JSON text)", msg)
        raise MalformedInput(f"not valid JSON ({msg})", path=path, line=line) from None


def _line_at(path: PathLike, offset: int) -> int:
    """1-based line of a byte offset of the (decompressed) file; errors only, so it re-reads."""
    lines, seen = 1, 0
    for chunk in _chunks(path):
        if seen + len(chunk) >= offset:
            return lines + chunk.count(b"\n", 0, max(offset - seen, 0))
        lines += chunk.count(b"\n")
        seen += len(chunk)
    return lines


# --- events -> frames ---------------------------------------------------------------------------


def _us_to_ns(col: str) -> pl.Expr:
    """Decimal µs text ('1712195495505583.123', '4.928', '7') -> ns as Decimal(38, 0), exactly.

    Polars parses the text straight into a 3-digit fixed-point decimal (never through float64);
    finer digits round half to even. Non-numeric values become null (`_check_times` names
    them). The result stays a 38-digit decimal so that adding the base time and the duration
    cannot wrap around; `_ns_int` casts to int64 last.
    """
    return pl.col(col).cast(pl.Decimal(38, 3), strict=False) * 1000


def _ns_int(expr: pl.Expr) -> pl.Expr:
    """Decimal ns -> int64; null where it does not fit (`_check_times` reports those)."""
    return expr.cast(pl.Int64, strict=False)


def _check_times(df: pl.DataFrame, table: str, path: PathLike) -> None:
    """Every event has a `ts` that is a number of µs fitting int64 ns, and its `dur` (when it
    has one) too; a complete event without `dur` is kept with a null end and a warning.

    Chrome trace events always carry `ts`, and Kineto always writes `dur` on complete events:
    anything else is a damaged or hand-edited trace, named here rather than turned into nulls.
    """
    bad = df.filter(
        pl.col("ts").is_null()
        | pl.col("start_ns").is_null()
        | (pl.col("dur").is_not_null() & pl.col("end_ns").is_null())
    )
    if bad.height:
        e = bad.row(0, named=True)
        if e["ts"] is None:
            why = "has no ts"
        elif e["start_ns"] is None:
            why = f"has ts {e['ts']!r}, not a time in µs that fits int64 ns"
        else:
            why = f"has dur {e['dur']!r}, not a duration in µs that fits int64 ns"
        more = f" ({bad.height} such events)" if bad.height > 1 else ""
        raise MalformedInput(f"event {e['name']!r} {why}{more}", path=path, table=table)
    no_dur = df["dur"].null_count()
    if "ph" in df.columns:  # instant events have no duration by definition
        no_dur = df.filter(pl.col("ph") == "X")["dur"].null_count()
    if no_dur:
        warn(f"{path}: {table}: {no_dur} complete event(s) without dur: end and duration null")


def _text(values: list[Any], name: str) -> pl.Series:
    """ts/dur as text: str from `float_hook`, int for integer literals (older traces)."""
    try:
        return pl.Series(name, values, dtype=pl.String)
    except TypeError:
        return pl.Series(name, values, dtype=pl.String, strict=False)


def _col(events: Any, attr: str) -> list[Any]:
    return list(map(operator.attrgetter(attr), events))


def _ints(events: Any, attr: str, name: str | None = None) -> pl.Series:
    """Int64 column; strings ('Spans', '0x0', 'stream 7') and other non-integers become null."""
    return pl.Series(name or attr, _col(events, attr), dtype=pl.Int64, strict=False)


def _or(a: pl.Series, b: Callable[[], pl.Series]) -> pl.Series:
    """`a`, its nulls filled from `b()`; `b` is built only when `a` has nulls (a free check)."""
    return a.fill_null(b()) if a.null_count() else a


def _strs(events: Any, attr: str, name: str | None = None) -> pl.Series:
    return pl.Series(name or attr, _col(events, attr), dtype=pl.String, strict=False)


def _split(events: list[Any]) -> dict[str, list[Any]]:
    """Events of one batch grouped by the table they feed (in file order)."""
    if events and isinstance(events[0], _AnyEvent):
        return _split_untagged(events)
    cats = _col(events, "cat")
    try:
        rmap = {c: _ROLE_CODE.get(c.lower()) for c in set(cats) if isinstance(c, str)}
    except TypeError:  # an unhashable category (a list…): not Kineto, take the slow path
        return _split_untagged(events)
    # Skipped phases have cat None and map to None. C-level map to small codes, then columnar
    # grouping and a C-level gather per table.
    codes = pl.Series("role", list(map(rmap.get, cats)), dtype=pl.Int8)
    out: dict[str, list[Any]] = {}
    for code in codes.drop_nulls().unique().to_list():
        idx = (codes == code).arg_true().to_list()
        sub = [events[idx[0]]] if len(idx) == 1 else list(operator.itemgetter(*idx)(events))
        out[_ROLE_NAMES[code]] = sub
    return out


def _split_untagged(events: list[Any]) -> dict[str, list[Any]]:
    """`_split` for events decoded without the phase tag (a phase outside the Chrome spec)."""
    out: dict[str, list[Any]] = {}
    for e in events:
        c = e.cat if isinstance(e.cat, str) else None
        if e.ph == "X":
            role = _ROLE.get(c.lower()) if c is not None else None
        elif e.ph in ("i", "I"):
            role = "markers"
        else:
            role = None
        if role is not None:
            out.setdefault(role, []).append(e)
    return out


def _args(sub: list[Any]) -> list[Any]:
    args = _col(sub, "args")
    if isinstance(sub[0], _AnyEvent) and None in args:  # tagged events never hold None
        args = [a if a is not None else _NO_ARGS for a in args]
    return args


def _times(sub: list[Any]) -> list[pl.Series]:
    # converted to ns once per table, after the batches are concatenated (read_kineto_json)
    return [_text(_col(sub, "ts"), "ts"), _text(_col(sub, "dur"), "dur")]


def _gpu_ids(sub: list[Any], args: list[Any]) -> list[pl.Series]:
    # formats.md §5: GPU events use pid = device and tid = stream; args say it too when present
    # (old traces write tid "stream 7", a string, so args come first).
    return [
        _or(_ints(args, "device"), lambda: _ints(sub, "pid")).alias("device_id"),
        _ints(args, "context", "context_id"),
        _or(_ints(args, "stream"), lambda: _ints(sub, "tid")).alias("stream_id"),
        _ints(args, "correlation", "correlation_id"),
    ]


def _kernels(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    dims = []
    for g in ("grid", "block"):
        xyz = [v if type(v) is list and len(v) == 3 else _NO_DIM for v in _col(args, g)]
        for i, x in enumerate("xyz"):
            col = list(map(operator.itemgetter(i), xyz))
            dims.append(pl.Series(f"{g}_{x}", col, dtype=pl.Int64, strict=False))
    return pl.DataFrame(
        [
            *_gpu_ids(sub, args),
            _strs(sub, "name"),
            *_times(sub),
            *dims,
            _ints(args, "registers", "registers_per_thread"),
            _ints(args, "smem", "total_smem_bytes"),
        ]
    )


_NO_DIM = (None, None, None)


def _memcpy(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    return pl.DataFrame(
        [
            _strs(sub, "cat"),
            _strs(sub, "name"),
            *_gpu_ids(sub, args),
            _ints(args, "bytes", "size_bytes"),
            *_times(sub),
        ]
    )


def _finish_memcpy(df: pl.DataFrame) -> pl.DataFrame:
    # "Memcpy HtoD (Pageable -> Device)", "Memset (Device)". Plain string kernels, not regexes:
    # polars' regex engine costs ~4 MB of RSS the first time a process uses it.
    is_set = pl.col("cat").str.to_lowercase().is_in(_MEMSET)
    cp = pl.col("name").str.strip_prefix("Memcpy ").str.split_exact(" (", 1)
    ends = cp.struct.field("field_1").str.strip_suffix(")").str.split_exact(" -> ", 1)
    st = pl.col("name").str.strip_prefix("Memset (").str.strip_suffix(")")
    return df.select(
        "device_id",
        "context_id",
        "stream_id",
        "correlation_id",
        pl.when(is_set).then(pl.lit("memset")).otherwise(cp.struct.field("field_0")).alias("kind"),
        pl.when(is_set).then(None).otherwise(ends.struct.field("field_0")).alias("src_kind"),
        pl.when(is_set)
        .then(pl.when(pl.col("name").str.starts_with("Memset (")).then(st))
        .otherwise(ends.struct.field("field_1"))
        .alias("dst_kind"),
        "size_bytes",
        *_TIMES,
    )


def _api_calls(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    return pl.DataFrame(
        [
            _ints(sub, "pid", "process_id"),
            _ints(sub, "tid", "thread_id"),
            _ints(args, "correlation", "correlation_id"),
            _strs(sub, "cat", "api"),
            _strs(sub, "name"),
            # ROCm writes the HIP API id as `cid`
            _or(_ints(args, "cbid"), lambda: _ints(args, "cid")).alias("callback_id"),
            *_times(sub),
        ]
    )


def _finish_api_calls(df: pl.DataFrame) -> pl.DataFrame:
    # names are plain (cudaLaunchKernel, cuLaunchKernel, hipMemcpyWithStream): no nsys-style
    # `_v7000` suffix to strip
    driver = pl.col("api").str.to_lowercase() == "cuda_driver"
    api = pl.when(driver).then(pl.lit("driver")).otherwise(pl.lit("runtime"))
    return df.with_columns(api.alias("api"))


def _ops(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    return pl.DataFrame(
        [
            _ints(sub, "pid", "process_id"),
            _ints(sub, "tid", "thread_id"),
            _strs(sub, "name"),
            _strs(sub, "cat", "category"),
            _or(_ints(args, "external_id"), lambda: _ints(args, "external_id_old")),
            *_times(sub),
        ]
    )


def _markers(sub: list[Any]) -> pl.DataFrame:
    args = _args(sub)
    return pl.DataFrame(
        [
            _strs(sub, "ph"),
            _strs(sub, "cat", "category"),
            _ints(sub, "pid"),
            _ints(sub, "tid"),
            _ints(args, "device"),
            _ints(args, "stream"),
            _strs(sub, "name"),
            *_times(sub),
        ]
    )


def _finish_markers(df: pl.DataFrame) -> pl.DataFrame:
    on_gpu = pl.col("category").str.to_lowercase() == "gpu_user_annotation"
    instant = pl.col("ph") != "X"
    df = df.with_columns(pl.col("category").replace(_INSTANT, None))
    return df.select(
        pl.when(on_gpu).then(None).otherwise(pl.col("pid")).alias("process_id"),
        pl.when(on_gpu).then(None).otherwise(pl.col("tid")).alias("thread_id"),
        pl.when(on_gpu).then(pl.coalesce("device", "pid")).alias("device_id"),
        pl.when(on_gpu).then(pl.coalesce("stream", "tid")).alias("stream_id"),
        "name",
        "category",
        "start_ns",
        pl.when(~instant).then(pl.col("end_ns")).alias("end_ns"),
        pl.when(~instant).then(pl.col("duration_ns")).alias("duration_ns"),
    )


def _finish_kernels(df: pl.DataFrame) -> pl.DataFrame:
    # launch index in start order (the frame is sorted by then)
    return df.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("kernel_id"))


_TIMES = ("start_ns", "end_ns", "duration_ns")
# Per batch: raw columns only (no lazy queries: each costs ~0.3 ms of fixed overhead). Derived
# columns (regexes, mappings) are computed once per table after the batches are concatenated.
_BUILDERS: dict[str, Callable[[list[Any]], pl.DataFrame]] = {
    "kernels": _kernels,
    "memcpy": _memcpy,
    "api_calls": _api_calls,
    "ops": _ops,
    "markers": _markers,
}
_FINISH: dict[str, Callable[[pl.DataFrame], pl.DataFrame]] = {
    "kernels": _finish_kernels,
    "memcpy": _finish_memcpy,
    "api_calls": _finish_api_calls,
    "markers": _finish_markers,
}


@reader_entry("kineto_json")
def read_kineto_json(path: PathLike) -> Tables:
    """Read a Kineto Chrome trace (`.json` or `.json.gz`) into normalized tables."""
    try:
        parts = _stream(path)
    except RecursionError:
        # msgspec decodes nested values recursively: a hostile or broken file nesting arrays or
        # objects ~10,000 deep exhausts the stack. No Kineto trace nests more than a few levels.
        raise MalformedInput(
            "JSON nested too deeply (more levels than the decoder's recursion limit)", path=path
        ) from None
    except UnicodeDecodeError as e:  # msgspec checks the UTF-8 of the strings it decodes
        raise MalformedInput(
            f"not valid JSON text: bytes that are not UTF-8 ({e.reason}) in a string", path=path
        ) from None
    head: dict[str, Any] = {}
    for d in parts.docs:
        for key in ("deviceProperties", "distributedInfo", "baseTimeNanoseconds"):
            if getattr(d, key) is not None:
                head[key] = getattr(d, key)
    base = head.get("baseTimeNanoseconds")
    if base is not None and (type(base) is not int or not 0 <= base < 2**63):
        # float_hook=str hands a float over as its text: say what the file holds
        raise MalformedInput(
            f"baseTimeNanoseconds is {base!r}, not an integer number of ns since the epoch",
            path=path,
        )
    base_ns = base or 0
    dist = head.get("distributedInfo")
    rank = dist.rank if dist is not None and isinstance(dist.rank, int) else None
    world = dist.world_size if dist is not None and isinstance(dist.world_size, int) else None

    def table(name: str) -> pl.DataFrame | None:
        frames = parts.frames[name]
        if not frames:
            return None
        df = pl.concat(frames, how="vertical_relaxed")
        frames.clear()
        # relative-to-base traces become epoch ns here (time_origin_epoch_ns = 0)
        start, dur = _us_to_ns("ts") + base_ns, _us_to_ns("dur")
        df = df.with_columns(
            start_ns=_ns_int(start), duration_ns=_ns_int(dur), end_ns=_ns_int(start + dur)
        )
        _check_times(df, name, path)
        df = df.drop("ts", "dur")
        df = df.sort("start_ns", maintain_order=True, nulls_last=True)
        finish = _FINISH.get(name)
        return df if finish is None else finish(df)

    kernels = table("kernels")
    ops, markers = table("ops"), table("markers")
    sources = pl.DataFrame(
        {
            "tool": [TOOL],
            "tool_version": [None],
            "time_origin_epoch_ns": [0],
            "rank": [rank],
            "world_size": [world],
        },
        schema_overrides={"tool_version": pl.String, "rank": pl.Int64, "world_size": pl.Int64},
    )
    frames = {
        "sources": sources,
        "devices": _devices(head.get("deviceProperties")),
        "kernels": kernels,
        "memcpy": table("memcpy"),
        "api_calls": table("api_calls"),
        "ops": ops,
        "markers": markers,
        "iterations": _iterations(ops, markers, rank),
        "kernel_metrics": _range_rows(parts.ranges) if parts.ranges else None,
    }
    return Tables.build(**{k: v for k, v in frames.items() if v is not None})


def _iterations(
    ops: pl.DataFrame | None, markers: pl.DataFrame | None, rank: int | None
) -> pl.DataFrame | None:
    """`ProfilerStep#N` host ranges (user_annotation; a cpu_op in older PyTorch)."""
    host = [
        f.filter(pl.col("category").str.to_lowercase().is_in(("user_annotation", *_OPS)))
        for f in (markers, ops)
        if f is not None
    ]
    if not host:
        return None
    steps = pl.concat([f.select("name", *_TIMES) for f in host]).filter(
        pl.col("end_ns").is_not_null()
    )
    number = pl.col("name").str.strip_prefix(_STEP).cast(pl.Int64, strict=False)
    steps = steps.with_columns(
        iteration=pl.when(pl.col("name").str.starts_with(_STEP)).then(number)
    )
    steps = steps.filter(pl.col("iteration").is_not_null()).sort("start_ns", maintain_order=True)
    # A step recorded both as an annotation and as a cpu_op: keep one.
    steps = steps.unique("iteration", keep="first", maintain_order=True)
    return steps.sort("iteration").select(
        pl.lit(rank, dtype=pl.Int64).alias("rank"), "iteration", *_TIMES
    )


def _devices(props: list[_Device] | None) -> pl.DataFrame | None:
    if not props:
        return None
    rows = [
        (p.id, p.name, p.totalGlobalMem, p.computeMajor, p.computeMinor, p.numSms) for p in props
    ]
    ids, names, mem, major, minor, sms = zip(*rows, strict=True)
    df = pl.DataFrame(
        [
            pl.Series("device_id", ids, dtype=pl.Int64, strict=False),
            pl.Series("name", names, dtype=pl.String, strict=False),
            pl.Series("memory_bytes", mem, dtype=pl.Int64, strict=False),
            pl.Series("major", major, dtype=pl.Int64, strict=False),
            pl.Series("minor", minor, dtype=pl.Int64, strict=False),
            pl.Series("sm_count", sms, dtype=pl.Int64, strict=False),
        ]
    )
    name = pl.col("name").str.to_lowercase()
    vendor = (
        pl.when(name.str.contains_any(["amd ", "radeon", "instinct"]))
        .then(pl.lit("AMD"))
        .when(name.str.contains_any(["nvidia", "tesla", "quadro", "geforce"]))
        .then(pl.lit("NVIDIA"))
        .otherwise(None)
    )
    return df.select(
        "device_id",
        "name",
        pl.format("{}.{}", "major", "minor").alias("compute_capability"),
        "sm_count",
        "memory_bytes",
        vendor.alias("vendor"),
    )


def _range_rows(ranges: list[Any]) -> pl.DataFrame:
    rows = [
        (i, e.pid, e.name, k, v)
        for i, e in enumerate(ranges)
        if isinstance(e.args, dict)
        for k, v in e.args.items()
    ]
    kid, pid, name, metric, value = zip(*rows, strict=True) if rows else ((),) * 5
    return pl.DataFrame(
        [
            pl.Series("kernel_id", kid, dtype=pl.Int64),
            pl.Series("device_id", pid, dtype=pl.Int64, strict=False),
            pl.Series("name", name, dtype=pl.String, strict=False),
            pl.Series("metric_name", metric, dtype=pl.String),
            pl.Series("value", value, dtype=pl.Float64, strict=False),
        ]
    )
