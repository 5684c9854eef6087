"""The toolkit's layout keeps the rules docs/architecture.md states (issue 23), read from the source with
``ast``: every import counts, a lazy one inside a function as much as one at the top of a module.

- no import circle between modules;
- no upward import: each part of ``changeflow`` has a rank (the command line on top, helpers at the
  bottom), and a module imports only from its own rank or below;
- moto's patches know nothing of the rest of the toolkit, and command groups do not import each other;
- no module over 500 lines, unless the allowlist below says why it is one cohesive thing;
- nothing that ships to Lambda (the layer, the functions) imports the toolkit;
- no module is loaded by its file path (such a module is out of the reader's sight: no rule above sees it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from conftest import ROOT

SRC = ROOT / "src"
PACKAGE = SRC / "changeflow"
DOC = ROOT / "docs" / "architecture.md"

# The parts of changeflow and their ranks: a module may import from its own rank or a lower one. A new
# part needs a rank here and a row in docs/architecture.md's package map (a test checks they agree).
RANKS = {
    "cli": 6, "__main__": 6, "commands": 6,       # the command line
    "demo": 5, "checks": 5, "capacity": 5,        # built on the parts below: the tour, checks, capacity,
    "cost": 5,                                    # and the cost model
    "local": 4,                                   # the embedded stack (its server mounts the console)
    "console": 3, "transfer": 3,                  # the audit console; import and export, for any stack
    "audit": 2, "feed": 2,                        # verify, digests, repair; the feed's consumer (tail)
    "client": 1, "report": 1,                     # a stack's client, and rendering what it reads
    "common": 0,                                  # helpers under everything
}
MAX_LINES = 500
# Modules allowed over MAX_LINES, each with the reason it is one cohesive thing (none today).
LONG_MODULES: dict[str, str] = {}
# Modules that only what sits beside them may import (their package's own modules) and that import
# nothing else of changeflow.
SEALED = ["changeflow.local.moto_patches"]
# The command groups: each imports only the shared command modules, never another group.
COMMAND_SHARED = {"changeflow.commands.options", "changeflow.commands.output", "changeflow.commands.changes"}


def module_name(path: Path, root: Path = SRC) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: Path = PACKAGE, root: Path = SRC) -> dict[str, Path]:
    return {module_name(path, root): path for path in sorted(package.rglob("*.py"))}


def imports(path: Path, name: str, known: set[str]) -> set[str]:
    """Every changeflow module ``path`` imports (anywhere in it: module level, functions, TYPE_CHECKING).
    ``from package import name`` counts as an import of ``package.name`` when that is a module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            for alias in node.names:
                candidate = f"{target}.{alias.name}"
                found.add(candidate if candidate in known else target)
    edges = set()
    for target in found:
        while target and target not in known:  # ``import changeflow.local.server`` names a module;
            target = target.rpartition(".")[0]  # ``changeflow.client.Changeflow`` its module
        if target and target != name and (target == "changeflow" or target.startswith("changeflow.")):
            edges.add(target)
    return edges


MODULES = modules()
GRAPH = {name: imports(path, name, set(MODULES)) for name, path in MODULES.items()}


def part(name: str) -> str:
    return name.split(".")[1] if "." in name else "__init__"


def rank(name: str) -> int:
    return RANKS.get(part(name), 0 if name == "changeflow" else -1)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each a circle of imports."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# --- the reader sees every import --------------------------------------------------------------------
def test_the_import_reader_sees_lazy_relative_and_aliased_imports(tmp_path):
    # GIVEN a package whose modules import each other in every way Python allows
    package = tmp_path / "changeflow"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "low.py").write_text("X = 1\n")
    (package / "sub" / "deep.py").write_text("Y = 2\n")
    (package / "sub" / "lazy.py").write_text(
        "import typing\n"
        "if typing.TYPE_CHECKING:\n    from ..low import X\n"
        "def f():\n    from . import deep as d\n    import changeflow.low\n    return d\n")
    (package / "sub" / "names.py").write_text("from changeflow.sub.deep import Y as Z\nfrom changeflow import sub\n")
    found = modules(package, tmp_path)
    # WHEN the reader reads them
    graph = {name: imports(path, name, set(found)) for name, path in found.items()}
    # THEN a lazy import, a relative one, an alias and an import under TYPE_CHECKING are all edges
    assert graph["changeflow.sub.lazy"] == {"changeflow.low", "changeflow.sub.deep"}
    assert graph["changeflow.sub.names"] == {"changeflow.sub.deep", "changeflow.sub"}


def test_a_circle_is_found_however_long():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# --- the rules ---------------------------------------------------------------------------------------
def test_no_module_imports_another_in_a_circle():
    assert cycles(GRAPH) == [], "import circles (move what both need down, docs/architecture.md)"


def test_every_part_of_the_toolkit_has_a_rank():
    unranked = sorted({part(name) for name in MODULES if rank(name) < 0})
    assert unranked == [], f"give each a rank in RANKS and a row in {DOC.relative_to(ROOT)}"


def test_no_module_imports_from_a_higher_rank():
    upward = [f"{name} (rank {rank(name)}) imports {target} (rank {rank(target)})"
              for name, targets in GRAPH.items() for target in sorted(targets) if rank(target) > rank(name)]
    assert upward == [], "move the shared piece down to the lowest part that needs it"


def test_moto_patches_import_nothing_else_of_the_toolkit():
    for sealed in SEALED:
        leaks = [f"{name} imports {target}" for name, targets in GRAPH.items() if name.startswith(sealed)
                 for target in sorted(targets) if not target.startswith(sealed)]
        assert leaks == [], sealed


