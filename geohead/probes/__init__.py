"""Probes on frozen features: weighted kNN, linear and MLP probes, and the guillotine report.

Features are computed once by the caller (backbone outputs ``z`` and head outputs ``e = h(z)``
for a train and a test split); every probe here works on those tensors and runs on CPU in
seconds. The guillotine report (Chaudhry 2026, Sec. 5: "the head must be discarded after
pretraining") probes both spaces for the class label and for each nuisance factor the data
records: a factor the backbone keeps but the head's outputs no longer predict is information the
head destroyed to become invariant to it.

* :mod:`~geohead.probes.checks` — validation of (N, D) features and (N,) labels;
* :mod:`~geohead.probes.knn` — :func:`knn_classify`, :func:`knn_accuracy`;
* :mod:`~geohead.probes.linear` — :func:`linear_probe`, :func:`mlp_probe`, :func:`standardise`;
* :mod:`~geohead.probes.targets` — :func:`factor_targets`, :func:`chance_level`;
* :mod:`~geohead.probes.guillotine` — :class:`GuillotineReport`, :func:`guillotine_report`.

Conventions: features are ``(N, D)`` floating tensors (computed in float32, or in float64 when
given float64), labels are ``(N,)`` non-negative integer class ids. Bad input raises a
``ValueError`` that names the bad value and the fix.
"""
from __future__ import annotations

from geohead.probes.guillotine import PROBES, SPACES, GuillotineReport, guillotine_report
from geohead.probes.knn import knn_accuracy, knn_classify
from geohead.probes.linear import linear_probe, mlp_probe, standardise
from geohead.probes.targets import chance_level, factor_targets

__all__ = [
    "knn_classify",
    "knn_accuracy",
    "linear_probe",
    "mlp_probe",
    "standardise",
    "factor_targets",
    "chance_level",
    "GuillotineReport",
    "guillotine_report",
    "PROBES",
    "SPACES",
]
