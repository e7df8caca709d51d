"""A Ray cluster of three worker nodes on this machine (``ray.cluster_utils.Cluster``) for
``tests/test_multinode.py``, run in a process of its own (the test session shares one single-node
Ray session). Prints one JSON line: a run whose node 0 is killed in round 2, against the same run
in process, and a ``gradcode train --address`` run over the nodes."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time

import numpy as np
import ray
from ray.cluster_utils import Cluster

from gradcode.runtime import ClusterConfig, FaultConfig, RunConfig, TrainSpec, train


def main() -> None:
    # a dead node is noticed within about a second (Ray's default health check takes 30 s)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "_system_config": {
        "health_check_initial_delay_ms": 0, "health_check_period_ms": 200, "health_check_failure_threshold": 3}})
    nodes = [cluster.add_node(num_cpus=2) for _ in range(3)]
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    out = {}
    try:
        # six workers of one CPU each fill the three nodes of two CPUs: two a node
        spec = TrainSpec("crc", workers=6, stragglers=2, data="tandon-synthetic", data_params={"n_samples": 300},
                         seed=1)
        killed = {}

        def kill_node_0(record):
            if record["round"] == 2 and not killed:
                cluster.remove_node(nodes[0], allow_graceful=False)
                killed["at"] = time.time()
            if killed:
                time.sleep(0.1)  # rounds take milliseconds: leave the cluster time to notice

        res = train(spec, cluster=ClusterConfig(worker_cpus=1), faults=FaultConfig(round_timeout=60),
                    run=RunConfig(rounds=30, eval_every=0, run_dir=tempfile.mkdtemp()), callback=kill_node_0)
        ref = train(spec, run=RunConfig(rounds=30, eval_every=0, run_dir=tempfile.mkdtemp()), engine="inprocess")
        x, r = np.asarray(res.final_params), np.asarray(ref.final_params)
        out["rel"] = float(np.linalg.norm(x - r) / np.linalg.norm(r))
        keys = ("round", "worker", "kind", "recovery", "error")
        out["failures"] = [{k: f.get(k) for k in keys} for f in res.failures]
        out["late"] = [np.flatnonzero(a < 0).tolist() for a in res.arrivals]
        cli = subprocess.run([sys.executable, "-m", "gradcode.cli", "train", "--address", cluster.address, "--scheme",
                              "frc", "--workers", "4", "--stragglers", "1", "--rounds", "5", "--worker-cpus", "1",
                              "--run-dir", tempfile.mkdtemp(), "--overwrite", "--json"],
                             capture_output=True, text=True, timeout=120)
        out["cli_exit"] = cli.returncode
        out["cli_rounds"] = len(json.loads(cli.stdout)["round_times"]) if cli.returncode == 0 else cli.stderr[-2000:]
    finally:
        ray.shutdown()
        cluster.shutdown()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
