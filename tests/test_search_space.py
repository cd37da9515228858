"""The search space, --fix/--range parsing, the score, and the search's statistics and plots (no training)."""
from __future__ import annotations

import csv
import math
import random

import pytest
from click.testing import CliRunner

from geohead.cli import main
from geohead.heads import GeometricHead, HeadSpec
from geohead.search.score import SCORE_WEIGHTS, geometric_score, score_components
from geohead.search.plots import _pareto, _plot_criteria, scored_terms, write_search_plots
from geohead.search.results import format_rho, read_trials_csv, spearman, spearman_test
from geohead.search.space import DIMENSIONS, SearchSpace, SpaceError, parse_constraints

BASE = HeadSpec(in_dim=128, out_dim=64)


# ---------------------------------------------------------------------- space
def test_default_space_scales_widths_to_the_backbone() -> None:
    s = SearchSpace.default(512)
    assert s.choices["depth"] == (1, 2, 3, 4)
    assert s.choices["hidden_dim"] == (256, 512, 1024, 2048)
    assert s.choices["out_dim"] == (128, 256, 512, 1024, 2048)
    assert set(s.choices["activation"]) == {"silu", "gelu", "mish", "softplus", "tanh", "relu", "identity"}
    assert s.choices["norm"] == ("batch", "layer", "none") and s.choices["whiten"] == ("none", "pca", "zca")
    # depth-1 heads share only out_dim/last_norm/whiten: 5*4*3 of them, 3*(4*7*3)*60 deeper ones
    assert s.size() == 60 + 3 * 84 * 60


def test_fixed_trial_gives_the_spec_and_depth_one_is_conditional() -> None:
    import optuna

    space = SearchSpace.default(128)
    deep = space.suggest(optuna.trial.FixedTrial({"depth": 3, "hidden_dim": 256, "out_dim": 512, "activation": "mish",
                                                  "norm": "layer", "last_norm": "batch_noaffine", "whiten": "zca"}), BASE)
    assert deep == BASE.replace(depth=3, hidden_dim=256, out_dim=512, activation="mish", norm="layer",
                                last_norm="batch_noaffine", whiten="zca")
    # a depth-1 trial never asks for hidden_dim/activation/norm (FixedTrial would raise if it did)
    lin = space.suggest(optuna.trial.FixedTrial({"depth": 1, "out_dim": 32, "last_norm": "none", "whiten": "none"}), BASE)
    assert (lin.depth, lin.out_dim, lin.activation, lin.norm, lin.last_norm, lin.whiten) == (1, 32, "identity", None, None, None)
    GeometricHead.from_spec(lin)
    GeometricHead.from_spec(deep)


def test_constraints_narrow_the_space_and_fixed_values_are_not_sampled() -> None:
    import optuna

    fixed, ranged = parse_constraints(["activation=swish", "hidden_dim=384"],
                                      ["depth=2:3", "out_dim=64:256", "norm=batch,none"])
    assert fixed == {"activation": "silu", "hidden_dim": 384}
    space = SearchSpace.default(128).constrain(fixed, ranged)
    assert space.choices["depth"] == (2, 3) and space.choices["out_dim"] == (64, 128, 256)
    assert space.choices["norm"] == ("batch", "none") and space.choices["hidden_dim"] == (384,)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(25):
        t = study.ask()
        spec = space.suggest(t, BASE)
        assert spec.depth in (2, 3) and spec.activation == "silu" and spec.hidden_dim == 384 and spec.norm in ("batch", None)
        assert "activation" not in t.params and "hidden_dim" not in t.params
        seen.add(spec.depth)
        study.tell(t, 0.0)
    assert seen == {2, 3}
    # deeper than the default choices: a range of depths is every integer in it
    assert SearchSpace.default(128).constrain(*parse_constraints([], ["depth=3:6"])).choices["depth"] == (3, 4, 5, 6)


