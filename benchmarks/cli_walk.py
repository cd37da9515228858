"""The walk from ``geohead search`` to a scored trial, as a reader follows it (issue 25).

Runs a one-trial search through the command line (``geohead search --objective barlow`` at the
test suite's tiny size, one worker, no verdict runs) under ``sys.setprofile`` and keeps the calls
that cross from one geohead file into another, each distinct (caller function, callee function)
pair once: the stops a newcomer makes reading from the CLI down to a scored trial. Prints the
stops, the files entered, and the files entered more than once (by distinct calls from other
files), so two commits compare: run it in a worktree of each with ``PYTHONPATH=<worktree>``.

Run: ``python benchmarks/cli_walk.py [--out walk.json]``
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

FLAGS = ["--objective", "barlow", "--n-train", "128", "--batch-size", "32", "--steps", "2", "--trials", "2",
         "--probe-train", "64", "--probe-test", "32", "--timeout", "0", "--no-progress"]


def walk(root: Path, out_dir: Path) -> list[tuple[str, str]]:
    """Distinct cross-file calls (``file:function`` -> ``file:function``) under ``root`` made by
    one tiny search run from the CLI, in the order first made."""
    from click.testing import CliRunner

    from geohead.cli import main

    prefix = str(root) + "/"
    seen: dict[tuple[str, str], None] = {}

    def where(frame: Any) -> str | None:
        f = frame.f_code.co_filename
        return f"{f[len(prefix):]}:{frame.f_code.co_name}" if f.startswith(prefix) else None

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event != "call":
            return
        callee = where(frame)
        caller_frame = frame.f_back
        while caller_frame is not None and where(caller_frame) is None:
            caller_frame = caller_frame.f_back  # through library frames (click, optuna) to our caller
        caller = where(caller_frame) if caller_frame is not None else "cli"
        if callee and caller and callee.split(":")[0] != caller.split(":")[0]:
            seen.setdefault((caller, callee), None)

    extra = ["--confirm-seeds", "0"] if "--confirm-seeds" in _search_help() else []
    sys.setprofile(profile)
    try:
        res = CliRunner().invoke(main, ["search", "--out", str(out_dir), *FLAGS, *extra])
    finally:
        sys.setprofile(None)
    if res.exit_code != 0:
        raise SystemExit(f"the search failed ({res.exit_code}): {res.output[-2000:]}")
    return list(seen)


def _search_help() -> str:
    from click.testing import CliRunner

    from geohead.cli import main

    return CliRunner().invoke(main, ["search", "--help"]).output


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="write the walk as JSON here")
    args = ap.parse_args(argv)
    import geohead

    root = Path(geohead.__file__).resolve().parent
    with tempfile.TemporaryDirectory() as tmp:
        edges = walk(root, Path(tmp) / "s")
    entries = collections.Counter(callee.split(":")[0] for _, callee in edges)
    files = sorted(entries)
    again = {f: n for f, n in entries.most_common() if n > 1}
    rec = {"root": str(root), "stops": len(edges), "files": len(files), "entered_more_than_once": again,
           "edges": [list(e) for e in edges]}
    print(f"{len(edges)} stops over {len(files)} files; entered more than once: {len(again)} files")
    for f, n in again.items():
        print(f"  {n:3d}  {f}")
    if args.out:
        Path(args.out).write_text(json.dumps(rec, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
