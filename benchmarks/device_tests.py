"""The ``tests`` part of ``benchmarks/device_check.py``: ``pytest -m cuda`` on the test files that
hold ``cuda`` tests, each test's outcome read back from the JUnit XML, the log kept beside it. On a
GPU every cuda test must run and pass; without CUDA they must all be collected and skip.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
CUDA_MARK = re.compile(r"\bpytest\.mark\.cuda\b")  # a test file that marks tests (or itself) cuda


# ---------------------------------------------------------------------- (a) the cuda tests
def part_tests(out: Path, device: torch.device, timeout: float) -> dict[str, Any]:
    files = sorted(p for p in (ROOT / "tests").glob("test_*.py") if CUDA_MARK.search(p.read_text()))
    if not files:
        raise RuntimeError("no test file in tests/ holds a test marked cuda")
    xml = out / "cuda_tests.xml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rs", "-p", "no:cacheprovider", f"--junitxml={xml}",
           *[str(f.relative_to(ROOT)) for f in files]]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    (out / "cuda_tests.log").write_text(proc.stdout + proc.stderr)
    tests = []
    if xml.is_file():
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome, message = "passed", None
            for tag in ("failure", "error", "skipped"):
                el = case.find(tag)
                if el is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    message = (el.get("message") or "")[:500]
                    break
            tests.append({"name": f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}", "outcome": outcome,
                          "seconds": round(float(case.get("time") or 0), 2), "message": message})
    counts = {k: sum(t["outcome"] == k for t in tests) for k in ("passed", "failed", "error", "skipped")}
    res: dict[str, Any] = {"command": " ".join(cmd[1:]), "returncode": proc.returncode, **counts, "tests": tests,
                           "log": "cuda_tests.log"}
    if device.type == "cuda":  # on a GPU every cuda test must run and pass
        res["_ok"] = proc.returncode == 0 and counts["passed"] == len(tests) > 0
    else:  # without CUDA they must all be collected and skip (nothing failed, nothing errored)
        res["_ok"] = proc.returncode == 0 and counts["skipped"] == len(tests) > 0
    if not res["_ok"]:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        res["_error"] = f"pytest exit {proc.returncode}: " + " | ".join(tail)
    return res