def test_command_groups_do_not_import_each_other():
    groups = {name for name in MODULES if name.startswith("changeflow.commands.")} - COMMAND_SHARED
    crossed = [f"{name} imports {target}" for name in sorted(groups) for target in sorted(GRAPH[name])
               if target.startswith("changeflow.commands") and target not in COMMAND_SHARED]
    assert crossed == [], "what two groups share goes to options, output or changes"


def test_no_module_is_over_the_size_limit_unless_allowed_with_its_reason():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES and name not in LONG_MODULES}
    assert over == {}, f"split them by what they do, or add them to LONG_MODULES with the reason (over {MAX_LINES})"
    stale = [name for name in LONG_MODULES if sizes.get(name, 0) <= MAX_LINES]
    assert stale == [], "no longer long (or gone): drop them from LONG_MODULES"
    assert all(reason.strip() for reason in LONG_MODULES.values())


@pytest.mark.parametrize("shipped", ["layers/core", "functions"])
def test_nothing_that_ships_to_lambda_imports_the_toolkit(shipped):
    offenders = []
    for path in sorted((ROOT / shipped).rglob("*.py")):
        if any(part.startswith(".") or part in ("build", "__pycache__") for part in path.relative_to(ROOT).parts):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            named = ([alias.name for alias in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in named if n == "changeflow" or n.startswith("changeflow.")]
    assert offenders == [], "the toolkit is never deployed: move what the handler needs into changeflow_core"


def test_the_package_map_in_the_docs_gives_every_part_its_rank():
    # the docs' table: | `changeflow/<part>` ... | <rank> | ...
    rows = re.findall(r"^\|\s*`changeflow/([\w.]+?)(?:/|\.py)?`[^|]*\|\s*(\d+)\s*\|", DOC.read_text(encoding="utf-8"), re.M)
    documented = {name: int(value) for name, value in rows}
    assert documented == RANKS


# --- the docs name what exists -----------------------------------------------------------------------
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TOP = ("src", "tests", "benchmarks", "functions", "layers", "events", "docs", "statemachines", "rules")


def test_every_path_and_module_the_readme_and_docs_name_exists():
    import importlib

    missing = []
    for doc in DOCS:
        for quoted in re.findall(r"`([^`\s]+)`", doc.read_text(encoding="utf-8")):
            path = quoted.split("::")[0]
            if path.split("/")[0] in TOP and "<" not in path and "*" not in path and not (ROOT / path).exists():
                missing.append(f"{doc.name}: {quoted}")
            elif re.fullmatch(r"changeflow(\.\w+)+", quoted):
                module, _, attribute = quoted.rpartition(".")
                try:
                    importlib.import_module(quoted)
                except ImportError:
                    try:
                        if not hasattr(importlib.import_module(module), attribute):
                            missing.append(f"{doc.name}: {quoted}")
                    except ImportError:
                        missing.append(f"{doc.name}: {quoted}")
    assert missing == [], missing


# --- nothing is loaded by its file path ----------------------------------------------------------------
# A module loaded from a file path is invisible to the import reader above (issue 38: the cost model lived in
# benchmarks/cost.py and capacity loaded it by path, so no rule saw it, and it broke unseen). The one
# exception is a Lambda handler: Lambda loads a function's handler file from its CodeUri, and so do the
# embedded stack's in-process Lambda service and the tests that call a handler directly. Those files load
# handlers only; they are named here with that reason.
LOADS_BY_PATH = re.compile(r"spec_from_file_location|SourceFileLoader|SourcelessFileLoader|run_path|load_source"
                           r"|imp\.load_module|exec\(\s*open\(")
HANDLER_LOADERS = {
    "src/changeflow/local/lambdas.py": "the in-process Lambda service imports a function's handler from its CodeUri",
    "tests/conftest.py": "the `handler` fixture imports a function's handler from its CodeUri, as Lambda does",
    "tests/test_observability.py": "each step's handler imported from its CodeUri, as Lambda does",
}
SCANNED = ("src", "benchmarks", "tests")


def loads_by_path(path: Path) -> list[str]:
    """The lines of ``path`` that load a module from a file path."""
    return [f"{path.name}:{number}: {line.strip()}" for number, line in
            enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if LOADS_BY_PATH.search(line)]


def test_the_path_loader_finder_sees_every_way_to_load_a_file(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import importlib.util, runpy\n"
                       "spec = importlib.util.spec_from_file_location('cost', 'benchmarks/cost.py')\n"
                       "runpy.run_path('benchmarks/cost.py')\n"
                       "from importlib.machinery import SourceFileLoader\n"
                       "exec(open('benchmarks/cost.py').read())\n"
                       "import importlib\nimportlib.import_module('changeflow.cost')\n")
    assert [line.split(":")[1] for line in loads_by_path(planted)] == ["2", "3", "4", "5"]


def test_no_module_is_loaded_by_its_file_path():
    found = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if path == Path(__file__) or any(p.startswith(".") or p == "__pycache__" for p in path.parts):
                continue
            lines = loads_by_path(path)
            if lines and relative not in HANDLER_LOADERS:
                found[relative] = lines
    assert found == {}, "import it by its name (a toolkit module belongs under src/changeflow: docs/architecture.md)"
    assert all(reason.strip() and (ROOT / name).is_file() and loads_by_path(ROOT / name)
               for name, reason in HANDLER_LOADERS.items()), "drop an exception that no longer loads a handler"
