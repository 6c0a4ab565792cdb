"""The figures issue 29 asks for, measured the same way before and after a change.

Run from the repository root: ``.venv/bin/python scripts/seam_figures.py [--list]``.

- modules over 500 lines (engine and Dagster face);
- constructors (``__init__``) taking more than 7 parameters besides ``self``;
- places that spell a lake path: a call of ``join_uri`` or of ``<...>lake.join``, a string
  splitting a table URI to find its folder, or a string constant naming one of a
  destination's files or folders (outside docstrings);
- bare ``noqa`` comments: a rule code without a reason after it (or no rule code at all).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOTS = ("cdc_platform", "dagster_defs")
NOQA_ROOTS = ("cdc_platform", "dagster_defs", "tests", "bench", "scripts")
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
"""The one home of a destination's lake layout (issue 29); absent before it."""
_BARE_NOQA = re.compile(r"#\s*noqa(?::\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?\s*$")


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


def _engine_figures() -> tuple[list[str], list[str], list[str]]:
    """Long modules, wide constructors and lake path spellings of the engine and Dagster face."""
    long_modules: list[str] = []
    wide_inits: list[str] = []
    spellings: list[str] = []
    for root in ROOTS:
        for path in sorted(Path(root).rglob("*.py")):
            text = path.read_text()
            lines = text.count("\n")
            if lines > 500:
                long_modules.append(f"{path} ({lines})")
            tree = ast.parse(text)
            docstrings = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef) and node.name == "__init__":
                    a = node.args
                    count = len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) - 1
                    if count > 7:
                        wide_inits.append(f"{path}:{node.lineno} ({count})")
                place = f"{path}:{getattr(node, 'lineno', 0)}"
                if place not in spellings and _spells_lake_path(node, docstrings):
                    spellings.append(place)  # one place a line
    return long_modules, wide_inits, spellings


def _bare_noqa() -> list[str]:
    return [
        f"{path}:{number}"
        for root in NOQA_ROOTS
        for path in sorted(Path(root).rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if _BARE_NOQA.search(line)
    ]


def main() -> None:
    """Print the four figures (``--list``: and where they are)."""
    long_modules, wide_inits, spellings = _engine_figures()
    bare = _bare_noqa()
    modules = {s.rsplit(":", 1)[0] for s in spellings}
    print(f"modules over 500 lines: {len(long_modules)}")
    print(f"constructors over 7 parameters: {len(wide_inits)}")
    print(f"places that spell a lake path: {len(spellings)} in {len(modules)} modules")
    elsewhere = [s for s in spellings if not s.startswith(str(LAYOUT_HOME))]
    others = {s.rsplit(":", 1)[0] for s in elsewhere}
    print(f"  of them outside {LAYOUT_HOME}: {len(elsewhere)} in {len(others)} modules")
    print(f"bare noqa: {len(bare)}")
    if "--list" in sys.argv:
        for title, items in (
            ("modules over 500 lines", long_modules),
            ("constructors over 7 parameters", wide_inits),
            ("lake path spellings", spellings),
            ("bare noqa", bare),
        ):
            print(f"\n{title}:")
            for item in items:
                print(f"  {item}")


if __name__ == "__main__":
    main()
