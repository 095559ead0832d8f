"""The layers stay true: pyproject.toml's import-linter contracts hold (a package imports only the ones below it,
and nothing under the backends imports the NPU), so an upward import fails the suite, naming its chain; and no
first-party import hides inside a function, where the linter's picture would be true only by luck of timing."""
from __future__ import annotations

import ast
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = ROOT / "pyproject.toml"
PACKAGES = ("glowsdk", "isa", "sim", "firmware_runtime")
LAZY = {
    ROOT / "glowsdk" / "__init__.py": "the package's face hands on the API on first use",
    ROOT / "glowsdk" / "cli": "the CLI loads a command's modules when the command runs (start-up time)",
}
"""Where a first-party import inside a function is the design, not a dodged cycle."""


def test_import_linter_contracts_are_kept(capsys):
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    assert status == 0, capsys.readouterr().out


def _first_party(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in PACKAGES
    return any(alias.name.split(".")[0] in PACKAGES for alias in node.names)


def test_no_first_party_import_inside_a_function():
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if any(path == lazy or lazy in path.parents for lazy in LAZY):
                continue
            for fn in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    found += [f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}"
                              for node in ast.walk(fn) if isinstance(node, (ast.Import, ast.ImportFrom))
                              and _first_party(node)]
    assert not found, "imports inside functions (move them to the module's top):\n" + "\n".join(found)
