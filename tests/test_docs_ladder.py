"""docs/search.md's scale-ladder table says what benchmarks/results/search_scale_cpu.json holds:
every probe value and margin in it is the recorded one to the digits shown, and every axis with a
measured pair (pick and published head at the same seed) has its row."""
from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OBJECTIVES = {"Barlow Twins": "barlow", "SimCLR": "simclr"}
#: the table's axis text (its start) -> the results' axis
AXES = {"width: resnet18_w32": "width_w32", "width: ResNet-18": "width_full", "data: 40k": "data_40k",
        "budget: 100 epochs": "budget_100", "budget: 300 epochs": "budget_300"}
NUMBER = re.compile(r"[+\-−]?\d+\.\d+")


def _rows() -> list[list[str]]:
    text = (ROOT / "docs" / "search.md").read_text()
    section = text.split("## Search small, train big", 1)[1].split("\n## ", 1)[0]
    table = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| objective")]
    return [[c.strip() for c in ln.strip("|").split("|")] for ln in table]


def _margins() -> dict[tuple[str, str], dict[int, dict[str, float]]]:
    rows = json.loads((ROOT / "benchmarks" / "results" / "search_scale_cpu.json").read_text())["margins"]
    out: dict[tuple[str, str], dict[int, dict[str, float]]] = {}
    for r in rows:
        out.setdefault((r["objective"], r["axis"]), {})[r["seed"]] = r
    return out


def _numbers(cell: str) -> list[Decimal]:
    return [Decimal(n.replace("−", "-")) for n in NUMBER.findall(cell)]


def _agrees(shown: Decimal, value: float, margin: bool = False) -> bool:
    """``shown`` is ``value`` to the digits shown (half a unit of its last digit); a ``margin``
    that is a multiple of 0.05 is the value to the nearest 0.05. Plus float slack."""
    half = Decimal(1).scaleb(shown.as_tuple().exponent) / 2
    if margin and shown % Decimal("0.05") == 0:
        half = Decimal("0.025")
    return abs(float(shown) - value) <= float(half) + 1e-9


def _axis(cell: str) -> str:
    return next(v for k, v in AXES.items() if cell.startswith(k))


ROWS = _rows()


def test_the_table_has_a_row_for_every_measured_pair() -> None:
    shown = {(OBJECTIVES[r[0]], _axis(r[1])) for r in ROWS}
    measured = {k for k in _margins() if k[1] in AXES.values()}
    assert shown == measured


@pytest.mark.parametrize("row", ROWS, ids=[f"{r[0]}-{r[1][:20]}" for r in ROWS])
def test_each_row_is_the_recorded_runs_to_the_digits_shown(row: list[str]) -> None:
    objective, axis = OBJECTIVES[row[0]], _axis(row[1])
    pairs, proxy = _margins()[(objective, axis)], _margins()[(objective, "proxy")]
    seeds = [int(s) for s in row[2].split(",")]
    assert seeds == sorted(pairs)
    for col, key in ((3, "pick_linear"), (4, "pub_linear")):
        assert [_agrees(v, pairs[s][key]) for v, s in zip(_numbers(row[col]), seeds)] == [True] * len(seeds), (col, key)
    for col, key in ((5, "margin_linear"), (6, "margin_knn")):
        here, base = _numbers(row[col])
        assert _agrees(here, sum(p[key] for p in pairs.values()) / len(pairs), margin=True), (key, here)
        assert _agrees(base, sum(p[key] for p in proxy.values()) / len(proxy), margin=True), (key, base)
