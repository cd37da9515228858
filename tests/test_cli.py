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


def test_warnings_to_stderr_prints_a_user_warning_once_per_place_as_one_line_and_restores_python() -> None:
    """What diagnose and export assume is one ``warning:`` line, at once, once per place (Python's
    default filter), through a progress bar's ``write`` when given; other categories go to
    Python's own display, and the filters and display are restored afterwards."""
    import warnings

    from geohead.commands import warnings_to_stderr

    def warn(text: str, category: type[Warning] = UserWarning) -> None:
        warnings.warn(text, category, stacklevel=1)  # one place for every call

    lines, python_shown = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *a, **k: python_shown.append((category, str(message)))
        before_show, before_filters = warnings.showwarning, list(warnings.filters)
        with warnings_to_stderr(lines.append):
            for _ in range(3):
                warn("assumed: input size 32 pixels")
            warn("old API", FutureWarning)
        assert warnings.showwarning is before_show and warnings.filters == before_filters
    assert lines == ["warning: assumed: input size 32 pixels"]
    assert python_shown == [(FutureWarning, "old API")]
