#!/usr/bin/env python3
"""List test functions that cannot fail: no assertion at all, or assertions only inside loops.

    python hack/weak_tests.py [PATH...]      (default: tests e2e; `make lint` runs it)

A test function (``def test_*``) counts as asserting when, outside any loop, it has an ``assert``
statement, a ``pytest.raises``/``pytest.warns`` block, or a call of something that fails the test
by itself: ``pytest.fail``, ``wait_for`` (tests/support.py: it raises when the condition never
holds) or any function whose name starts with ``assert`` or ``check_``; a call of a helper defined
in the same module counts when that helper asserts the same way. An assertion inside a ``for`` or
``while`` loop or a comprehension does not count on its own: over an empty list it never runs
(a ``for`` over a literal with items, or over ``range(N)``, always runs and counts). Write
``assert items`` (or ``assert len(items) == N``) before the loop. A hypothesis ``@given`` test
asserts at least that the code under test never raises, on inputs it generates: it passes.

Prints one line per weak test (path:line: name: why) and exits 1 when there is any.
"""

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

#: Calls that fail the test when what they wait for or check does not hold.
FAILING_CALLS = frozenset({"fail", "raises", "warns", "wait_for", "deprecated_call"})
FAILING_PREFIXES = ("assert", "check_")
LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _never_empty(loop: ast.AST) -> bool:
    """A ``for`` over a literal with items (``for name in ("a", "b")``) or ``range(N)``, N > 0, always runs."""
    if not isinstance(loop, ast.For | ast.AsyncFor):
        return False
    items = loop.iter
    if isinstance(items, ast.Tuple | ast.List | ast.Set) and items.elts:
        return not any(isinstance(item, ast.Starred) for item in items.elts)
    if isinstance(items, ast.Dict) and items.keys:
        return True
    if (isinstance(items, ast.Call) and _called_name(items) == "range" and len(items.args) == 1
            and isinstance(items.args[0], ast.Constant) and isinstance(items.args[0].value, int)):
        return items.args[0].value > 0
    return False


def _called_name(call: ast.Call) -> str:
    function = call.func
    if isinstance(function, ast.Attribute):
        return function.attr
    if isinstance(function, ast.Name):
        return function.id
    return ""


class _Finder(ast.NodeVisitor):
    """Walks one function body: assertions outside loops, inside loops, and same-module helpers called."""

    def __init__(self) -> None:
        self.depth = 0
        self.outside = 0
        self.inside = 0
        self.calls: list[tuple[str, bool]] = []  # (name, inside a loop)

    def _note(self) -> None:
        if self.depth:
            self.inside += 1
        else:
            self.outside += 1

    def generic_visit(self, node: ast.AST) -> None:
        if isinstance(node, LOOPS) and not _never_empty(node):
            self.depth += 1
            super().generic_visit(node)
            self.depth -= 1
            return
        if isinstance(node, ast.Assert):
            self._note()
        elif isinstance(node, ast.Call):
            name = _called_name(node)
            if name in FAILING_CALLS or name.startswith(FAILING_PREFIXES):
                self._note()
            self.calls.append((name, bool(self.depth)))
        super().generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:  # a nested function asserts only when called
        return

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]


def _scan(function: ast.FunctionDef | ast.AsyncFunctionDef) -> _Finder:
    finder = _Finder()
    for statement in function.body:
        finder.visit(statement)
    return finder


def _helpers(tree: ast.Module) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not node.name.startswith("test_"):
            found.setdefault(node.name, node)
    return found


def _asserting_helpers(helpers: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]) -> set[str]:
    """Helpers that assert outside loops, directly or through another such helper (to a fixed point)."""
    scans = {name: _scan(function) for name, function in helpers.items()}
    asserting = {name for name, scan in scans.items() if scan.outside}
    while True:
        more = {name for name, scan in scans.items() if name not in asserting
                and any(called in asserting and not looped for called, looped in scan.calls)}
        if not more:
            return asserting
        asserting |= more


def _is_property_test(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(decorator, ast.Call) and _called_name(decorator) == "given"
               for decorator in function.decorator_list)


def weak_tests(path: Path) -> Iterator[tuple[int, str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    helpers = _helpers(tree)
    asserting = _asserting_helpers(helpers)
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or not node.name.startswith("test_"):
            continue
        if _is_property_test(node):
            continue  # hypothesis: the property is (at least) that the code under test does not raise
        scan = _scan(node)
        if scan.outside or any(name in asserting and not looped for name, looped in scan.calls):
            continue
        inside = scan.inside or any(name in asserting for name, _ in scan.calls)
        yield node.lineno, node.name, ("assertions only inside loops (an empty loop asserts nothing)" if inside
                                       else "no assertion")


def main(argv: list[str]) -> int:
    roots = [Path(arg) for arg in argv] or [Path("tests"), Path("e2e")]
    files = sorted(file for root in roots for file in ([root] if root.is_file() else root.rglob("test_*.py")))
    found = 0
    for file in files:
        for line, name, why in weak_tests(file):
            print(f"{file}:{line}: {name}: {why}")
            found += 1
    if found:
        print(f"{found} test function(s) that cannot fail as written: add an assertion outside any loop "
              "(assert the list is not empty, or its exact length, before looping over it).", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
