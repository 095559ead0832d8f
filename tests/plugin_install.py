"""A test's backend plugin, pip-installed as a vendor ships it, into a folder of its own.

`pip install --target` builds and installs the distribution (its entry points included) into a
temporary folder that is put on `sys.path` while the tests that use it run, so the environment's
site-packages is never changed: two test runs at once (or a run that was killed) cannot uninstall
or leave behind each other's plugin.
"""
from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def install_plugin(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, source: Path,
                   package: str) -> Path:
    """Build `source` from a copy (its folder stays clean), install it offline and forget it afterwards."""
    work = tmp_path_factory.mktemp(package)
    copy = work / "source"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = work / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                                "--no-index", "--no-cache-dir", "--quiet", "--disable-pip-version-check",
                                "--target", str(target), str(copy)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr

    def forget() -> None:
        sys.path.remove(str(target))
        for name in [m for m in sys.modules if m.split(".")[0] == package]:
            del sys.modules[name]
        importlib.invalidate_caches()

    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    request.addfinalizer(forget)
    return target


def environment_with(target: Path) -> dict[str, str]:
    """The environment for a `python -m glowsdk` subprocess that must see the plugin."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), *filter(None, sys.path)])}
