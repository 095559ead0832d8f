"""The layers stay true: pyproject.toml's import-linter contracts hold (a package imports only the ones below
it, and nothing under the backends imports the NPU), so an upward import fails the suite, naming its chain."""
from __future__ import annotations

from pathlib import Path

from importlinter.cli import lint_imports

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def test_import_linter_contracts_are_kept(capsys):
    status = lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    assert status == 0, capsys.readouterr().out
