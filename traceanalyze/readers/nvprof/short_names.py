"""Short kernel names: the base function name of a demangled C++ name (nvprof_sqlite's
`short_name`; nsys stores its own `shortName`)."""

from __future__ import annotations

# Operator spellings after the `operator` keyword, longest first so `<<=` wins over `<<` and `<`.
_OPERATORS = sorted(
    (
        "()", "[]", "<=>", "<<=", ">>=", "->*", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||",
        "++", "--", "->", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "+", "-", "*", "/",
        "%", "^", "&", "|", "~", "!", "=", "<", ">", ",",
    ),
    key=len,
    reverse=True,
)  # fmt: skip
_OPEN, _CLOSE = "<([{", ">)]}"


def _is_ident(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _matching(s: str, i: int) -> int:
    """Index just past the bracket group that opens at `s[i]` (any of <([{ nesting)."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] in _OPEN:
            depth += 1
        elif s[j] in _CLOSE:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def _operator_end(s: str, i: int) -> int:
    """`s[i:]` follows the keyword `operator`: the index where the operator's name ends."""
    j = i
    while j < len(s) and s[j] == " ":
        j += 1
    for word in ("new", "delete"):
        if s.startswith(word, j) and not (j + len(word) < len(s) and _is_ident(s[j + len(word)])):
            j += len(word)
            return j + 2 if s.startswith("[]", j) else j
    if s.startswith('""', j):  # user-defined literal: operator"" _x
        j += 2
        while j < len(s) and (s[j] == " " or _is_ident(s[j])):
            j += 1
        return j
    for op in _OPERATORS:
        if s.startswith(op, j):
            return j + len(op)
    # conversion operator (`operator unsigned int`, `operator std::vector<int> const&`): the
    # type runs to the parameter list, the first '(' outside its template arguments
    while j < len(s) and s[j] != "(":
        j = _matching(s, j) if s[j] == "<" else j + 1
    return len(s[:j].rstrip())


def short_name(name: str) -> str:
    """Base function name of a demangled C++ name: no return type, namespaces or classes,
    template arguments or parameters. `void at::native::k<float>(float*)` → `k`,
    `void foo::operator()<int>(int)` → `operator()`, `std::ostream& operator<<(…)` →
    `operator<<`, `X::~X()` → `~X`, `f(int)::{lambda()#1}::operator()() const` → `operator()`.
    Plain C names come back unchanged. One left-to-right scan over the top level (brackets
    skipped as groups), applied once per distinct name."""
    s = name.replace("(anonymous namespace)", "{anonymous}")
    comp = 0  # where the current unqualified name starts
    op_end: int | None = None  # end of its name when it is an operator (its text has <, (, …)
    i = 0
    while i < len(s):
        ch = s[i]
        if (
            s.startswith("operator", i)
            and (i == 0 or not _is_ident(s[i - 1]))
            and not (i + 8 < len(s) and _is_ident(s[i + 8]))
        ):
            comp, op_end = i, _operator_end(s, i + 8)
            i = op_end
            # its template arguments, which the demangler sets off by a space after `<`, `<<`
            k = len(s) - len(s[i:].lstrip(" "))
            if s.startswith("<", k):
                i = _matching(s, k)
        elif ch == "(":
            # The parameter list, unless a local entity's scope follows (`f(int)::{lambda…}`,
            # `g() const::X`): then the name continues after the `::`.
            j = _matching(s, i)
            k = j
            while True:
                k += len(s[k:]) - len(s[k:].lstrip(" "))
                quals = next(
                    (q for q in ("const", "volatile", "&&", "&") if s.startswith(q, k)), ""
                )
                if not quals:
                    break
                k += len(quals)
            if not s.startswith("::", k):
                break
            comp, op_end, i = k + 2, None, k + 2
        elif ch in _OPEN:
            i = _matching(s, i)
        elif s.startswith("::", i):
            comp, op_end, i = i + 2, None, i + 2
        elif ch == " ":  # what came before was a return type (or a qualifier)
            comp, op_end, i = i + 1, None, i + 1
        else:
            i += 1
    if op_end is not None:
        return s[comp:op_end].strip()
    base = s[comp:i]
    cut = base.find("<")  # the function's own template arguments
    base = (base if cut < 0 else base[:cut]).strip()
    return base or name