@pytest.mark.parametrize("fix, rng, match", [
    (["activaton=silu"], [], r"unknown dimension 'activaton' \(did you mean 'activation'\?\)"),
    (["depth"], [], r"must look like KEY=VALUE"),
    (["depth=two"], [], r"depth must be a positive integer, got 'two'"),
    (["depth=0"], [], r"positive integer, got 0"),
    (["depth=12"], [], r"depth must be between 1 and 8"),
    (["activation=swoosh"], [], r"unknown activation 'swoosh'; choose from \['silu'"),
    (["norm=group"], [], r"unknown norm 'group'"),
    (["whiten="], [], r"the value is empty"),
    (["depth=2", "depth=3"], [], r"depth is fixed twice"),
    ([], ["depth=3:2"], r"low end 3 is above the high end 2; write depth=2:3"),
    ([], ["activation=a:b"], r"activation is not numeric; list its values"),
    ([], ["norm=batch,,layer"], r"empty value in the list"),
    ([], ["out_dim=1:4:8"], r"out_dim must be a positive integer"),
    (["depth=2"], ["depth=2:3"], r"both fixed \(--fix\) and ranged"),
])
def test_bad_constraints_name_the_value_and_the_fix(fix, rng, match) -> None:
    with pytest.raises(SpaceError, match=match):
        parse_constraints(fix, rng)


def test_a_range_that_keeps_no_width_says_so() -> None:
    with pytest.raises(SpaceError, match=r"keeps none of the candidates \[64, 128, 256, 512\].*--fix hidden_dim=N"):
        SearchSpace.default(128).constrain(*parse_constraints([], ["hidden_dim=300:400"]))


@pytest.mark.parametrize("args, match", [
    (["--fix", "widht=3"], "unknown dimension 'widht'"),
    (["--range", "depth=4:1"], "low end 4 is above the high end 1"),
    (["--timeout", "soon"], "--timeout 'soon' is not a duration"),
    (["--objective", "barlo"], "unknown objective 'barlo'"),
    (["--set", "head.spec.depth=2"], "the search chooses the head; use --fix/--range"),
    (["--steps", "0"], "--steps must be a positive integer"),
])
def test_cli_rejects_bad_input_with_exit_code_2_and_no_traceback(args, match, tmp_path) -> None:
    res = CliRunner().invoke(main, ["search", "--out", str(tmp_path / "s"), *args])
    assert res.exit_code == 2, res.output
    assert match in res.output and "Traceback" not in res.output
    assert not (tmp_path / "s").exists()  # nothing was started


# ---------------------------------------------------------------------- score
def test_score_transforms_on_known_values() -> None:
    # RankMe 16 of d = 256: log 16 / log 256 = 0.5; local invariance 1/3 -> 3/4; 3 of 12 tangent
    # directions lost -> 0.25
    crit = {"rankme_backbone": 16.0, "dim_backbone": 256.0, "std_backbone": 0.5, "local_invariance": 1 / 3,
            "fisher_soft_rank_loss": 3.0, "fisher_tangent_rank": 12.0, "heff_spread": 0.25, "compression": 7.0}
    comps = score_components(crit)
    assert comps == pytest.approx({"rankme": 0.5, "uniformity": 0.5, "invariance": 0.75, "fisher": 0.25,
                                   "conditioning": 0.25})
    w = SCORE_WEIGHTS
    assert geometric_score(crit) == pytest.approx(sum(w[k] * comps[k] for k in w) / sum(w.values()))
    assert geometric_score(crit, {"rankme": 1.0, "invariance": 3.0}) == pytest.approx((0.5 + 3 * 0.75) / 4)
    # undefined values count as worst, values beyond the range are clipped
    bad = score_components({"rankme_backbone": 0.0, "dim_backbone": 256.0, "std_backbone": 2.0,
                            "local_invariance": float("nan"), "heff_spread": float("nan")})
    assert bad == {"rankme": 0.0, "uniformity": 1.0, "invariance": 0.0, "fisher": 0.0, "conditioning": 0.0}
    assert score_components({"rankme_backbone": 300.0, "dim_backbone": 256.0})["rankme"] == 1.0


