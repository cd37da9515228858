"""Tests for geohead.probes: kNN against a brute-force reference, probes on problems with known
answers, factor binning, the guillotine report, and error messages."""
from __future__ import annotations

import json
import math

import pytest
import torch

from geohead.probes import (
    GuillotineReport,
    chance_level,
    factor_targets,
    guillotine_report,
    knn_accuracy,
    knn_classify,
    linear_probe,
    mlp_probe,
)


pytestmark = pytest.mark.usefixtures("one_thread")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _knn_reference(train, labels, test, k, T, n_cls):
    """InstDisc / solo-learn weighted kNN, one test sample at a time, in float64."""
    preds = []
    for q in test.double():
        sims = []
        for x in train.double():
            sims.append(float(q @ x) / (math.sqrt(float(q @ q)) * math.sqrt(float(x @ x))))
        order = sorted(range(len(sims)), key=lambda j: -sims[j])[:k]
        scores = [0.0] * n_cls
        for j in order:
            scores[int(labels[j])] += math.exp(sims[j] / T)
        preds.append(max(range(n_cls), key=lambda c: (scores[c], -c)))
    return torch.tensor(preds)


def _clusters(n: int, n_cls: int, dim: int, sep: float, gen: torch.Generator):
    centres = torch.randn(n_cls, dim, generator=gen) * sep
    y = torch.randint(0, n_cls, (n,), generator=gen)
    return centres[y] + torch.randn(n, dim, generator=gen), y


# --------------------------------------------------------------------------------------------
# kNN


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("chunk", [None, 7])
def test_knn_matches_bruteforce_reference(dtype, chunk):
    g = _gen(1)
    train = torch.randn(150, 12, generator=g, dtype=dtype)
    labels = torch.randint(0, 5, (150,), generator=g)
    test = torch.randn(40, 12, generator=g, dtype=dtype)
    ref = _knn_reference(train, labels, test, k=9, T=0.1, n_cls=5)
    pred = knn_classify(train, labels, test, k=9, temperature=0.1, chunk=chunk)
    assert pred.dtype == torch.int64 and pred.shape == (40,)
    assert torch.equal(pred, ref)
    # default solo-learn settings (k=20, T=0.07) as well
    ref20 = _knn_reference(train, labels, test, k=20, T=0.07, n_cls=5)
    assert torch.equal(knn_classify(train, labels, test, chunk=chunk), ref20)


def test_knn_is_cosine_scale_invariant_and_small_T_is_1nn():
    g = _gen(2)
    train = torch.randn(300, 16, generator=g)
    labels = torch.randint(0, 4, (300,), generator=g)
    test = torch.randn(80, 16, generator=g)
    pred = knn_classify(train, labels, test)
    scale_tr = torch.rand(300, 1, generator=g) * 100 + 0.01
    scale_te = torch.rand(80, 1, generator=g) * 100 + 0.01
    assert torch.equal(knn_classify(train * scale_tr, labels, test * scale_te), pred)
    # T -> 0: the nearest neighbour's weight dominates; exp(1/1e-3) would overflow without the
    # per-row shift, giving inf/NaN scores.
    assert torch.equal(knn_classify(train, labels, test, k=20, temperature=1e-3),
                       knn_classify(train, labels, test, k=1))


def test_knn_accuracy_separated_clusters_and_random_labels():
    g = _gen(3)
    x, y = _clusters(2000, 10, 32, sep=3.0, gen=g)
    assert knn_accuracy(x[:1000], y[:1000], x[1000:], y[1000:]) > 0.98
    y_rand = torch.randint(0, 10, (2000,), generator=g)
    acc = knn_accuracy(x[:1000], y_rand[:1000], x[1000:], y_rand[1000:])
    assert abs(acc - 0.1) < 0.04


# --------------------------------------------------------------------------------------------
# linear / MLP probes


def test_linear_probe_separated_clusters_and_random_labels():
    g = _gen(4)
    x, y = _clusters(2000, 10, 32, sep=3.0, gen=g)
    assert linear_probe(x[:1000], y[:1000], x[1000:], y[1000:]) > 0.98
    y_rand = torch.randint(0, 10, (2000,), generator=g)
    acc = linear_probe(x[:1000], y_rand[:1000], x[1000:], y_rand[1000:])
    assert abs(acc - 0.1) < 0.04


