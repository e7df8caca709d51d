"""The SGC reproductions (experiments/repro_sgc.py) recompute the paper's numbers from the built
schemes."""

from gradcode.experiments.reproduce import run_reproduction


def test_table1_loads_match_the_paper():
    doc = run_reproduction("sgc-table1-loads")
    assert [(r["scheme"], r["matches"]) for r in doc["rows"]] == [("m-sgc", True), ("sr-sgc", True), ("gc", True)]
    assert all(r["load"] >= r["bound_F1"] for r in doc["rows"])
    curve = doc["fig11"]["curve"]
    assert [c["W"] for c in curve] == list(range(4, 21))
    assert all(c["m_sgc_load"] >= c["lower_bound"] for c in curve)


def test_worked_example_of_section_3_3_1():
    doc = run_reproduction("sgc-example")
    assert doc["chunk_sizes"] == doc["paper_chunk_sizes"] == ["3/32", "1/32"]
    assert doc["load"] == doc["paper_load"] == "3/8"
    assert doc["job_2_finishes_in_round"] == doc["paper"] == 5 and doc["delay_T"] == 3
    assert [r["jobs finished"] for r in doc["rows"]] == [[], [], [], [1], [2], [3]]