def test_heff_stable_rank_of_a_linear_head_on_a_quadratic_objective() -> None:
    """MSE to a target through a linear head: H_eff = c·I_B ⊗ WᵀW, whose spectrum Lanczos resolves
    in a few steps; the stable rank ‖H‖_F²/max|λ|² must equal the dense spectrum's."""
    import torch

    from geohead.objectives import get_objective
    from geohead.geometry import heff_conditioning

    torch.manual_seed(0)
    head = GeometricHead(5, 3, depth=1, norm=None).double()
    obj = get_objective("byol", distance="mse")
    z1, z2 = torch.randn(4, 5, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    hc = heff_conditioning(head, obj, z1, z2, predictor=torch.nn.Identity(), probes=40)
    from geohead.geometry import EffectiveHessian

    dense = EffectiveHessian(head, obj, z1, z2, predictor=torch.nn.Identity()).H.dense()
    ev = torch.linalg.eigvalsh(dense)
    expect = float((ev ** 2).sum() / ev.abs().max() ** 2)
    assert hc["stable_rank"] == pytest.approx(expect, rel=1e-6)  # 20 <= 40 probes: the norm is exact
    assert hc["spread"] == pytest.approx(math.log(expect) / math.log(20))
    assert hc["lambda_max"] == pytest.approx(float(ev.max()), rel=1e-5)


# ---------------------------------------------------------------------- statistics and plots
def test_spearman_matches_scipy_and_ignores_missing_values() -> None:
    from scipy.stats import spearmanr

    rng = random.Random(0)
    x = [rng.random() for _ in range(20)]
    y = [a + 0.5 * rng.random() for a in x]
    ref = spearmanr(x, y)
    got = spearman(x + [None, float("nan")], y + [0.3, 0.1])
    assert got["n"] == 20 and got["rho"] == pytest.approx(ref.statistic) and got["p"] == pytest.approx(ref.pvalue)
    assert spearman([1, 2], [3, 4]) == {"rho": None, "p": None, "n": 2}
    assert spearman([1, 1, 1], [1, 2, 3])["rho"] is None  # constant column


def synthetic_study(n: int, seed: int = 0):
    """An in-memory study of ``n`` completed heads (hidden_dim conditional on depth > 1), the
    value (also the ``score`` attribute, as a search records it) driven by depth and activation."""
    import optuna
    from optuna.distributions import CategoricalDistribution, IntDistribution

    rng = random.Random(seed)
    dists = {"depth": IntDistribution(1, 4), "activation": CategoricalDistribution(["silu", "relu", "gelu"]),
             "out_dim": CategoricalDistribution([32, 64, 128]), "hidden_dim": CategoricalDistribution([64, 128, 256, 512])}
    study = optuna.create_study(direction="maximize", storage=optuna.storages.InMemoryStorage())
    for _ in range(n):
        params = {"depth": rng.randint(1, 4), "activation": rng.choice(["silu", "relu", "gelu"]),
                  "out_dim": rng.choice([32, 64, 128])}
        if params["depth"] > 1:
            params["hidden_dim"] = rng.choice([64, 128, 256])
        value = 0.3 * params["depth"] + 0.5 * (params["activation"] == "silu") + 0.1 * rng.random()
        study.add_trial(optuna.trial.create_trial(params=params, distributions={k: dists[k] for k in params}, value=value,
                                                  user_attrs={"score": value}))
    return study


def test_importances_are_optuna_dashboards(tmp_path) -> None:
    """PED-ANOVA, the target negated for a maximised objective: what optuna-dashboard shows; the
    same numbers from trials.csv with the distributions search.json records."""
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

    from geohead.search.importance import param_importances, row_importances, study_distributions
    from geohead.search.results import trial_rows, write_trials_csv

    study = synthetic_study(20)
    with pytest.warns(UserWarning):  # optuna's note that PED-ANOVA ranks low targets best
        ref = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(), target=lambda t: -t.values[0])
    got = param_importances(study)
    assert got.values == ref and got.n == 20 and not got.note and next(iter(got.values)) == "depth"
    write_trials_csv(trial_rows(study), tmp_path / "trials.csv")
    rows = read_trials_csv(tmp_path / "trials.csv")
    assert row_importances(rows, "score", study_distributions(study)).values == pytest.approx(ref)
    assert set(row_importances(rows, "score").values) == set(ref)  # distributions from the values drawn
    # where importance means nothing: a note, no numbers
    few = param_importances(synthetic_study(2))
    assert few.values == {} and "at least 3" in few.note
    same = [{"state": "COMPLETE", "score": 0.1 * i, "depth": 2, "activation": "silu"} for i in range(5)]
    assert "one value" in row_importances(same, "score").note
    flat = [{"state": "COMPLETE", "score": 0.5, "depth": 1 + i % 2} for i in range(5)]
    assert "same value" in row_importances(flat, "score").note


