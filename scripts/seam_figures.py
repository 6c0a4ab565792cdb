"""The structural figures of the code base, measured the same way before and after a change.

Run from the repository root: ``.venv/bin/python scripts/seam_figures.py [--list]``.

One line a figure (``--list``: and where each one is):

- import cycles between the engine's packages and upward imports (import-linter's contracts);
- modules over 500 and over 450 lines (engine, Dagster face, Airflow provider);
- functions taking more than 7 parameters besides ``self``/``cls`` (the same three packages;
  the test helpers in ``cdc_platform/testing`` counted apart);
- places that spell a lake path: a call of ``join_uri`` or of ``<...>lake.join``, a string
  splitting a table URI to find its folder, or a string constant naming one of a
  destination's files or folders (outside docstrings);
- ``duplicates`` pairs on the three packages (when the ``duplicates`` command is on PATH);
- tests reaching into private state: ``obj._name`` on anything but ``self``/``cls``, and
  imports of ``_private`` names from the project's packages;
- fixed waits in tests (``time.sleep`` with a constant), home-made wait helpers beside
  ``cdc_platform/testing/processes.py``'s that poll on their own (a loop that sleeps), the
  ones built on it (counted apart), and the named waits for time itself (``let_time_pass``);
- ``# type: ignore[...]`` without a reason after it; bare ``noqa`` comments (a rule code
  without a reason, or no rule code at all).
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGES = ("cdc_platform", "dagster_defs", "cdc_airflow")
NOQA_ROOTS = ("cdc_platform", "dagster_defs", "cdc_airflow", "tests", "bench", "scripts")
TEST_ROOTS = ("tests",)
WAIT_HOME = Path("cdc_platform/testing/processes.py")
"""The one wait helper of the tests (``wait_for``; ``wait_until`` for a server's start)."""
LAYOUT_NAMES = {
    "_snapshot_state.json",
    "_captured_tables.json",
    "_reread_tables.json",
    "_start.json",
    "_snapshot_requests",
    "_reconcile",
    "mirror",
    "history",
}
LAYOUT_HOME = Path("cdc_platform/sink/destination_lake.py")
"""The one home of a destination's lake layout."""
_BARE_NOQA = re.compile(r"#\s*noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?\s*$")
_TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore(\[[^\]]*\])?(.*)$")
_WAIT_NAME = re.compile(r"^_?(wait|poll|until)(_|$)")


def _python_files(*roots: str) -> list[Path]:
    return [path for root in roots for path in sorted(Path(root).rglob("*.py"))]


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _spells_lake_path(node: ast.AST, docstrings: set[int]) -> bool:
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "join_uri":
            return True
        if isinstance(func, ast.Attribute) and func.attr == "join":
            owner = func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            return name == "lake"
        if isinstance(func, ast.Attribute) and func.attr == "rsplit":
            owner = func.value
            inner = owner.func if isinstance(owner, ast.Call) else owner
            text = ast.unparse(inner)
            return "uri" in text
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ):
        value = node.value.strip("/")
        return value in LAYOUT_NAMES or any(value.endswith("/" + n) for n in LAYOUT_NAMES)
    return False


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = node.args
    names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return len([n for n in names if n not in ("self", "cls")])


def _package_figures() -> dict[str, list[str]]:
    """Long modules, wide functions and lake path spellings of the three packages."""
    found: dict[str, list[str]] = {
        "over 500": [],
        "over 450": [],
        "wide": [],
        "wide test helpers": [],
        "spellings": [],
    }
    for path in _python_files(*PACKAGES):
        text = path.read_text()
        lines = text.count("\n")
        if lines > 500:
            found["over 500"].append(f"{path} ({lines})")
        if lines > 450:
            found["over 450"].append(f"{path} ({lines})")
        tree = ast.parse(text)
        docstrings = _docstrings(tree)
        helpers = "testing" in path.parts
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                count = _parameters(node)
                if count > 7:
                    key = "wide test helpers" if helpers else "wide"
                    found[key].append(f"{path}:{node.lineno} {node.name} ({count})")
            place = f"{path}:{getattr(node, 'lineno', 0)}"
            if place not in found["spellings"] and _spells_lake_path(node, docstrings):
                found["spellings"].append(place)  # one place a line
    return found


