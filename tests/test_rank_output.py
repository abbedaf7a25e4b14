"""The multi-GPU tests' reading of what their ranks print (CPU)."""

from support.ranks import json_records


def test_rank_records_are_found_when_two_ranks_share_a_line():
    """torchrun's ranks share one stdout: a rank's object can follow another's on one line."""
    out = 'noise\n{"rank": 0, "m": {"x": 1}}{"rank": 1, "m": {"x": 2}}\nLOOP-START 1.0\n{"rank": 2}\n'
    assert json_records(out) == [{"rank": 0, "m": {"x": 1}}, {"rank": 1, "m": {"x": 2}}, {"rank": 2}]
