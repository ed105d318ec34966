"""The catch-up's batches over [E, C): contiguous, covering the range once, each within its bound."""

from switchyard.jobs.rebase.cut import batched


def test_a_range_is_cut_into_contiguous_bounded_batches_that_cover_it_once():
    start, end = {0: 10, 1: 0, 2: 500}, {0: 2_010, 1: 7_000, 2: 500}
    pieces = batched(start, end, 1_000)
    assert pieces[0][0] == start and pieces[-1][1] == end
    for (_, before), (after, _) in zip(pieces, pieces[1:]):
        assert before == after, "each batch starts where the one before ended"
    assert all(sum(hi[p] - lo[p] for p in end) <= 1_000 for lo, hi in pieces)
    covered = {p: sum(hi[p] - lo[p] for lo, hi in pieces) for p in end}
    assert covered == {0: 2_000, 1: 7_000, 2: 0}
    assert batched(start, end, 1_000) == pieces, "every rerun cuts it the same way"


def test_a_small_or_empty_range_is_one_batch():
    assert batched({0: 5}, {0: 9}, 1_000) == [({0: 5}, {0: 9})]
    assert batched({0: 9, 1: 3}, {0: 9, 1: 3}, 1_000) == [({0: 9, 1: 3}, {0: 9, 1: 3})]
    assert batched({}, {0: 4}, 2) == [({0: 0}, {0: 2}), ({0: 2}, {0: 4})]
