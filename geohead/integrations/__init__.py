"""Adapters for other training frameworks. Each submodule imports its framework and is imported
only by the user (``import geohead`` never loads them):

* :mod:`geohead.integrations.lightning` — :class:`~geohead.integrations.lightning.GeometryCallback`
  (``pip install lightning``, or the ``[lightning]`` extra).
"""
