"""matplotlib figures on the Agg canvas, for ``geohead report`` and the search's plots.

A leaf module (it imports nothing from geohead): figures are drawn on matplotlib's Agg canvas
directly, so pyplot is never imported and the user's global backend never changes; matplotlib
itself is imported only when a figure is made.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure


class MatplotlibMissing(ImportError):
    """matplotlib cannot be imported; ``reason`` is the import error's message."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"matplotlib cannot be imported here ({reason}); install it with `pip install matplotlib` "
                         "(it is a geohead dependency)")
        self.reason = reason


def require_matplotlib() -> tuple[type, type]:
    """matplotlib's ``(Figure, FigureCanvasAgg)`` classes; raises :class:`MatplotlibMissing`."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MatplotlibMissing(str(exc)) from None
    return Figure, FigureCanvasAgg


def agg_figure(width: float, height: float, **kwargs: Any) -> "Figure":
    """A matplotlib ``Figure`` (width × height inches) on the Agg canvas, whatever pyplot's
    backend is (pyplot is never imported); ``kwargs`` go to ``Figure``."""
    figure_cls, canvas_cls = require_matplotlib()
    fig = figure_cls(figsize=(width, height), **kwargs)
    canvas_cls(fig)
    return fig


__all__ = ["MatplotlibMissing", "agg_figure", "require_matplotlib"]
