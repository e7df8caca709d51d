"""GC-DC on Ray: real gradients decode exactly from each round's non-stragglers
with the round's Algorithm 1 placement, so a run reaches the single-process GD iterates; with
perfect SSI from the injected delay model's states and with imperfect SSI (the previous round's
states), where a round whose stragglers the placement cannot absorb waits instead of returning a
wrong gradient. One shared Ray session (conftest); n = 6 workers, small data; no timing
assertions."""

import numpy as np
import pytest

from runtime_util import gd_reference, rel, train_options

DATA = {"n_samples": 300, "n_features": 5}
SEED = 4
ROUNDS = 4
#: K = 6 workers, P = 3 clusters of l = 2 codewords, r = 2 partitions each (a cluster decodes from
#: any 1 of its 2 codewords), n_c = 2 clusters per worker (Lemma 1's smallest for K = 6, P = 3)
GCDC = {"clusters": 3, "r": 2, "clusters_per_worker": 2}


def reference(rounds, lr=0.5):
    return gd_reference(DATA, SEED, rounds, lr=lr)


@pytest.mark.parametrize("ssi", ["perfect", "imperfect"])
def test_gc_dc_trains_to_the_single_process_gd_iterates(ray_session, tmp_path, ssi):
    res = train_options("gc-dc", workers=6, scheme_params=dict(GCDC, ssi=ssi), stragglers=2, delay=0.2,
                data="tandon-synthetic", data_params=DATA, seed=SEED, rounds=ROUNDS,
                optimizer_params={"lr": 0.5}, run_dir=tmp_path / ssi, eval_every=0)
    assert rel(res.final_params, reference(ROUNDS)) < 1e-9
    assert res.arrivals.shape == (ROUNDS, 6)
    delayed = res.injected > 0
    assert delayed.sum() == 2 * ROUNDS  # the fixed model: 2 delayed workers a round
    if ssi == "perfect":
        # Algorithm 1 sees this round's 2 stragglers and puts them in different clusters, each of
        # which decodes from its other codeword: the rounds close without them (mostly; a worker
        # delayed 0.2 s could still arrive first on a very loaded machine)
        assert (res.arrivals[delayed] < 0).mean() >= 0.5


def test_gc_dc_cli_trains_with_inline_parameters(ray_session, tmp_path):
    import json

    from typer.testing import CliRunner

    from gradcode.cli import app

    out = CliRunner().invoke(app, [
        "train", "--scheme", "gc-dc:clusters=3,r=2,clusters_per_worker=2,ssi=perfect", "-n", "6", "-s", "1",
        "--delay", "0.1", "--rounds", str(ROUNDS), "--data-params", "n_samples=300", "--data-params", "n_features=5",
        "--seed", str(SEED), "--optimizer-params", "lr=0.5", "--eval-every", "0", "--run-dir", str(tmp_path / "cli"),
        "--json",
    ])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    assert doc["config"]["scheme"] == "gc-dc"
    assert rel(np.load(doc["files"]["params"])[0], reference(ROUNDS)) < 1e-9  # the JSON names params.npy
