"""Successive halving over training steps: the rungs, the decisions at them, never the first epoch."""
from __future__ import annotations

import json

import pytest

from geohead.search import SearchConfig, SearchError, run_search
from geohead.search.results import read_trials_csv

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_whitening")
#: 128 images in batches of 32: 4 steps an epoch.
TINY = dict(n_train=128, batch_size=32, probe_train=64, probe_test=32, orbit_images=8, families=("hue",),
            screen_batch=32, timeout=None, progress=False, heartbeat=2)


def load(out):
    import optuna

    return optuna.load_study(study_name="barlow-shapes-default", storage=f"sqlite:///{out / 'study.db'}")


@pytest.mark.parametrize("kw, rungs, max_steps", [
    ({}, (100,), 300),                                            # the default: 100 -> 300 steps, the best third
    ({"min_steps": 8, "max_steps": 32, "reduction_factor": 2}, (8, 16), 32),
    ({"min_steps": 50, "reduction_factor": 2}, (50, 100), 150),  # max defaults to 3 x min
    ({"steps": 20}, (), 20),                                      # a fixed budget: no rung
    ({"steps": 20, "max_steps": 80}, (20, 60), 80),
])
def test_rungs_of_the_budget(kw, rungs, max_steps) -> None:
    cfg = SearchConfig(**kw).validate()
    assert cfg.rungs == rungs and cfg.max_steps == max_steps


def test_the_pruner_is_successive_halving_over_steps() -> None:
    import optuna

    from geohead.search.study import make_pruner

    p = make_pruner(SearchConfig(min_steps=100, max_steps=300, reduction_factor=3))
    assert isinstance(p, optuna.pruners.SuccessiveHalvingPruner)
    assert (p._min_resource, p._reduction_factor, p._min_early_stopping_rate) == (100, 3, 0)
    for kw in ({"steps": 100}, {"prune": False}, {"multi": True}):
        assert isinstance(make_pruner(SearchConfig(**kw)), optuna.pruners.NopPruner)


@pytest.mark.parametrize("kw, match", [
    ({"min_steps": 200, "max_steps": 100}, r"--max-steps 100 is below --min-steps 200; raise it"),
    ({"reduction_factor": 1}, r"--reduction-factor must be an integer >= 2"),
    ({"min_steps": 0}, r"--min-steps must be a positive integer"),
])
def test_bad_budgets_name_the_fix(kw, match) -> None:
    with pytest.raises(SearchError, match=match):
        SearchConfig(**kw).validate()


def test_trials_are_judged_at_the_rungs_by_the_successive_halving_rule(tmp_path) -> None:
    out = tmp_path / "search"
    res = run_search(SearchConfig(out=str(out), trials=5, min_steps=8, max_steps=24, reduction_factor=2, **TINY))
    trials = [t for t in load(out).trials if "duplicate_of" not in t.user_attrs]
    assert len(trials) == 5
    r, competing, seen = 2, {}, set()
    for t in sorted(trials, key=lambda t: t.datetime_complete):
        if t.user_attrs.get("pruned_by", "").startswith("screen"):
            continue
        if t.user_attrs.get("reference"):  # the published head: never pruned, so never in Optuna's competition
            assert t.state.name == "COMPLETE" and t.user_attrs["steps_trained"] == 24
            assert not any(k.startswith("completed_rung") for k in t.system_attrs)
            continue
        # values are reported only at epoch ends at the rungs (8 and 16 steps = epochs 2 and 4)
        assert set(t.intermediate_values) <= {8, 16}, t.intermediate_values
        assert set(t.user_attrs["rungs"]) == {str(s) for s in t.intermediate_values}
        for k, step in enumerate((8, 16)):
            if step not in t.intermediate_values:
                break
            v = t.intermediate_values[step]
            assert v == pytest.approx(t.user_attrs["rungs"][str(step)]["score"])
            vals = sorted(competing.setdefault(step, []) + [v], reverse=True)
            promoted = v >= vals[max(len(vals) // r - 1, 0)]  # Optuna's rule: the best 1/r so far
            competing[step].append(v)
            if not promoted:
                assert t.state.name == "PRUNED" and f"successive halving at step {step}" in t.user_attrs["pruned_by"]
                assert t.user_attrs["steps_trained"] == step
                seen.add("pruned")
                break
        else:
            assert t.state.name == "COMPLETE" and t.user_attrs["steps_trained"] == 24
            seen.add("complete")
    assert seen == {"pruned", "complete"}  # (seed 0, theory score: 3 complete, 2 pruned at step 8)
    # the rung table and the summary
    rungs = read_trials_csv(out / "rungs.csv")
    assert {row["step"] for row in rungs} <= {8, 16} and all(row["score"] is not None for row in rungs)
    summary = json.loads((out / "search.json").read_text())
    assert summary["budget"] == {"min_steps": 8, "max_steps": 24, "reduction_factor": 2, "rungs": [8, 16]}
    assert summary["rung_spearman"]["8"]["n"] == sum(1 for row in rungs if row["step"] == 8)
    assert "at step 8 (every trial that trained so far)" in res.table


def test_no_decision_after_the_first_epoch_alone(tmp_path) -> None:
    """A first rung inside the first epoch (2 steps of a 4-step epoch) is judged at the end of the
    second epoch."""
    out = tmp_path / "search"
    run_search(SearchConfig(out=str(out), trials=3, min_steps=2, max_steps=12, reduction_factor=2, **TINY))
    for t in load(out).trials:
        if t.intermediate_values:
            assert min(t.intermediate_values) == 8, t.intermediate_values


def test_a_trial_config_linking_out_is_not_read_to_resume(tmp_path) -> None:
    """A trial folder resumes when its config.json equals the trial's; one that is a link out of
    the folder is not followed (the trial trains afresh, and training refuses the link)."""
    import os
    import types

    from geohead.search.trial import _same_run

    cfg = types.SimpleNamespace(to_json=lambda: '{"seed": 3}')
    outside = tmp_path / "elsewhere.json"
    outside.write_text('{"seed": 3}')
    run = tmp_path / "trials" / "0000"
    run.mkdir(parents=True)
    (run / "last.safetensors").write_bytes(b"x")
    (run / "config.json").write_text('{"seed": 3}')
    assert _same_run(run, cfg)
    (run / "config.json").unlink()
    os.symlink(outside, run / "config.json")
    assert not _same_run(run, cfg)
