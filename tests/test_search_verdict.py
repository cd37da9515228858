"""The published head in every search and the verdict against it; --workers auto."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from geohead.cli import main
from geohead.heads import HeadSpec, preset_spec
from geohead.search import SearchConfig, run_search
from geohead.search.config import auto_workers
from geohead.search.reference import in_space, is_reference, published_spec
from geohead.search.space import SearchSpace
from geohead.search.verdict import NOISE_UNITS, decide, run_verdict

pytestmark = pytest.mark.usefixtures("one_thread", "tiny_whitening")
TINY = dict(n_train=256, batch_size=64, probe_train=128, probe_test=64, orbit_images=8, families=("hue",),
            screen_batch=64, timeout=None, progress=False, heartbeat=2)


# ---------------------------------------------------------------------- the reference head
@pytest.mark.parametrize("objective, depth, hidden, out, act", [
    ("barlow", 3, 512, 512, "relu"),     # 8192 capped at 4·d
    ("vicreg", 3, 512, 512, "relu"),
    ("simclr", 2, 128, 128, "relu"),     # hidden = d, out 128
    ("byol", 2, 512, 256, "relu"),       # 4096 -> 512, out 256
    ("simsiam", 3, 512, 512, "relu"),    # 2048 -> 512
    ("dino", 3, 512, 256, "gelu"),       # DINO keeps GELU; prototypes from the base head
])
def test_reference_is_the_published_preset_with_widths_capped(objective, depth, hidden, out, act) -> None:
    base = preset_spec(objective, 128, smooth=True)
    spec = published_spec(objective, base, SearchSpace.default(128))
    paper = preset_spec(objective, 128, smooth=False)
    assert (spec.depth, spec.hidden_dim, spec.out_dim, spec.activation) == (depth, hidden, out, act)
    assert (spec.norm, spec.last_norm, spec.whiten) == (paper.norm, paper.last_norm, paper.whiten)
    assert spec.prototypes == base.prototypes and spec.in_dim == 128
    assert in_space(SearchSpace.default(128), spec)
    assert not in_space(SearchSpace.default(128).constrain({"activation": "silu"}), spec)


# ---------------------------------------------------------------------- the verdict's arithmetic
def test_decide_matches_the_paired_formula_by_hand() -> None:
    values = {"pick": {0: 0.70, 1: 0.64, 2: 0.66}, "published": {0: 0.60, 1: 0.61, 2: 0.57}}
    d = decide(values, study_seed=0)                   # no labels: the score alone
    diffs = [0.10, 0.03, 0.09]                         # per seed; the study's seed 0 enters σ_d only
    assert d.score.margin == pytest.approx((0.03 + 0.09) / 2)
    mu = sum(diffs) / 3
    assert d.score.spread == pytest.approx(math.sqrt(sum((x - mu) ** 2 for x in diffs) / 2))
    assert d.score.noise == pytest.approx(d.score.spread / math.sqrt(2))
    assert d.knn is None and d.pick == (d.score.margin > NOISE_UNITS * d.score.noise)
    assert d.basis == ("score" if d.pick else "noise")


def test_a_seed_shift_shared_by_both_heads_is_not_noise() -> None:
    """DINO's scores (search_transfer22): both heads moved by ~0.02 between seeds 0 and 1, the
    difference by 0.0005. The first model (one head's spread) called +0.0036 noise; paired, it is not."""
    values = {"pick": {0: 0.7330, 1: 0.7529}, "published": {0: 0.7299, 1: 0.7493}}
    d = decide(values, study_seed=0)
    assert d.score.margin == pytest.approx(0.0036) and d.score.spread == pytest.approx(0.0005 / math.sqrt(2))
    assert d.pick
    one_head = math.sqrt(((0.7330 - 0.7529) ** 2 + (0.7299 - 0.7493) ** 2) / 4)   # the pooled spread, 0.0139
    assert d.score.margin < NOISE_UNITS * one_head * math.sqrt(2)                   # what the first model said


# The measured cases (benchmarks/results/verdict_seeds_cpu.json, rounded to 4 decimals): score and
# backbone kNN per seed (0 = the study's) for pick and published; 20-epoch linear probe, pick - published.
DINO = ({"pick": {0: 0.7330, 1: 0.7529, 2: 0.7572, 3: 0.7213}, "published": {0: 0.7299, 1: 0.7493, 2: 0.7560, 3: 0.7224}},
        {"pick": {0: 0.2010, 1: 0.2000, 2: 0.2085, 3: 0.2180}, "published": {0: 0.2005, 1: 0.1905, 2: 0.2010, 3: 0.2090}})
VICREG_THEORY = ({"pick": {0: 0.5965, 1: 0.5943, 2: 0.5874, 3: 0.5905},
                  "published": {0: 0.5336, 1: 0.5350, 2: 0.5162, 3: 0.5245}},
                 {"pick": {0: 0.2615, 1: 0.2600, 2: 0.2530, 3: 0.2505},
                  "published": {0: 0.2595, 1: 0.2645, 2: 0.2780, 3: 0.2720}})


def _seeds(case: tuple[dict, dict], keep: tuple[int, ...]) -> tuple[dict, dict]:
    return tuple({k: {s: by[s] for s in keep} for k, by in x.items()} for x in case)  # type: ignore[return-value]


def test_dino_a_score_margin_counts_where_knn_does_not_contradict_it() -> None:
    """DINO (+2.8 points at 20 epochs): at one fresh seed the kNN margin (+0.95) is inside its
    noise, the score's is beyond it; at three fresh seeds the kNN margin is beyond it."""
    values, knn = _seeds(DINO, (0, 1))
    d = decide(values, 0, knn)
    assert d.pick and d.basis == "score" and not d.knn.beyond_noise and d.knn.margin == pytest.approx(0.0095)
    d = decide(DINO[0], 0, DINO[1])
    assert d.pick and d.basis == "kNN" and d.knn.margin == pytest.approx((0.0095 + 0.0075 + 0.0090) / 3)
    assert not d.score.beyond_noise                    # the score alone would have discarded it


def test_vicreg_theory_a_score_the_backbone_contradicts_is_vetoed() -> None:
    """VICReg under --score theory (-2.0 points at 20 epochs): the score prefers the pick at every
    seed, far beyond its noise; the backbone kNN is lower at every fresh seed."""
    for keep in ((0, 1), (0, 1, 2, 3)):
        values, knn = _seeds(VICREG_THEORY, keep)
        assert decide(values, 0).pick                   # the score alone keeps the pick
        d = decide(values, 0, knn)
        assert not d.pick and d.basis == "kNN lower" and d.score.beyond_noise and d.knn.margin < 0
    values, knn = VICREG_THEORY
    missing = {"pick": {**knn["pick"], 2: None}, "published": knn["published"]}   # no labels at a seed
    assert decide(values, 0, missing).knn is None and decide(values, 0, missing).basis == "score"


class _Trial:
    def __init__(self, number: int, value: float, head: HeadSpec) -> None:
        self.number, self.values = number, [value]
        self.user_attrs = {"head": head.to_dict(), "knn_backbone": 0.5, "score": value}


def _verdict(tmp_path: Path, fresh: dict[str, float], n_seeds: int = 1, knn: dict[str, float] | None = None,
             steps: int | None = None, shift: dict[int, float] | None = None, heads: int | None = None):
    """run_verdict with a stand-in measure: ``fresh[label]`` at every fresh seed (plus ``shift[seed]``
    for the pick, else 0.001 · seed for both); the calls are (depth, seed, folder name, steps)."""
    pick_head, ref_head = HeadSpec(in_dim=8, out_dim=8, depth=1), HeadSpec(in_dim=8, out_dim=8, depth=2, hidden_dim=8)
    calls = []

    def measure(spec: HeadSpec, seed: int, out: Path, steps: int | None = None) -> dict[str, float]:
        calls.append((spec.depth, seed, out.name, steps))
        label = "pick" if spec == pick_head else "published"
        extra = (shift or {}).get(seed, 0.0) if label == "pick" else 0.0
        return {"value": fresh[label] + extra + (0.0 if shift else 0.001 * seed), "knn_backbone": (knn or {}).get(label)}

    v = run_verdict(_Trial(3, 0.80, pick_head), _Trial(0, 0.70, ref_head), n_seeds, 0, tmp_path, measure, lambda s: None,
                    steps, "300 epochs of 10,000 images" if steps else "", heads=heads)
    return v, [c[:2] for c in calls] if steps is None else calls


def test_a_margin_beyond_the_noise_keeps_the_pick_and_within_it_recommends_the_published_head(tmp_path) -> None:
    v, calls = _verdict(tmp_path / "a", {"pick": 0.79, "published": 0.70})
    assert calls == [(1, 1), (2, 1)]                       # both heads at the fresh seed 1
    assert v.recommended == "pick" and v.basis == "score" and v.score_margin.margin == pytest.approx(0.09)
    assert v.score_margin.spread == pytest.approx(0.01 / math.sqrt(2))   # differences 0.10 (seed 0), 0.09 (seed 1)
    assert v.knn_margin is None and "beyond the noise" in v.reason
    # at the fresh seed the pick is no better: within the noise -> the published head
    v, _ = _verdict(tmp_path / "b", {"pick": 0.71, "published": 0.70})
    assert v.recommended == "published" and v.basis == "noise" and "within the noise" in v.reason
    assert v.score_margin.margin == pytest.approx(0.01) and not v.score_margin.beyond_noise
    assert "--confirm-seeds 3" in v.reason
    # with the study's head count, the hint is the whole rerun: --trials holds the search where it stopped
    v, _ = _verdict(tmp_path / "b2", {"pick": 0.71, "published": 0.70}, heads=14)
    assert "rerun with --confirm-seeds 3 --trials 14 to measure it more closely" in v.reason
    # with labels: beyond the noise in score, worse in backbone kNN -> the published head, and why
    v, _ = _verdict(tmp_path / "c", {"pick": 0.79, "published": 0.70}, knn={"pick": 0.38, "published": 0.40})
    assert v.recommended == "published" and v.basis == "kNN lower" and v.knn_margin.margin == pytest.approx(-0.02)
    assert "the score misleads" in v.reason and "backbone kNN -2.00 points" in v.reason
    # confirmation runs are stored and reused: a rerun trains nothing
    _, calls = _verdict(tmp_path / "b", {"pick": 0.71, "published": 0.70})
    assert calls == []


def test_a_verdict_at_its_own_schedule_pairs_the_fresh_seeds_alone(tmp_path) -> None:
    """The trials' seed 0 was measured at the search's schedule (pick 0.80, published 0.70, a
    +0.10 difference); runs at another schedule compare only among themselves."""
    v, calls = _verdict(tmp_path, {"pick": 0.70, "published": 0.70}, n_seeds=2, steps=40, shift={1: 0.02, 2: 0.04})
    assert calls == [(1, 1, "pick_s1_40steps", 40), (2, 1, "published_s1_40steps", 40),    # seed by seed
                     (1, 2, "pick_s2_40steps", 40), (2, 2, "published_s2_40steps", 40)]
    assert v.values["pick"].keys() == {1, 2} and v.steps == 40          # no study-seed value
    assert v.score_margin.margin == pytest.approx(0.03)                  # mean of 0.02 and 0.04
    assert v.score_margin.spread == pytest.approx(math.sqrt(2) * 0.01)   # sample sd of {0.02, 0.04}
    assert v.score_margin.noise == pytest.approx(0.01)
    assert v.recommended == "pick" and "2 fresh seeds (300 epochs of 10,000 images each)" in v.reason
    assert v.to_dict()["steps"] == 40
    # the same margin paired with the study seed's +0.10 would carry a larger spread
    d = decide({"pick": {0: 0.80, 1: 0.72, 2: 0.74}, "published": {0: 0.70, 1: 0.70, 2: 0.70}}, 0)
    assert d.score.margin == pytest.approx(0.03) and d.score.spread > 2 * v.score_margin.spread
    # a pick no better at the long schedule: the published head, though it led by 0.10 at the short one
    v, _ = _verdict(tmp_path / "b", {"pick": 0.70, "published": 0.70}, n_seeds=2, steps=40, shift={1: -0.01, 2: 0.005})
    assert v.recommended == "published" and v.basis == "noise"
    # stored at their schedule: a rerun trains nothing, a verdict at the trials' schedule trains its own
    _, calls = _verdict(tmp_path, {"pick": 0.70, "published": 0.70}, n_seeds=2, steps=40, shift={1: 0.02, 2: 0.04})
    assert calls == []
    _, calls = _verdict(tmp_path, {"pick": 0.70, "published": 0.70}, n_seeds=1)
    assert calls == [(1, 1), (2, 1)]


def test_no_reference_or_the_reference_picked_trains_nothing(tmp_path) -> None:
    head = HeadSpec(in_dim=8, out_dim=8, depth=1)
    never = lambda *a: pytest.fail("nothing to re-train")  # noqa: E731
    assert run_verdict(_Trial(2, 0.5, head), None, 1, 0, tmp_path, never, print).recommended == "pick_unchecked"
    same = _Trial(2, 0.5, head)
    assert run_verdict(same, same, 1, 0, tmp_path, never, print).recommended == "published"
    assert run_verdict(_Trial(2, 0.5, head), _Trial(0, 0.4, head), 0, 0, tmp_path, never, print).recommended == "pick_unchecked"


def test_a_diverged_verdict_run_leaves_the_pick_unchecked_and_says_which_run(tmp_path) -> None:
    from geohead.search import TrialDiverged

    pick_head, ref_head = HeadSpec(in_dim=8, out_dim=8, depth=1), HeadSpec(in_dim=8, out_dim=8, depth=2, hidden_dim=8)

    def measure(spec: HeadSpec, seed: int, out: Path, steps: int | None = None) -> dict[str, float]:
        if spec == ref_head and seed == 2:
            raise TrialDiverged("train: non-finite loss")
        return {"value": 0.8 if spec == pick_head else 0.7, "knn_backbone": 0.4}

    v = run_verdict(_Trial(3, 0.80, pick_head), _Trial(0, 0.70, ref_head), 2, 0, tmp_path, measure, lambda s: None, 40)
    assert v.recommended == "pick_unchecked" and (v.pick, v.reference) == (3, 0)
    assert "the published head's run at fresh seed 2 for 40 steps diverged (train: non-finite loss)" in v.reason
    assert v.values["pick"] == {1: 0.8, 2: 0.8} and v.values["published"] == {1: 0.7}   # what was measured


def test_backbone_names_that_share_a_folder_part_get_folders_of_their_own() -> None:
    from geohead.search.verdict import _folder_name

    assert _folder_name("resnet18_cifar") == "resnet18_cifar"                 # a plain name is its folder
    a, b = _folder_name("hf-hub:org/net"), _folder_name("hf-hub:org:net")    # both map to hf-hub_org_net
    assert a != b and a.startswith("hf-hub_org_net_") and len(a) <= 64
    long_a, long_b = _folder_name("r" * 70 + "a"), _folder_name("r" * 70 + "b")
    assert long_a != long_b and max(len(long_a), len(long_b)) <= 64


# ---------------------------------------------------------------------- end to end
def test_every_search_measures_the_published_head_unpruned_and_ends_with_a_verdict(tmp_path) -> None:
    import optuna

    out = tmp_path / "s"
    # successive halving 2 -> 6 steps: trials can be pruned at the rung, the reference cannot
    res = run_search(SearchConfig(out=str(out), trials=5, min_steps=2, max_steps=6, **TINY))
    study = optuna.load_study(study_name="barlow-shapes-default", storage=f"sqlite:///{out / 'study.db'}")
    refs = [t for t in study.trials if is_reference(t)]
    assert len(refs) == 1 and refs[0].number == 0 and refs[0].state.name == "COMPLETE"
    assert refs[0].user_attrs["steps_trained"] == 6
    ref_spec = HeadSpec.from_dict(refs[0].user_attrs["head"])
    assert (ref_spec.depth, ref_spec.activation, ref_spec.hidden_dim, ref_spec.out_dim) == (3, "relu", 512, 512)
    summary = json.loads((out / "search.json").read_text())
    v = summary["verdict"]
    assert summary["reference"]["number"] == 0 and v["reference"] == 0 and v["pick"] == summary["best"]["number"]
    assert v["recommended"] in ("pick", "published")
    best = HeadSpec.load(out / "best_head.json")
    pick = HeadSpec.load(out / "pick_head.json")
    assert pick.to_dict() == summary["best"]["head"]
    assert best == (ref_spec if v["recommended"] == "published" else pick)
    if v["pick"] != 0:  # the pick and the reference were re-trained at seed 1, and their margin is the formula's
        stored = {k: json.loads((out / "confirm" / f"{k}_s1" / "result.json").read_text()) for k in ("pick", "published")}
        for measure, key in (("score_margin", "value"), ("knn_margin", "knn_backbone")):   # shapes has labels
            assert v[measure]["margin"] == pytest.approx(stored["pick"][key] - stored["published"][key])
        d = decide({k: {int(s): x for s, x in by.items()} for k, by in v["values"].items()}, 0,
                   {k: {int(s): x for s, x in by.items()} for k, by in v["knn"].items()})
        assert (v["basis"], v["knn_margin"]["noise"]) == (d.basis, pytest.approx(d.knn.noise))
        assert v["recommended"] == ("pick" if d.pick else "published")
    assert "verdict: " in res.table and "published head (trial 0)" in res.table
    # a rerun resumes: no second reference trial
    run_search(SearchConfig(out=str(out), trials=5, min_steps=2, max_steps=6, **TINY))
    study = optuna.load_study(study_name="barlow-shapes-default", storage=f"sqlite:///{out / 'study.db'}")
    assert sum(is_reference(t) for t in study.trials) == 1


def test_the_rerun_the_hint_names_trains_only_the_new_seeds(tmp_path) -> None:
    import optuna

    out = tmp_path / "s"
    first = run_search(SearchConfig(out=str(out), trials=3, steps=2, **TINY))
    storage = f"sqlite:///{out / 'study.db'}"
    before = [t.number for t in optuna.load_study(study_name="barlow-shapes-default", storage=storage).trials]
    pick = json.loads((out / "search.json").read_text())["verdict"]["pick"]
    # the hint's rerun: more fresh seeds, --trials at the heads the study holds (3, as the table says)
    assert "3 heads measured" in first.table
    run_search(SearchConfig(out=str(out), trials=3, steps=2, confirm_seeds=2, **TINY))
    after = [t.number for t in optuna.load_study(study_name="barlow-shapes-default", storage=storage).trials]
    v = json.loads((out / "search.json").read_text())["verdict"]
    assert after == before and v["pick"] == pick                     # no trial ran, the pick is the same
    assert sorted(int(s) for s in v["values"]["pick"]) == [0, 1, 2]   # the study seed and both fresh seeds
    assert (out / "confirm" / "pick_s2" / "result.json").is_file()


def test_a_verdict_at_the_users_schedule_trains_it_records_it_and_resumes(tmp_path) -> None:
    out = tmp_path / "s"
    cfg = SearchConfig(out=str(out), trials=3, steps=2, confirm_seeds=2, confirm_epochs=2, keep_checkpoints=True, **TINY)
    res = run_search(cfg)
    v = json.loads((out / "search.json").read_text())["verdict"]
    assert v["pick"] != v["reference"]                        # at this seed a candidate beats the published head
    steps = 2 * (256 // 64)                                   # 2 epochs of the 256 images, batch 64
    assert v["steps"] == steps and set(v["values"]["pick"]) == {"1", "2"}
    folder = out / "confirm" / "pick_s2_8steps"
    stored = json.loads((folder / "result.json").read_text())
    assert stored["steps_trained"] == steps and json.loads((folder / "config.json").read_text())["optim"]["max_steps"] == steps
    found_on = json.loads((out / "best_head.json").read_text())["found_on"]
    assert found_on["verdict_epochs"] == 2.0 and found_on["steps"] == 2
    assert "2 steps (0.5 epochs) of 256 images; the verdict's runs 2 epochs; " in res.table
    assert "(2 epochs of 256 images each)" in res.table
    # a run killed after its last checkpoint resumes there: no step is trained again, the measures are equal
    (folder / "result.json").unlink()
    lines = (folder / "metrics.jsonl").read_text()
    run_search(cfg)
    assert (folder / "metrics.jsonl").read_text() == lines
    again = json.loads((folder / "result.json").read_text())
    assert {k: again[k] for k in ("value", "knn_backbone")} == {k: stored[k] for k in ("value", "knn_backbone")}


def test_a_verdict_on_the_users_backbone_trains_both_heads_rescaled_there(tmp_path) -> None:
    out = tmp_path / "s"
    cfg = SearchConfig(out=str(out), trials=3, steps=2, confirm_seeds=2, confirm_backbone="resnet18_w32", **TINY)
    res = run_search(cfg)
    summary = json.loads((out / "search.json").read_text())
    v = summary["verdict"]
    assert v["pick"] != v["reference"] and (v["backbone"], v["steps"]) == ("resnet18_w32", 2)
    assert set(v["values"]["pick"]) == {"1", "2"}            # the study's seed trained another backbone: not paired
    for label, found in (("pick", HeadSpec.load(out / "pick_head.json")),
                         ("published", HeadSpec.from_dict(summary["reference"]["head"]))):
        assert found.in_dim == 128
        folder = out / "confirm" / f"{label}_s2_2steps_resnet18_w32"
        config = json.loads((folder / "config.json").read_text())
        assert config["backbone"]["name"] == "resnet18_w32"
        trained = {k: config["head"]["spec"][k] for k in ("hidden_dim", "out_dim")}
        assert trained == {"hidden_dim": 2 * found.hidden_dim, "out_dim": 2 * found.out_dim}  # d 128 -> 256
        assert json.loads((folder / "result.json").read_text())["dim_backbone"] == 256.0
    found_on = json.loads((out / "best_head.json").read_text())["found_on"]
    assert (found_on["backbone"], found_on["d"], found_on["verdict_backbone"], found_on["verdict_d"]) == (
        "resnet18_w16", 128, "resnet18_w32", 256)
    assert "of 256 images; the verdict's runs on resnet18_w32 (d=256); " in res.table and "(2 steps on resnet18_w32 (d=256) each)" in res.table
    assert ("re-check data and budget first (the verdict trained on d=256, your backbone; --confirm-epochs trains the "
            "verdict at your budget)") in res.table                  # width is off the axes to re-check
    alone = tmp_path / "alone"                                # the published head is the only head: nothing re-trained
    run_search(SearchConfig(out=str(alone), trials=1, steps=2, confirm_seeds=2, confirm_backbone="resnet18_w32", **TINY))
    assert not (alone / "confirm").exists()
    assert "verdict_backbone" not in json.loads((alone / "best_head.json").read_text())["found_on"]


def test_a_reference_outside_a_narrowed_space_is_measured_without_parameters(tmp_path) -> None:
    import optuna

    out = tmp_path / "s"
    run_search(SearchConfig(out=str(out), trials=2, steps=2, fix=("activation=silu",), confirm_seeds=0, **TINY))
    study = optuna.load_study(study_name="barlow-shapes-default", storage=f"sqlite:///{out / 'study.db'}")
    ref = study.trials[0]
    assert is_reference(ref) and ref.params == {} and ref.user_attrs["head"]["activation"] == "relu"
    assert all(t.params for t in study.trials[1:] if "duplicate_of" not in t.user_attrs)
    assert json.loads((out / "search.json").read_text())["verdict"]["recommended"] in ("pick_unchecked", "published")


# ---------------------------------------------------------------------- --workers auto
def test_auto_workers_split_the_machine() -> None:
    assert auto_workers("cpu", n_cpu=2, n_cuda=0) == 2
    assert auto_workers("cpu", n_cpu=16, n_cuda=0) == 4
    assert auto_workers("auto", n_cpu=1, n_cuda=0) == 1
    assert auto_workers("auto", n_cpu=16, n_cuda=3) == 3
    assert auto_workers("cuda:1", n_cpu=16, n_cuda=3) == 1


@pytest.mark.parametrize("args, match", [
    (["--workers", "many"], "--workers 'many' is not a number"),
    (["--workers", "0"], "--workers must be a positive integer, got 0"),
    (["--confirm-seeds", "-1"], "--confirm-seeds must be an integer from 0 to 100, got -1"),
    (["--confirm-seeds", "101"], "--confirm-seeds must be an integer from 0 to 100, got 101"),
    (["--confirm-epochs", "0", "--confirm-seeds", "2"], "--confirm-epochs must be an integer from 1 to 100,000, got 0"),
    (["--confirm-epochs", str(10 ** 400), "--confirm-seeds", "2"], "--confirm-epochs must be an integer from 1 to 100,000"),
    (["--seed", str(2 ** 62), "--confirm-seeds", "2"], "--seed must be an integer from 0 to 2^62 less --confirm-seeds"),
    (["--set", "optim.epochs=100"], "optim.epochs is set by the search (use --min-steps / --max-steps)"),
    (["--set", "optim.batch_size=128"], "optim.batch_size is set by the search (use --batch-size)"),
    (["--set", "seed=4"], "seed is set by the search (use --seed)"),
    (["--confirm-epochs", "300"], "--confirm-epochs 300 needs --confirm-seeds 2 or more (got 1)"),
    (["--confirm-backbone", "resnet18_cifar"], "--confirm-backbone resnet18_cifar needs --confirm-seeds 2 or more (got 1)"),
    (["--confirm-backbone", "r" * 100_000, "--confirm-seeds", "2"],
     "--confirm-backbone must be a backbone name of 1 to 200 characters, got 100,000 characters"),
    (["--backbone", "r" * 300], "--backbone must be a backbone name of 1 to 200 characters, got 300 characters"),
    (["--confirm-backbone", "resnet18_cifr", "--confirm-seeds", "2", "--n-train", "256", "--batch-size", "64"],
     "--confirm-backbone 'resnet18_cifr': unknown backbone 'resnet18_cifr'; close matches: ['resnet18_cifar'"),
])
def test_bad_workers_and_confirm_seeds_exit_2(args, match, tmp_path) -> None:
    r = CliRunner().invoke(main, ["search", "--out", str(tmp_path / "s"), *args])
    assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output
    assert len(r.output) < 1000 and not (tmp_path / "s").exists()      # a huge value is not echoed back


@pytest.mark.parametrize("stored, reused", [({"value": 0.5, "knn_backbone": 0.3}, True), ({"value": 0.5}, True),
                                            ({"knn_backbone": 0.3}, False), ({"value": "x"}, False),
                                            ({"value": float("nan")}, False), ({"value": 0.5, "knn_backbone": [1]}, False)])
def test_a_stored_verdict_result_is_reused_only_when_it_holds_finite_measures(tmp_path, stored, reused) -> None:
    """A result.json of the same head is reused; one without a finite value (edited, or another
    program's) is measured again and replaced (it raised a KeyError, or reached the noise model)."""
    from geohead.search.verdict import _confirmed

    spec = HeadSpec(in_dim=8, out_dim=4)
    folder = tmp_path / "pick_s1"
    folder.mkdir()
    (folder / "result.json").write_text(json.dumps({**stored, "head": spec.to_dict(), "seed": 1}))
    calls = []

    def measure(spec, seed, folder):
        calls.append(seed)
        return {"value": 0.25, "knn_backbone": 0.125}

    rec = _confirmed(spec, 1, folder, measure, lambda s: None, "pick")
    assert (calls == []) == reused
    assert rec["value"] == (stored["value"] if reused else 0.25)
    assert json.loads((folder / "result.json").read_text())["value"] == rec["value"]


@pytest.mark.filterwarnings("ignore:Fixed parameter depth with value 50")  # Optuna's own, for the crafted trial
def test_a_queued_trial_outside_the_space_fails_and_the_search_goes_on(tmp_path) -> None:
    """A resumed study may hold a queued trial whose parameters lie outside the space (Optuna
    returns an enqueued depth of 50 from suggest_int with a warning): it fails with the reason,
    untrained, and the other trials run."""
    import optuna

    from geohead.search.storage import open_storage, storage_url
    from geohead.search.study import create_study

    out = tmp_path / "s"
    cfg = SearchConfig(out=str(out), trials=3, steps=2, confirm_seeds=0, **TINY)
    out.mkdir()
    study = create_study(cfg, open_storage(storage_url(None, out), None))
    study.enqueue_trial({"depth": 50, "out_dim": 64})
    run_search(cfg)
    trials = optuna.load_study(study_name=cfg.study_name, storage=storage_url(None, out)).trials
    bad = [t for t in trials if t.params.get("depth") == 50]
    assert len(bad) == 1 and bad[0].state.name == "FAIL" and "outside the search space" in bad[0].user_attrs["fail_reason"]
    assert not (out / "trials" / f"{bad[0].number:04d}" / "metrics.jsonl").exists()
    assert sum(t.state.name == "COMPLETE" for t in trials) >= 2
