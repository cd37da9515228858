"""The criteria that docstrings and --help name are the score's: no module says
"four criteria" while SCORE_CRITERIA has five, and every name they list is in SCORE_CRITERIA."""
from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from geohead.cli import main
from geohead.search.score import SCORE_CRITERIA

ROOT = Path(__file__).resolve().parents[1]
NUMBERS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven"}


def _texts() -> dict[str, str]:
    texts = {str(p.relative_to(ROOT)): p.read_text() for p in (ROOT / "geohead" / "search").glob("*.py")}
    texts["geohead search --help"] = CliRunner().invoke(main, ["search", "--help"]).output
    return texts


def test_no_text_miscounts_the_score_criteria() -> None:
    wrong = [w for n, w in NUMBERS.items() if n != len(SCORE_CRITERIA)]
    pattern = re.compile(r"\b(" + "|".join(wrong) + r")\s+(?:normalised\s+|label-free\s+|score\s+)*criteria\b", re.I)
    bad = {name: m.group(0) for name, text in _texts().items() for m in [pattern.search(text)] if m}
    assert not bad, bad


def test_the_score_module_docstring_lists_exactly_the_score_criteria() -> None:
    import geohead.search.score as score

    listed = re.findall(r"^    (\w+)\s{2,}", score.__doc__, flags=re.M)
    extra = tuple(k for k in score.THEORY_WEIGHTS if k not in SCORE_CRITERIA)  # the theory score's own
    assert extra == ("fisher_erank",)
    assert tuple(listed) == SCORE_CRITERIA + extra
