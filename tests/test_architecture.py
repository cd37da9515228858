"""Contracts that keep the layout as the README's "Architecture" section describes it."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450


def test_import_layers_hold() -> None:
    """`lint-imports` with the contracts of pyproject.toml ([tool.importlinter]): the layers,
    geometry apart from training, no cycles between sibling modules."""
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [shutil.which("lint-imports") or "lint-imports"]
    if not exe.exists() and shutil.which("lint-imports") is None:
        pytest.fail("lint-imports is not installed; install the dev extra: pip install -e '.[dev]'")
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert "0 broken" in res.stdout


def test_no_module_is_too_long() -> None:
    """One concept a module: none in geohead/ over 450 lines."""
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in (ROOT / "geohead").rglob("*.py")}
    assert len(sizes) > 40  # the walk found the package
    too_long = {p: n for p, n in sizes.items() if n > MAX_LINES}
    assert not too_long, f"modules over {MAX_LINES} lines: {too_long}"
