"""Each fixture of the suite's pytest plugins has one definition.

Plugins named in ``pytest_plugins`` share one fixture namespace for the whole session and the
plugin registered last wins. Two plugins once both defined ``k8s``: in a full run the controller
tests got the DRA tests' client, which does not clear the cluster, and a Node another test left
behind got ERIs from the next controller.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _declared_plugins() -> set[Path]:
    """Every module some test file names in its ``pytest_plugins``."""
    plugins: set[Path] = set()
    for path in TESTS.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
            ):
                for name in ast.literal_eval(node.value):
                    plugins.add(TESTS.parent / (name.replace(".", "/") + ".py"))
    return plugins


def _fixture_names(path: Path) -> list[str]:
    names = []
    for node in ast.parse(path.read_text()).body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for deco in node.decorator_list:
            call = deco if isinstance(deco, ast.Call) else None
            target = call.func if call else deco
            if ast.unparse(target) in {"pytest.fixture", "fixture"}:
                named = [k.value for k in call.keywords if k.arg == "name"] if call else []
                names.append(ast.literal_eval(named[0]) if named else node.name)
    return names


def test_no_two_plugins_define_the_same_fixture() -> None:
    plugins = _declared_plugins()
    assert len(plugins) >= 5, sorted(map(str, plugins))
    defined: dict[str, list[str]] = defaultdict(list)
    for path in sorted(plugins):
        for name in _fixture_names(path):
            defined[name].append(path.name)
    twice = {name: where for name, where in defined.items() if len(where) > 1}
    assert not twice, f"fixtures defined by more than one plugin: {twice}"
