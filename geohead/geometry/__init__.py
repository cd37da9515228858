"""The theory as measurements: effective Hessian operators and spectra, curvature at collapse,
collapse monitors, orbits and invariance, linear-head whitening.

Submodules (import what you need; all depend on torch only):

* :mod:`~geohead.geometry.hessian` — :class:`EffectiveHessian` (H_eff, G, M, G_tan as operators),
  :func:`lanczos`, :func:`slq_density`, :func:`hutchinson_trace`, :func:`frobenius_norm`,
  :func:`spectrum_summary`.
* :mod:`~geohead.geometry.collapse` — :func:`escape_curvature`, :func:`rankme`,
  :func:`alpha_req`, :func:`normalized_std`, :func:`within_rank_condition`.
* :mod:`~geohead.geometry.invariance` — :func:`orbit_invariance` and its parts.
* :mod:`~geohead.geometry.linear` — :func:`linear_head_geometry` (Thm 3.1's implicit whitening).
"""
from __future__ import annotations

from geohead.geometry.collapse import (
    CollapseMonitors, EscapeCurvature, WithinRankCondition, alpha_req, collapse_monitors, escape_curvature,
    normalized_std, rankme, within_rank_condition,
)
from geohead.geometry.hessian import (
    EffectiveHessian, SpectrumSummary, frobenius_norm, hutchinson_trace, lanczos, slq_density, spectrum_summary,
)
from geohead.geometry.invariance import InvarianceReport, build_orbits, orbit_invariance
from geohead.geometry.linear import LinearHeadGeometry, induced_metric, linear_head_geometry
from geohead.geometry.operators import Operator

__all__ = [
    "CollapseMonitors", "EffectiveHessian", "EscapeCurvature", "InvarianceReport", "LinearHeadGeometry",
    "Operator", "SpectrumSummary", "build_orbits", "induced_metric", "linear_head_geometry", "orbit_invariance",
    "WithinRankCondition", "alpha_req", "collapse_monitors", "escape_curvature", "frobenius_norm",
    "hutchinson_trace", "lanczos", "normalized_std", "rankme", "slq_density", "spectrum_summary",
    "within_rank_condition",
]
