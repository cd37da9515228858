"""The theory as measurements: effective Hessian operators and spectra, curvature at collapse,
collapse monitors, orbits and invariance, linear-head whitening (docs/theory.md).

Submodules (import what you need; all depend on torch only), one concept each:

* :mod:`~geohead.geometry.operators` — :class:`Operator` (a symmetric matvec), functional head
  calls with an explicit BatchNorm mode, random probe vectors.
* :mod:`~geohead.geometry.hessian` — :class:`EffectiveHessian` (H_eff, G, M, G_tan as operators).
* :mod:`~geohead.geometry.lanczos` — :func:`lanczos` (extreme eigenvalues with Ritz residuals).
* :mod:`~geohead.geometry.density` — :func:`slq_density` (stochastic Lanczos quadrature).
* :mod:`~geohead.geometry.trace` — :func:`hutchinson_trace`, :func:`frobenius_norm`
  (Hutchinson / Hutch++).
* :mod:`~geohead.geometry.summary` — :func:`spectrum_summary` (the logged numbers of one operator).
* :mod:`~geohead.geometry.conditioning` — :func:`heff_conditioning` (H_eff's extremes, stable
  rank and its spread log(stable rank)/log(B·d)).
* :mod:`~geohead.geometry.escape` — :class:`EscapeSettings`, :class:`EscapeCurvature` (with its
  :class:`EscapeReference`), :class:`EscapePremise`: what Thm 4.1's measurement asks and answers.
* :mod:`~geohead.geometry.collapse` — :func:`escape_curvature` (curvature at collapsed states,
  in the sphere-tangent frame for scale-invariant objectives), :func:`escape_premise` (Thm 4.1's
  premise through a reference head).
* :mod:`~geohead.geometry.equilibrium` — :func:`stationarity` (‖∇_Z f‖ relative to the
  curvature), :func:`refine_collapsed` (a nearby collapsed equilibrium).
* :mod:`~geohead.geometry.monitors` — :func:`rankme`, :func:`alpha_req`, :func:`normalized_std`,
  :func:`within_rank_condition`, :func:`collapse_monitors`, :func:`collapse_record` (the one
  monitor record of geohead's loops and the search: docs/monitors.md).
* :mod:`~geohead.geometry.orbits` — :func:`build_orbits`, per-space orbit geometry, compression.
* :mod:`~geohead.geometry.tangents` — :func:`tangent_invariance` (Jacobian gain and Fisher rank on
  augmentation tangents).
* :mod:`~geohead.geometry.local_invariance` — :func:`local_invariance` (tangent gain over between-image gain
  within the backbone's effective span; soft effective rank of the tangent Fisher).
* :mod:`~geohead.geometry.invariance` — :func:`orbit_invariance`, the report composing the two.
* :mod:`~geohead.geometry.linear` — :func:`linear_head_geometry` (Thm 3.1's implicit whitening).
"""
from __future__ import annotations

from geohead.geometry.collapse import escape_curvature, escape_premise
from geohead.geometry.conditioning import heff_conditioning
from geohead.geometry.density import slq_density
from geohead.geometry.equilibrium import RefinedState, Stationarity, refine_collapsed, stationarity
from geohead.geometry.escape import EscapeCurvature, EscapePremise, EscapeReference, EscapeSettings
from geohead.geometry.hessian import EffectiveHessian
from geohead.geometry.invariance import InvarianceReport, orbit_invariance
from geohead.geometry.lanczos import lanczos
from geohead.geometry.linear import LinearHeadGeometry, induced_metric, linear_head_geometry
from geohead.geometry.monitors import (
    CollapseMonitors, WithinRankCondition, alpha_req, collapse_monitors, collapse_record, normalized_std, rankme,
    within_rank_condition,
)
from geohead.geometry.operators import Operator
from geohead.geometry.orbits import build_orbits
from geohead.geometry.local_invariance import (
    LocalInvariance, between_image_directions, effective_rank, effective_span, local_invariance,
)
from geohead.geometry.summary import SpectrumSummary, spectrum_summary
from geohead.geometry.tangents import TangentInvariance, tangent_invariance
from geohead.geometry.trace import frobenius_norm, hutchinson_trace

__all__ = [
    "CollapseMonitors", "EffectiveHessian", "EscapeCurvature", "EscapePremise", "EscapeReference", "EscapeSettings",
    "InvarianceReport", "LinearHeadGeometry", "LocalInvariance",
    "Operator", "RefinedState", "SpectrumSummary", "Stationarity", "TangentInvariance", "WithinRankCondition",
    "alpha_req", "between_image_directions", "build_orbits", "collapse_monitors", "collapse_record", "effective_rank", "effective_span",
    "escape_curvature", "escape_premise", "frobenius_norm", "heff_conditioning", "hutchinson_trace", "induced_metric", "lanczos", "linear_head_geometry",
    "local_invariance", "normalized_std", "orbit_invariance", "rankme", "refine_collapsed", "slq_density",
    "spectrum_summary", "stationarity", "tangent_invariance", "within_rank_condition",
]
