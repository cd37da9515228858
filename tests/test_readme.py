"""The README and the user docs run: every ```python block of README.md and of DOCS as-is (each in
a fresh process, in an empty folder), and every geohead command line of their shell blocks exists
with the options it uses (``--help`` of
the subcommand lists each ``--option``; ``--set`` keys of ``geohead train`` are valid keys of the
recipe)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
#: user docs whose code blocks are checked like the README's
DOCS = ("docs/monitors.md", "docs/diagnose.md", "docs/theory.md", "docs/search.md")
#: the one block that downloads (CIFAR-10 saved as .npz, docs/search.md): no network in tests; the
#: loader of such files is tested on local arrays (tests/test_data_loaders.py)
DOWNLOADS = "download=True"



def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced code block, in order."""
    blocks, lang, body = [], None, []
    for line in text.splitlines():
        if lang is None and line.startswith("```"):
            lang, body = line[3:].strip(), []
        elif lang is not None and line.strip() == "```":
            blocks.append((lang, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    assert lang is None, "unclosed code fence in README.md"
    return blocks


BLOCKS = [blk for text in [README, *((ROOT / d).read_text() for d in DOCS)] for blk in _fenced_blocks(text)]
PYTHON_BLOCKS = [b for lang, b in BLOCKS if lang == "python" and DOWNLOADS not in b]
SHELL_BLOCKS = [b for lang, b in BLOCKS if lang in ("bash", "sh", "")]


def _first_line(block: str) -> str:
    """The block's first line that is not an import (a readable test id)."""
    lines = [ln for ln in block.splitlines() if ln.strip() and not ln.startswith(("import ", "from "))]
    return (lines[0] if lines else block.splitlines()[0])[:50]


def test_only_the_one_download_block_is_left_out():
    assert sum(lang == "python" and DOWNLOADS in b for lang, b in BLOCKS) == 1, "one block downloads, no more"


def test_the_readme_has_what_it_promises():
    assert len([b for lang, b in _fenced_blocks(README) if lang == "python"]) >= 4 and SHELL_BLOCKS
    assert "esc.lambda_min," not in "".join(PYTHON_BLOCKS)  # EscapeCurvature has lambda_min_H, not lambda_min


def test_the_readme_starts_with_the_user():
    """At most 15 KB with a table of contents whose links reach its sections, a citation, and
    the install and test commands CI reads (between their markers)."""
    assert len(README.encode()) <= 15_000
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-")
               for h in re.findall(r"^## (.+)$", README, flags=re.M)}
    links = re.findall(r"\]\(#([a-z0-9-]+)\)", README.split("## ", 1)[0])
    assert len(links) >= 8 and set(links) <= anchors, set(links) - anchors
    assert "@inproceedings{chaudhry2026geometry" in README
    assert "<!-- main-command -->" in README and "<!-- test-command -->" in README


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[_first_line(b) for b in PYTHON_BLOCKS])
def test_python_block_runs_as_is(block: str, tmp_path: Path):
    script = tmp_path / "block.py"
    script.write_text(block)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env=env)
    assert proc.returncode == 0, f"README block failed:\n{block}\n--- stderr ---\n{proc.stderr[-3000:]}"


def _geohead_commands() -> list[list[str]]:
    """Each shell line that runs geohead, as [subcommand, args...] (comments and prompts removed)."""
    out = []
    for block in SHELL_BLOCKS:
        for line in block.splitlines():
            for part in line.split("&&"):
                words = shlex.split(part, comments=True)
                for i, w in enumerate(words):
                    if w.endswith("/geohead") or w == "geohead" or w == "geohead.cli":
                        if i + 1 < len(words) and not words[i + 1].startswith("-"):
                            out.append(words[i + 1:])
                        break
    return out


COMMANDS = _geohead_commands()


def _help(sub: str | None) -> str:
    args = [sys.executable, "-m", "geohead.cli"] + ([sub] if sub else []) + ["--help"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_geohead_help_lists_every_readme_subcommand():
    assert COMMANDS, "no geohead command found in the README's shell blocks"
    text = _help(None)
    for cmd in COMMANDS:
        assert re.search(rf"^\s+{cmd[0]}\b", text, flags=re.M), cmd


@pytest.mark.parametrize("sub", sorted({c[0] for c in COMMANDS}))
def test_readme_options_exist(sub: str):
    text = _help(sub)
    for cmd in (c for c in COMMANDS if c[0] == sub):
        for word in cmd[1:]:
            if word.startswith("--"):
                assert word.split("=")[0] in text, (cmd, word)


def test_readme_train_overrides_are_valid_recipe_keys():
    from geohead.training.config import load_recipe

    lines = [c for c in COMMANDS if c[0] == "train"]
    assert lines
    for cmd in lines:
        recipe = ROOT / cmd[1] if "/" in cmd[1] else cmd[1]  # a path in the repository, or a packaged recipe's name
        sets = [cmd[i + 1] for i, w in enumerate(cmd) if w == "--set"]
        load_recipe(recipe, sets)  # raises on an unknown key or a bad value
