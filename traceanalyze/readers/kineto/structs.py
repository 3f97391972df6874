"""Kineto JSON: the msgspec types and decoders for events (only the fields the reader keeps), and
the categories it sorts them by."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import Struct, field

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
    # Kineto since early 2026 (CUDA >= 12) on graph kernels (formats.md section 10)
    graph_id: Any = field(default=None, name="graph id")
    graph_node_id: Any = field(default=None, name="graph node id")
    # the kernel a launch call names (ROCm's hipLaunchKernel, also during graph capture)
    kernel: Any = None


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


# The categories of complete events that Kineto writes (libkineto's ActivityType names, the
# pre-1.9 capitalised ones, and "Trace", the whole-trace span). Decoded as a Literal, such a
# category is the Literal's own string object, not a new one per event: ~2.5 ms less per read of
# the ResNet-50 trace (allocation, hashing for `_split`, freeing). A batch holding any other
# category fails this type and is decoded again with `Any` categories (see `_decode_batch`).
_KNOWN_CATS = (
    "kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime", "cuda_driver", "cpu_op",
    "python_function", "user_annotation", "gpu_user_annotation", "cpu_instant_event",
    "cuda_profiler_range", "Trace", "overhead", "cuda_sync", "external_correlation",
    "Kernel", "Runtime", "Memcpy", "Memset", "Operator", "mtia_runtime", "mtia_ccp_events",
    "glow_runtime", "hpu_op", "xpu_runtime", "collective_comm", "privateuse1_runtime",
    "privateuse1_driver", "gpu_pm_counter",
)  # fmt: skip


def _event_struct(ph: str, cat_type: Any = Any) -> type[Struct]:
    cls = msgspec.defstruct(
        f"_Event_{ph}",
        [
            # instants usually have no category: a sentinel default routes them to markers
            ("cat", cat_type, None if ph == "X" else _INSTANT),
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


# float_hook: untyped JSON floats arrive as their exact decimal text (see kineto_json's
# docstring). msgspec hands the hook the number's text as a str; `str.strip` returns that very
# object (a JSON number has no surrounding space), like `str` does, but it is a cheaper call than
# the type: 4 ms less per decode of the ResNet-50 trace's 91,000 ts/dur values.
_FLOAT_TEXT = str.strip
_TAGGED_UNION: Any = _TAGGED[0]
for _cls in _TAGGED[1:]:
    _TAGGED_UNION = _TAGGED_UNION | _cls
_DECODER = msgspec.json.Decoder(_doc_type(_TAGGED_UNION), float_hook=_FLOAT_TEXT)
_DECODER_ANY = msgspec.json.Decoder(_doc_type(_AnyEvent), float_hook=_FLOAT_TEXT)


class _RangeEvent(Struct, gc=False):
    cat: Any = None
    name: Any = None
    pid: Any = None
    args: Any = None


class _RangeDoc(Struct, gc=False):
    traceEvents: list[_RangeEvent]  # noqa: N815


_RANGE_DECODER = msgspec.json.Decoder(list[_RangeEvent])
_RANGE_DOC_DECODER = msgspec.json.Decoder(_RangeDoc)
_BATCH_DECODER = msgspec.json.Decoder(list[_TAGGED_UNION], float_hook=_FLOAT_TEXT)
_KNOWN_UNION: Any = _event_struct("X", Literal[_KNOWN_CATS] | None)
for _cls in _TAGGED[1:]:
    _KNOWN_UNION = _KNOWN_UNION | _cls
_BATCH_DECODER_KNOWN = msgspec.json.Decoder(list[_KNOWN_UNION], float_hook=_FLOAT_TEXT)
_BATCH_DECODER_ANY = msgspec.json.Decoder(list[_AnyEvent], float_hook=_FLOAT_TEXT)

_MEMSET = ("gpu_memset", "memset")
_OPS = ("cpu_op", "python_function", "operator")
_RANGE = "cuda_profiler_range"

_STEP = "ProfilerStep#"  # `ProfilerStep#<N>` host ranges

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
