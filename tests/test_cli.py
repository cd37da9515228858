"""The console script and its top-level options."""
from __future__ import annotations

import shutil
import subprocess
import sys

from click.testing import CliRunner

from geohead import __version__
from geohead.cli import main


def test_help_and_version() -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["--help"])
    assert res.exit_code == 0 and "geohead" in res.output
    res = runner.invoke(main, ["--version"])
    assert res.exit_code == 0 and __version__ in res.output


def test_console_script_installed() -> None:
    exe = shutil.which("geohead") or str(__import__("pathlib").Path(sys.executable).with_name("geohead"))
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"geohead, version {__version__}"


def test_import_geohead_is_light() -> None:
    code = "import sys, geohead; bad = [m for m in ('timm', 'optuna', 'matplotlib', 'scipy') if m in sys.modules]; print(bad)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
