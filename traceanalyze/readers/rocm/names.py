"""Kernel names as the ROCm profilers write them: rocprof v1 and the code-object symbol keep the
HSA kernel descriptor's `.kd` suffix (`__amd_rocclr_fillBufferAligned.kd`, `foo(int) [clone
.kd]`), results.db keeps the CSV's double quotes (`"laplacian_kernel"`)."""

from __future__ import annotations

import re

import polars as pl

# `[clone .kd]` is what the demangler makes of a `.kd` suffix on a mangled name.
_KD = re.compile(r"(?:\s*\[clone \.kd\]|\.kd)$")


def clean_name(name: str) -> str:
    """One kernel name without its quotes and `.kd` descriptor suffix."""
    n = name.strip()
    if len(n) >= 2 and n[0] == n[-1] == '"':
        n = n[1:-1]
    return _KD.sub("", n)


def clean_names(col: pl.Expr) -> pl.Expr:
    """`clean_name` over a column, vectorized."""
    return (
        col.str.strip_chars()
        .str.replace(r'^"(.*)"$', "$1")
        .str.replace(r"(?:\s*\[clone \.kd\]|\.kd)$", "")
    )


def base_name(name: str) -> str:
    """The name without return type, scope, parameter list and template arguments
    (`void at::native::(anonymous namespace)::f<int>(int*)` -> `f`): what the other readers
    call `short_name`."""
    n = name.replace("(anonymous namespace)", "{anon}")
    cut = min((i for i in (n.find("("), n.find("<")) if i >= 0), default=len(n))
    n = n[:cut].strip()
    n = n.rsplit(" ", 1)[-1]
    return n.rsplit("::", 1)[-1] or name


def with_short_names(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with `short_name` = `base_name(name)`, computed once per distinct name."""
    names = df["name"].unique().drop_nulls().to_list()
    mapping = {n: base_name(n) for n in names}
    short = pl.col("name").replace_strict(mapping, default=None, return_dtype=pl.String)
    return df.with_columns(short.alias("short_name"))
