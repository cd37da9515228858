"""Worker for tests/test_search.py: a search whose training steps are slowed down, to be killed.

Run as ``python search_worker.py CONFIG_JSON``: every SSL step sleeps 0.5 s first (so a SIGKILL
lands in the middle of a trial), then ``run_search(SearchConfig(**CONFIG))`` runs.
"""
from __future__ import annotations

import json
import sys
import time

import torch

import geohead.training.loop as train_module
from geohead.search import SearchConfig, run_search

torch.set_num_threads(1)
_real_step = train_module.ssl_step


def _slow_step(*args, **kwargs):
    time.sleep(0.5)
    return _real_step(*args, **kwargs)


train_module.ssl_step = _slow_step

if __name__ == "__main__":
    cfg = json.loads(sys.argv[1])
    cfg["families"] = tuple(cfg["families"])
    run_search(SearchConfig(**cfg))
