"""Find assertions that bound a measured duration from above in test code.

Such an assertion (a measured time compared below a constant, a chain with an upper bound, an
approximate equality; examples in tests/data/duration_asserts/) passes on an idle machine and
fails on a loaded one: a 2-core CI machine running the suite's own servers is never idle.
Tests assert order, counts and outcomes and wait on conditions with generous deadlines; speed
is measured in ``bench/``. ``tests/unit/test_no_duration_assertions.py`` runs this over ``tests/``.

What counts as measured: a value computed from a clock call (``time.monotonic()``,
``time.time()``, ``time.perf_counter()``, their ``_ns`` forms, ``loop.time()``) or from a name
or attribute that holds one (``t0 = time.monotonic()``, ``self.starts.append(time.monotonic())``
marks every ``.starts`` in the module), or returned by a function of the module (its calls are
measured). Allowed, because load cannot break them:

* both sides measured (``a.cancels[0] < b.starts[0]``): an order of events;
* a lower bound ("not before the lease ran out"): load only delays, so it holds.

Readings taken outside the file (a fake's ``at`` stamps) are known by their names: ``at``,
``*_at``, ``elapsed``, ``took``, ``waited``, ``gap``/``gaps``, ``latency``, ``arrivals``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

_CLOCKS = {"monotonic", "monotonic_ns", "time", "time_ns", "perf_counter", "perf_counter_ns"}
# Names that hold times by the suite's own conventions, for readings taken elsewhere (a fake's
# ``.at`` or ``sent_at`` stamps, a helper's ``arrivals``): ``at``, ``*_at``, ``elapsed``, ...
_TIME_NAME = re.compile(r"(^|_)(at|elapsed|took|waited|gaps?|latency|arrivals)$")


@dataclass(frozen=True)
class Finding:
    """One assertion that bounds a measured duration from above."""

    path: Path
    line: int
    source: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.source}"


def _is_clock_call(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr in _CLOCKS
    return isinstance(func, ast.Name) and func.id in _CLOCKS - {"time"}


def _key(node: ast.AST) -> str | None:
    """The name a value is kept under: ``t0`` for a name, ``starts`` for ``self.starts``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return "." + node.attr
    if isinstance(node, ast.Subscript):
        return _key(node.value)
    return None


class _Taint(ast.NodeVisitor):
    """Collects the names and attributes that hold clock readings, to a fixed point."""

    def __init__(self) -> None:
        self.keys: set[str] = set()

    def measured(self, node: ast.AST) -> bool:
        for sub in ast.walk(node):
            if _is_clock_call(sub):
                return True
            key = _key(sub) if isinstance(sub, ast.Name | ast.Attribute) else None
            if key is not None and (key in self.keys or _TIME_NAME.search(key.lstrip("."))):
                return True
            if isinstance(sub, ast.Call) and _key(sub.func) is not None:
                name = (_key(sub.func) or "").lstrip(".")
                if _TIME_NAME.search(name):
                    return True
        return False

    def _mark(self, target: ast.AST) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._mark(element)
            return
        key = _key(target)
        if key is not None:
            self.keys.add(key)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.measured(node.value):
            for target in node.targets:
                self._mark(target)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None and self.measured(node.value):
            self._mark(node.target)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if self.measured(node.value):
            self._mark(node.target)
        self.generic_visit(node)

    def _mark_loop(self, target: ast.AST, iterable: ast.AST) -> None:
        """``for a, b in zip(xs, ys)`` marks ``a`` only if ``xs`` is measured, and so on."""
        if (
            isinstance(iterable, ast.Call)
            and _key(iterable.func) == "zip"
            and isinstance(target, ast.Tuple)
            and len(target.elts) == len(iterable.args)
        ):
            for element, source in zip(target.elts, iterable.args, strict=True):
                self._mark_loop(element, source)
        elif self.measured(iterable):
            self._mark(target)

    def visit_For(self, node: ast.For) -> None:
        self._mark_loop(node.target, node.iter)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._mark_loop(node.target, node.iter)
        self.generic_visit(node)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """A function that returns a measured value makes its calls measured."""
        returns = [n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value]
        if any(self.measured(r.value) for r in returns if r.value is not None):
            self.keys.add(node.name)
        self.generic_visit(node)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr in {"append", "add", "extend"}
            and any(self.measured(arg) for arg in node.args)
        ):
            self._mark(func.value)
        self.generic_visit(node)


def _is_approx(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "approx"
    )


def _upper_bound(compare: ast.Compare, taint: _Taint) -> bool:
    """True when one link of the chain caps a measured value with an unmeasured one."""
    operands = [compare.left, *compare.comparators]
    for op, left, right in zip(compare.ops, operands, operands[1:], strict=False):
        left_measured, right_measured = taint.measured(left), taint.measured(right)
        if left_measured == right_measured:
            continue  # an order of two events, or nothing measured
        if isinstance(op, ast.Lt | ast.LtE) and left_measured:
            return True
        if isinstance(op, ast.Gt | ast.GtE) and right_measured:
            return True
        if isinstance(op, ast.Eq | ast.NotEq) and (_is_approx(left) or _is_approx(right)):
            return True
    return False


def find(path: Path) -> list[Finding]:
    """The duration assertions in one Python file."""
    source = path.read_text()
    tree = ast.parse(source, filename=str(path))
    taint = _Taint()
    while True:  # names derived from names derived from clocks: repeat until nothing new
        before = len(taint.keys)
        taint.visit(tree)
        if len(taint.keys) == before:
            break
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        if any(
            isinstance(sub, ast.Compare) and _upper_bound(sub, taint) for sub in ast.walk(node.test)
        ):
            text = ast.get_source_segment(source, node) or ""
            found.append(Finding(path, node.lineno, text.splitlines()[0]))
    return found


def find_all(root: Path) -> list[Finding]:
    """The duration assertions in every Python file below ``root``."""
    return [finding for path in sorted(root.rglob("*.py")) for finding in find(path)]