def _private_reaches() -> tuple[list[str], list[str]]:
    """Tests using another object's ``_private`` attribute, and imports of ``_private`` names."""
    uses: list[str] = []
    imports: list[str] = []
    for path in _python_files(*TEST_ROOTS):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                owner = node.value
                if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                    uses.append(f"{path}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGES):
                imports += [
                    f"{path}:{node.lineno} {node.module}.{alias.name}"
                    for alias in node.names
                    if _private(alias.name)
                ]
    return uses, imports


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _waits() -> tuple[list[str], list[str], list[str], list[str]]:
    """Fixed sleeps in tests; wait helpers beside the one home that poll on their own (a
    loop that sleeps: a clone of it); wait helpers built on it (a condition of their own,
    or a guard such as "the run ended first", around the one wait); and the named waits for
    time itself (``let_time_pass``, where passing time is the point of a test)."""
    sleeps: list[str] = []
    clones: list[str] = []
    built_on: list[str] = []
    time_passing: list[str] = []
    for path in _python_files(*TEST_ROOTS, "cdc_platform/testing"):
        tree = ast.parse(path.read_text())
        in_tests = path.parts[0] in TEST_ROOTS
        for node in ast.walk(tree):
            if in_tests and isinstance(node, ast.Call):
                called = ast.unparse(node.func)
                if called == "time.sleep" and node.args and isinstance(node.args[0], ast.Constant):
                    sleeps.append(f"{path}:{node.lineno} time.sleep({node.args[0].value})")
                elif called.endswith("let_time_pass"):
                    time_passing.append(f"{path}:{node.lineno} {ast.unparse(node)[:90]}")
            if (
                isinstance(node, ast.FunctionDef)
                and _WAIT_NAME.match(node.name)
                and path != WAIT_HOME
            ):
                place = f"{path}:{node.lineno} {node.name}"
                if _polls_itself(node):
                    clones.append(place)
                elif _calls_a_wait(node):
                    built_on.append(place)
    return sleeps, clones, built_on, time_passing


def _polls_itself(function: ast.FunctionDef) -> bool:
    """Whether ``function`` has a loop that sleeps (its own polling)."""
    return any(
        isinstance(call, ast.Call) and ast.unparse(call.func).split(".")[-1] == "sleep"
        for loop in ast.walk(function)
        if isinstance(loop, (ast.While, ast.For))
        for call in ast.walk(loop)
    )


def _calls_a_wait(function: ast.FunctionDef) -> bool:
    """Whether ``function`` calls a wait (``wait_for``, ``wait_until`` or one built on them)."""
    return any(
        isinstance(call, ast.Call) and _WAIT_NAME.match(ast.unparse(call.func).split(".")[-1])
        for call in ast.walk(function)
    )


def _comments() -> tuple[list[str], list[str], int]:
    """Type ignores without a reason, bare noqa comments, and all type ignores."""
    unexplained: list[str] = []
    bare: list[str] = []
    ignores = 0
    for path in _python_files(*NOQA_ROOTS):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = _TYPE_IGNORE.search(line)
            if match:
                ignores += 1
                reason = match.group(2).strip().lstrip("#-(: ").strip()
                if not reason:
                    unexplained.append(f"{path}:{number}")
            if _BARE_NOQA.search(line):
                bare.append(f"{path}:{number}")
    return unexplained, bare, ignores


def _contracts() -> str:
    """import-linter's verdict (cycles and upward imports break its layer contracts)."""
    linter = Path(sys.executable).with_name("lint-imports")
    if not linter.exists():
        return "not measured (lint-imports is not installed)"
    done = subprocess.run([str(linter)], capture_output=True, text=True, check=False)
    tail = [line for line in done.stdout.splitlines() if line.startswith("Contracts:")]
    return tail[-1] if tail else "lint-imports printed no verdict"


def _duplicate_pairs() -> str:
    """Pairs the ``duplicates`` command finds on a copy of the three packages."""
    command = shutil.which("duplicates")
    if command is None:
        return "not measured (the duplicates command is not on PATH)"
    with tempfile.TemporaryDirectory() as tmp:
        for package in PACKAGES:
            shutil.copytree(
                package, Path(tmp) / package, ignore=shutil.ignore_patterns("__pycache__")
            )
        done = subprocess.run(
            [command, "--repo", tmp, "--seconds", "120"],
            capture_output=True,
            text=True,
            check=False,
        )
    counts = re.findall(r"(\d+)\s+pairs?", done.stdout + done.stderr)
    return counts[0] if counts else f"unreadable output: {done.stdout.strip()[:200]}"


def main() -> None:
    """Print the figures (``--list``: and where they are)."""
    found = _package_figures()
    uses, imports = _private_reaches()
    sleeps, helpers, built_on, time_passing = _waits()
    unexplained, bare, ignores = _comments()
    spellings = found["spellings"]
    modules = {s.rsplit(":", 1)[0] for s in spellings}
    elsewhere = [s for s in spellings if not s.startswith(str(LAYOUT_HOME))]
    print(f"import contracts (cycles, upward imports): {_contracts()}")
    print(f"modules over 500 lines: {len(found['over 500'])}")
    print(f"modules over 450 lines: {len(found['over 450'])}")
    print(
        f"functions over 7 parameters: {len(found['wide'])} "
        f"(and {len(found['wide test helpers'])} in cdc_platform/testing)"
    )
    print(f"places that spell a lake path: {len(spellings)} in {len(modules)} modules")
    others = {s.rsplit(":", 1)[0] for s in elsewhere}
    print(f"  of them outside {LAYOUT_HOME}: {len(elsewhere)} in {len(others)} modules")
    print(f"duplicates pairs on {', '.join(PACKAGES)}: {_duplicate_pairs()}")
    users = {u.split(":", 1)[0] for u in uses}
    print(
        f"tests reaching into private state: {len(uses)} uses in {len(users)} files, "
        f"{len(imports)} imports"
    )
    print(
        f"fixed time.sleep waits in tests: {len(sleeps)}; wait helpers beside {WAIT_HOME} "
        f"polling on their own: {len(helpers)} ({len(built_on)} more built on it)"
    )
    print(f"named waits for time itself (let_time_pass): {len(time_passing)}")
    print(f"type: ignore without a reason: {len(unexplained)} of {ignores}")
    print(f"bare noqa: {len(bare)}")
    if "--list" in sys.argv:
        for title, items in (
            ("modules over 450 lines", found["over 450"]),
            ("functions over 7 parameters", found["wide"]),
            ("... in cdc_platform/testing", found["wide test helpers"]),
            ("lake path spellings", spellings),
            ("private state in tests", uses + imports),
            ("fixed waits", sleeps),
            ("wait helpers polling on their own", helpers),
            ("wait helpers built on the one wait", built_on),
            ("named waits for time itself", time_passing),
            ("type: ignore without a reason", unexplained),
            ("bare noqa", bare),
        ):
            print(f"\n{title}:")
            for item in items:
                print(f"  {item}")


if __name__ == "__main__":
    main()