def test_importance_plot_notes_what_it_cannot_compute(tmp_path) -> None:
    (tmp_path / "trials.csv").write_text("number,state,score,knn_backbone,depth\n0,COMPLETE,0.5,0.3,2\n1,COMPLETE,0.4,0.2,3\n")
    assert (tmp_path / "param_importances.png") in write_search_plots(tmp_path)


def test_exact_spearman_p_enumerates_every_pairing() -> None:
    import itertools

    from scipy.stats import spearmanr

    x, y = [0.3, 0.1, 0.8, 0.5, 0.9], [0.2, 0.4, 0.7, 0.6, 0.65]
    rho = spearmanr(x, y).statistic
    perms = list(itertools.permutations(x))
    brute = sum(abs(spearmanr(xp, y).statistic) >= abs(rho) - 1e-12 for xp in perms) / len(perms)
    got = spearman_test(x, y)
    assert got["exact"] and got["n"] == 5 and got["rho"] == pytest.approx(rho) and got["p"] == pytest.approx(brute)
    assert format_rho(got) == f"ρ={rho:+.2f}, p={brute:.2g} (exact, n=5)"
    # n = 3, perfectly ordered: 2 of the 6 pairings are as extreme, never p = 0
    assert spearman_test([1, 2, 3], [4, 5, 6])["p"] == pytest.approx(1 / 3)
    assert "e+00" not in format_rho(spearman_test([1, 2, 3], [4, 5, 6]))
    big = spearman_test(list(range(12)), list(range(12)))
    assert not big["exact"] and format_rho(big) == "ρ=+1.00, p<0.001 (n=12)"


def test_criteria_plot_has_one_panel_per_scored_criterion() -> None:
    from geohead.search.score import CRITERION_NAMES, THEORY_WEIGHTS

    rng = random.Random(2)
    done = [{"state": "COMPLETE", "score": rng.random(), "knn_backbone": rng.random(), "score_rankme": rng.random(),
             "score_conditioning": rng.random(), "compression": rng.random(), "fisher_effective_rank": 10 * rng.random(),
             "dim_backbone": 128} for _ in range(6)]
    terms = scored_terms({})  # no search.json: the default (theory) score
    assert terms == THEORY_WEIGHTS
    fig = _plot_criteria(done, terms)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title().splitlines()[0] for ax in axes] == [CRITERION_NAMES[k] for k in THEORY_WEIGHTS]
    assert all("(exact, n=6)" in ax.get_title() for ax in axes)
    assert all(len(ax.get_xticks()) <= 6 for ax in axes)
    assert scored_terms({"score": "geometry"}) == {"rankme": 1.0}
    assert len([ax for ax in _plot_criteria(done, scored_terms({"score": "geometry"})).axes if ax.get_visible()]) == 1
    junk = {f"x{i}": 1.0 for i in range(300)}  # a foreign search.json: names that are no criterion draw no panel
    assert scored_terms({"score_weights": {**junk, "rankme": 2.0}}) == {"rankme": 2.0}


def test_pareto_front_of_known_points() -> None:
    pts = [(1, 1), (2, 0), (0, 2), (0.5, 0.5), (2, 0), (1, 0.5)]
    assert _pareto(pts) == [0, 1, 2, 4]