def test_linear_probe_beats_knn_on_linear_non_clustered_problem():
    # Isotropic Gaussian features, labels from random half-spaces: linearly separable but
    # without clusters, so neighbours in 64 dimensions say little about the label.
    g = _gen(5)
    x = torch.randn(4000, 64, generator=g)
    w = torch.randn(64, 4, generator=g)
    y = (x @ w).argmax(dim=1)
    lin = linear_probe(x[:2000], y[:2000], x[2000:], y[2000:])
    knn = knn_accuracy(x[:2000], y[:2000], x[2000:], y[2000:])
    assert lin > 0.85
    assert lin > knn + 0.2


def test_linear_probe_deterministic_and_standardised():
    g = _gen(6)
    x, y = _clusters(1200, 3, 8, sep=1.0, gen=g)  # overlapping clusters: accuracy < 1
    x = x.double()
    a = linear_probe(x[:600], y[:600], x[600:], y[600:])
    assert a == linear_probe(x[:600], y[:600], x[600:], y[600:])
    assert 0.5 < a < 0.99
    # per-dimension affine rescaling (scales 1e-3..1e3) is undone by the standardisation;
    # an extra constant column is ignored instead of dividing by zero
    scale = torch.logspace(-3, 3, 8, dtype=torch.float64)
    shift = torch.linspace(-50, 50, 8, dtype=torch.float64)
    xs = torch.cat([x * scale + shift, torch.full((1200, 1), 7.0, dtype=torch.float64)], dim=1)
    assert abs(linear_probe(xs[:600], y[:600], xs[600:], y[600:]) - a) <= 2 / 600


def test_mlp_probe_solves_xor_where_linear_cannot():
    g = _gen(7)
    x = torch.randn(3000, 6, generator=g)
    y = ((x[:, 0] * x[:, 1]) > 0).long()
    tr, te = slice(0, 1500), slice(1500, None)
    lin = linear_probe(x[tr], y[tr], x[te], y[te])
    mlp = mlp_probe(x[tr], y[tr], x[te], y[te], hidden_dim=64, epochs=30, lr=3e-3)
    assert lin < 0.6
    assert mlp > 0.9
    assert mlp == mlp_probe(x[tr], y[tr], x[te], y[te], hidden_dim=64, epochs=30, lr=3e-3)


# --------------------------------------------------------------------------------------------
# factors


def test_factor_targets_continuous_uses_train_quantiles_on_test():
    g = _gen(8)
    train = torch.rand(1000, generator=g)
    test = torch.rand(1000, generator=g) + 0.5  # shifted: its own quantiles would differ
    y_train, edges = factor_targets(train, "continuous", bins=4)
    assert torch.allclose(edges, torch.quantile(train.double(), torch.tensor([0.25, 0.5, 0.75],
                                                                             dtype=torch.float64)))
    assert torch.bincount(y_train).tolist() == [250, 250, 250, 250]  # chance level 1/bins
    y_test, edges_test = factor_targets(test, "continuous", edges=edges)
    assert torch.equal(edges_test, edges)
    expected = (test.double()[:, None] >= edges[None, :]).sum(dim=1)
    assert torch.equal(y_test, expected)
    assert (y_test == 3).float().mean() > 0.7  # most shifted values fall in the top train bin
    assert abs(chance_level(y_train, y_train) - 0.25) < 1e-9
    # a value equal to an edge opens the upper bin: bin i holds edges[i-1] <= v < edges[i]
    y_edge, _ = factor_targets(torch.tensor([0.5, 1.0, 1.5, 2.0]), "continuous",
                               edges=torch.tensor([1.0, 2.0]))
    assert y_edge.tolist() == [0, 1, 1, 2]


def test_factor_targets_categorical_and_ties():
    y, vocab = factor_targets(torch.tensor([30, 10, 30, 20]))
    assert y.tolist() == [2, 0, 2, 1] and vocab.tolist() == [10, 20, 30]
    y_test, _ = factor_targets(torch.tensor([20, 20, 10]), edges=vocab)
    assert y_test.tolist() == [1, 1, 0]
    with pytest.raises(ValueError, match=r"\[40\] do not occur in the train categories"):
        factor_targets(torch.tensor([10, 40]), edges=vocab)
    with pytest.warns(UserWarning, match="coincide"):
        y_tied, e = factor_targets(torch.tensor([0.0] * 8 + [1.0, 2.0]), "continuous", bins=4)
    assert e.numel() < 3 and int(y_tied.max()) == e.numel()
    with pytest.raises(ValueError, match="kind must be"):
        factor_targets(torch.rand(5), "ordinal")


