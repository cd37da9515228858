"""``geohead report RUN_OR_SEARCH_DIR``: PNG plots and one self-contained ``report.html``.

Modules: :mod:`~geohead.report.page` (which folder it is, the HTML page, :func:`make_report`)
and :mod:`~geohead.report.run_plots` (the figures of a training run). A search folder's plots
come from :func:`geohead.search.write_search_plots`.
"""
