"""CUPTI and Nsight Systems enum tables that both SQLite readers use, defined once.

The copy kinds are CUPTI's `CUpti_ActivityMemcpyKind` (`cupti_activity.h` of CUDA 13.0); nsys
2.x exports (no `ENUM_*` tables) use the same numbers plus 0 Unknown and three Unified kinds
(formats.md §3.2). Memory kinds differ: CUPTI counts from 1 (0 is UNKNOWN), nsys from 0 (7 is
Unknown), so each reader keeps its own numbering, both here.
"""

from __future__ import annotations

# CUpti_ActivityMemcpyKind (cupti_activity.h); 0 = UNKNOWN is a missing value, not a kind.
COPY_KINDS: dict[int, str] = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
# nsys schema 2.x (no ENUM_CUDA_MEMCPY_OPER table): CUPTI's numbering plus nsys's Unified kinds.
NSYS_COPY_KINDS_2X: dict[int, str | None] = {
    0: None,  # Unknown
    **COPY_KINDS,
    11: "Unified HtoD",
    12: "Unified DtoH",
    13: "Unified DtoD",
}
# CUpti_ActivityMemoryKind (cupti_activity.h); 0 = UNKNOWN is a missing value, not a kind.
MEMORY_KINDS: dict[int, str] = {
    1: "Pageable",
    2: "Pinned",
    3: "Device",
    4: "Array",
    5: "Managed",
    6: "Device Static",
    7: "Managed Static",
}
# nsys schema 2.x (no ENUM_CUDA_MEM_KIND table): the same names counted from 0, 7 Unknown.
NSYS_MEM_KINDS_2X: dict[int, str | None] = {
    **{k - 1: v for k, v in MEMORY_KINDS.items()},
    7: None,  # Unknown
}
