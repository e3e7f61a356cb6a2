"""Scoring of the eval harness: entity matching, F1 arithmetic, counts, loop flag."""

from __future__ import annotations

import pytest

from ongridd.evals.scoring import count_audit, found, is_loop, normalize, passed, score_answer


@pytest.mark.parametrize("entity, text, hit", [
    ("db-2", "the disk on db-2 is full", True),
    ("db-2", "the disk on db-20 is full", False),
    ("db-2", "xdb-2 is fine", False),
    ("db-2", "db-2-replica lags", False),
    ("db-2", "It is db-2.", True),
    ("db-2", "(db-2)", True),
    ("db-2", '"host": "db-2"', True),
    ("/var/lib/postgresql/pg_wal", "grew: /var/lib/postgresql/pg_wal/0000000100", True),
    ("replication slot", "an inactive Replication\n   Slot holds WAL", True),
    ("slot", "slots are fine", False),
    ("-Xmx28g", "runs with -Xmx28g on 32 GiB", True),
    ("-Xmx28g", "runs with -Xmx28gb", False),
    ("café", "the cafe\u0301 host", True),          # NFC: e + combining acute == é
    ("STRASSE", "straße", True),                     # case-fold
    ("(deleted)", "catalina.out (deleted)", True),
])
def test_word_boundary_matching(entity, text, hit):
    assert found(entity, normalize(text)) is hit


def test_normalize():
    assert normalize("  A\u0301\tB\n\nC  ") == "\u00e1 b c"


def test_f1_two_of_three_and_one_distractor():
    s = score_answer("db-2: the pg_wal folder is full; the backup job also ran",
                     ["db-2", "pg_wal", "replication slot"], ["backup job", "db-3"])
    assert s.found == ("db-2", "pg_wal") and s.missed == ("replication slot",)
    assert s.distractors_found == ("backup job",)
    assert s.recall == pytest.approx(2 / 3) and s.precision == pytest.approx(2 / 3)
    assert s.f1 == pytest.approx(2 / 3)


def test_f1_exact_values():
    s = score_answer("a b c", ["a", "b", "c", "d"], ["x"])        # recall 3/4, precision 1
    assert (s.recall, s.precision) == (0.75, 1.0) and s.f1 == pytest.approx(2 * 0.75 / 1.75)
    s = score_answer("a x y", ["a", "b"], ["x", "y"])              # recall 1/2, precision 1/3
    assert s.f1 == pytest.approx(2 * (1 / 3) * 0.5 / (1 / 3 + 0.5)) == pytest.approx(0.4)


def test_nothing_found_precision_one_f1_zero():
    s = score_answer("no idea", ["db-2"], ["db-3"])
    assert (s.recall, s.precision, s.f1) == (0.0, 1.0, 0.0)


def test_only_distractors_found_scores_zero():
    s = score_answer("blame db-3", ["db-2"], ["db-3"])
    assert (s.recall, s.precision, s.f1) == (0.0, 0.0, 0.0)


def test_all_found():
    s = score_answer("DB-2 Pg_Wal", ["db-2", "pg_wal"])
    assert (s.recall, s.precision, s.f1) == (1.0, 1.0, 1.0)


def test_score_needs_expected():
    with pytest.raises(ValueError):
        score_answer("x", [])


def test_counts_exclude_control_tools():
    rows = [{"tool_name": n} for n in ("AgentTool", "host_du_summary", "SendMessage", "host_bash",
                                       "AgentTool", "TaskStop", "query_promql", "host_bash")]
    c = count_audit(rows)
    assert c.tool_calls == 4 and c.dispatches == 2
    assert c.by_tool["host_bash"] == 2 and c.by_tool["SendMessage"] == 1


def test_loop_and_pass():
    assert is_loop(13, 12) and not is_loop(12, 12) and not is_loop(100, None)
    assert passed(0.5, False) and not passed(0.49, False) and not passed(1.0, True)