# --------------------------------------------------------------------------------------------
# guillotine report


def test_guillotine_report_head_that_drops_hue():
    g = _gen(9)
    n = 2000
    cls = torch.randint(0, 4, (n,), generator=g)
    hue = torch.rand(n, generator=g)
    centres = torch.randn(4, 8, generator=g) * 4
    backbone = torch.cat([centres[cls] + 0.3 * torch.randn(n, 8, generator=g),
                          4 * (hue[:, None] - 0.5)], dim=1)
    head = backbone.clone()
    head[:, -1] = 0.0  # the head is invariant to hue: it zeroes the hue coordinate
    tr, te = slice(0, 1000), slice(1000, None)
    hue_tr, edges = factor_targets(hue[tr], "continuous", bins=4)
    hue_te, _ = factor_targets(hue[te], "continuous", edges=edges)
    report = guillotine_report(backbone[tr], head[tr], backbone[te], head[te],
                               {"class": (cls[tr], cls[te]), "hue": (hue_tr, hue_te)})
    acc = report.accuracy
    for probe in ("knn", "linear"):
        assert acc["class"]["backbone"][probe] > 0.95
        assert acc["class"]["head"][probe] > 0.95
        assert acc["hue"]["backbone"][probe] > 0.6
        assert abs(acc["hue"]["head"][probe] - 0.25) < 0.07
        assert report.destroyed("hue", probe) > 0.3
    assert abs(report.chance["hue"] - 0.25) < 0.05
    d = json.loads(json.dumps(report.to_dict()))
    assert d["targets"]["hue"]["backbone"]["knn"] == acc["hue"]["backbone"]["knn"]
    assert d["targets"]["class"]["num_classes"] == 4 and d["probes"] == ["knn", "linear"]
    lines = report.table().splitlines()
    assert lines[0].split() == ["target", "backbone", "knn", "head", "knn", "backbone", "linear",
                                "head", "linear", "chance"]
    assert [ln.split()[0] for ln in lines[1:]] == ["class", "hue"]
    assert float(lines[2].split()[1]) == pytest.approx(acc["hue"]["backbone"]["knn"], abs=5e-4)


def test_report_table_with_mlp_column():
    r = GuillotineReport({"class": {"backbone": {"mlp": 0.9}, "head": {"mlp": 0.5}}},
                         {"class": 0.1}, probes=("mlp",))
    assert r.table().splitlines()[1].split() == ["class", "0.900", "0.500", "0.100"]


# --------------------------------------------------------------------------------------------
# errors


def test_errors_name_the_bad_value():
    g = _gen(10)
    x = torch.randn(30, 4, generator=g)
    y = torch.arange(30) % 3
    with pytest.raises(ValueError, match="29 labels but train_feats has 30 rows"):
        knn_classify(x, y[:29], x)
    with pytest.raises(ValueError, match="test_labels has 29 labels"):
        linear_probe(x, y, x, y[:29])
    bad = x.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="non-finite values .* in 1 of 30 rows"):
        knn_classify(x, y, bad)
    with pytest.raises(ValueError, match="non-finite"):
        linear_probe(bad, y, x, y)
    with pytest.raises(ValueError, match="1 distinct class"):
        linear_probe(x, torch.zeros(30, dtype=torch.long), x, y)
    with pytest.raises(ValueError, match="dimension 4 but test_feats has 5"):
        knn_classify(x, y, torch.randn(3, 5))
    with pytest.raises(ValueError, match="integer class ids"):
        knn_classify(x, y.float(), x)
    with pytest.raises(ValueError, match="num_classes=2 but the labels contain class id 2"):
        knn_classify(x, y, x, num_classes=2)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        knn_classify(x, y, x, temperature=0.0)
    with pytest.raises(ValueError, match="unknown probes"):
        guillotine_report(x, x, x, x, {"class": (y, y)}, probes=("svm",))
    with pytest.raises(ValueError, match="head_train has 29"):
        guillotine_report(x, x[:29], x, x, {"class": (y, y)})
    # k larger than the train set: clipped to N with a warning
    with pytest.warns(UserWarning, match="k=50 is larger than the train set"):
        clipped = knn_classify(x, y, x, k=50)
    assert torch.equal(clipped, knn_classify(x, y, x, k=30))
