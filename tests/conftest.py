"""Shared fixtures. ``ray_session``: one Ray session (2 CPUs, embedded) for every runtime test:
the process's embedded cluster, as a user's first run starts it, so the tests' runs share its
idle workers as a user's runs in one process do.

Tests that start Ray (the ``test_runtime*`` modules, and any test using ``ray_session``) are
marked ``ray``: ``pytest -m "not ray"`` runs everything else in well under a minute."""

import os
import tempfile

import pytest

RAY_MODULES = ("test_runtime",)

# the checkpoints the tests write are keyed with a key of the test session, not the user's own
os.environ.setdefault("GRADCODE_CHECKPOINT_KEY_FILE", os.path.join(tempfile.mkdtemp(prefix="gradcode-key-"),
                                                                   "checkpoint.key"))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "ray_session" in getattr(item, "fixturenames", ()) or item.module.__name__.startswith(RAY_MODULES):
            item.add_marker(pytest.mark.ray)


@pytest.fixture(scope="session")
def ray_session():
    ray = pytest.importorskip("ray")
    from gradcode.errors import GradcodeError
    from gradcode.runtime import cluster

    if not ray.is_initialized() or "embedded" in cluster.session:
        cluster.local_cluster(num_cpus=2)
    yield ray
    try:
        cluster.shutdown()
    except GradcodeError:  # an engine a test did not shut down: the exit hook stops the cluster
        pass