def test_write_search_plots_from_trials_csv(tmp_path) -> None:
    rng = random.Random(1)
    cols = ["number", "state", "value", "score", "knn_backbone", *DIMENSIONS, "score_rankme", "score_uniformity",
            "score_compression", "score_conditioning", "heff_condition", "screen_head_escape"]
    with open(tmp_path / "trials.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols)
        w.writeheader()
        for i in range(12):
            s = [rng.random() for _ in range(4)]
            w.writerow({"number": i, "state": "COMPLETE" if i < 10 else "PRUNED", "value": sum(s) / 4,
                        "score": sum(s) / 4, "knn_backbone": 0.1 + 0.3 * s[0], "depth": 1 + i % 4,
                        "hidden_dim": "n/a" if i % 4 == 0 else 256, "out_dim": 64, "activation": "silu", "norm": "batch",
                        "last_norm": "none", "whiten": "none", "score_rankme": s[0], "score_uniformity": s[1],
                        "score_compression": s[2], "score_conditioning": s[3], "heff_condition": 10 ** (1 + 5 * s[3]),
                        "screen_head_escape": "" if i == 3 else s[1]})
    paths = write_search_plots(tmp_path)
    assert [p.name for p in paths] == ["criteria_vs_knn.png", "pareto_front.png", "param_importances.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000
    rows = read_trials_csv(tmp_path / "trials.csv")
    assert rows[0]["depth"] == 1 and rows[0]["hidden_dim"] == "n/a" and isinstance(rows[1]["score"], float)
    assert rows[3]["screen_head_escape"] is None and not math.isnan(rows[4]["screen_head_escape"])
    with pytest.raises(FileNotFoundError, match="run `geohead search --out"):
        write_search_plots(tmp_path / "nowhere")


def test_local_workers_spread_over_the_visible_gpus() -> None:
    from geohead.search.runner import worker_device

    assert [worker_device("cuda", i, 4) for i in range(6)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1"]
    assert worker_device("auto", 3, 2) == "cuda:1"
    assert worker_device("auto", 3, 0) == "auto" and worker_device("cuda", 2, 1) == "cuda"  # no GPU / one GPU
    assert worker_device("cuda:2", 0, 4) == "cuda:2" and worker_device("cpu", 1, 4) == "cpu"  # explicit choice kept


def test_missing_cifar_fails_before_anything_is_written_and_names_download(tmp_path) -> None:
    res = CliRunner().invoke(main, ["search", "--out", str(tmp_path / "s"), "--data", "cifar10",
                                    "--data-root", str(tmp_path / "no_cifar_here")])
    assert res.exit_code == 2, res.output
    assert "cifar10 not found under" in res.output and "--download" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "s").exists()
    # diagnose has no --download: the message names the options it does have (--data-root, an .npz for --data)
    from geohead.data import load_dataset

    with pytest.raises(FileNotFoundError) as err:
        load_dataset("cifar10", root=tmp_path / "no_cifar_here", n=10)
    assert "--data-root DIR of geohead search and diagnose" in str(err.value) and "(--data path/to/cifar10.npz)" in str(err.value)


def test_download_is_asked_once_before_the_workers(tmp_path, monkeypatch) -> None:
    import geohead.data
    from geohead.search import SearchConfig, SearchError, run_search

    calls = []

    def fake_load(name, root=None, train=True, download=False, **kw):
        calls.append((name, root, train, download))
        raise FileNotFoundError("offline")

    monkeypatch.setattr(geohead.data, "load_dataset", fake_load)
    with pytest.raises(SearchError, match="--data 'cifar10': offline"):
        run_search(SearchConfig(data="cifar10", data_root=str(tmp_path / "c"), download=True, out=str(tmp_path / "s")))
    assert calls == [("cifar10", str(tmp_path / "c"), True, True)]
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("attrs, needle", [({"head": "junk"}, "holds a head that is not a head spec"),
                                           ({"rungs": {"x": {}}}, "holds rungs that are not"),
                                           ({"retry_of": [1]}, "names a retried trial that is not")])
def test_a_resumed_study_with_trials_geohead_did_not_write_is_refused(tmp_path, attrs, needle) -> None:
    """A study from elsewhere whose trials hold junk attributes: refused when it is opened, not
    with a traceback after the whole search (the outputs read the heads, rungs and retries)."""
    import optuna

    from geohead.search import SearchConfig
    from geohead.search.config import SearchError
    from geohead.search.study import create_study

    storage = optuna.storages.InMemoryStorage()
    cfg = SearchConfig(out=str(tmp_path / "s"), device="cpu")
    study = create_study(cfg, storage)
    good = {"head": HeadSpec(in_dim=8, out_dim=4).to_dict(), "rungs": {"10": {"score": 0.5}}, "retry_of": 0}
    study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs=good))
    assert create_study(cfg, storage).study_name == study.study_name  # geohead's own attributes resume
    study.add_trial(optuna.trial.create_trial(value=0.5, user_attrs=attrs))
    with pytest.raises(SearchError, match=f"trial 1 {needle}.*start a new study"):
        create_study(cfg, storage)
