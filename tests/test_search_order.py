"""The search's order of heads: the score at the highest rung they share (results.rank_heads)."""
from __future__ import annotations

import itertools

from geohead.search.results import add_ranks, rank_heads


def _pairwise_ok(scores: dict[int, dict[int, float]], order: list[int]) -> bool:
    """Heads that reached the same last rung are ordered by their score there."""
    pos = {n: i for i, n in enumerate(order)}
    for a, b in itertools.combinations(scores, 2):
        if set(scores[a]) == set(scores[b]):
            top = max(scores[a])
            if scores[a][top] != scores[b][top] and (scores[a][top] > scores[b][top]) != (pos[a] < pos[b]):
                return False
    return True


def test_a_head_that_completed_without_the_pruner_does_not_outrank_a_better_pruned_head():
    # trial 0: the published-head trial, completed, low score at the rung; trial 5 pruned there, higher
    scores = {0: {100: 0.40, 300: 0.45}, 1: {100: 0.55, 300: 0.60}, 5: {100: 0.50}, 7: {100: 0.30}}
    order = rank_heads(scores)
    assert order == [1, 5, 0, 7]
    # the completed-first order would have put trial 0 second, above trial 5
    completed_first = sorted(scores, key=lambda n: (300 not in scores[n], -scores[n][max(scores[n])]))
    assert completed_first.index(0) < completed_first.index(5)


def test_heads_that_went_on_are_resorted_by_the_later_rung_among_their_places():
    scores = {1: {100: 0.9, 300: 0.1}, 2: {100: 0.8}, 3: {100: 0.7, 300: 0.6}, 4: {100: 0.2}}
    # by the first rung: 1, 2, 3, 4; trials 1 and 3 went on and swap places (0.6 > 0.1)
    assert rank_heads(scores) == [3, 2, 1, 4]
    assert _pairwise_ok(scores, rank_heads(scores))


def test_rank_heads_is_a_permutation_and_deterministic_on_ties():
    scores = {3: {100: 0.5}, 1: {100: 0.5}, 2: {}, 9: {100: 0.7, 300: 0.7, 900: 0.2}}
    order = rank_heads(scores)
    assert sorted(order) == [1, 2, 3, 9]
    assert order == [9, 1, 3, 2]  # the head without a rung score last; ties by trial number
    assert rank_heads({}) == []


def test_add_ranks_numbers_distinct_scored_heads_from_trials_and_rungs():
    rows = [{"number": 0, "state": "COMPLETE", "score": 0.45, "steps_trained": 351},
            {"number": 1, "state": "PRUNED", "score": 0.50, "steps_trained": 117},
            {"number": 2, "state": "COMPLETE", "score": 0.60, "steps_trained": 351},
            {"number": 3, "state": "PRUNED", "score": 0.9, "steps_trained": 117, "duplicate_of": 1},
            {"number": 4, "state": "FAIL", "score": None}]
    rungs = [{"number": 0, "step": 117, "score": 0.40}, {"number": 1, "step": 117, "score": 0.50},
             {"number": 2, "step": 117, "score": 0.55}]
    add_ranks(rows, rungs)
    assert [r.get("rank") for r in rows] == [3, 2, 1, None, None]
