"""Shared fixtures. ``ray_session``: one Ray session (2 CPUs, embedded) for every runtime test."""

import pytest


@pytest.fixture(scope="session")
def ray_session():
    ray = pytest.importorskip("ray")
    from gradcode.runtime.engine import init_ray

    import shutil

    temp_dir = None
    if not ray.is_initialized():
        temp_dir = init_ray(num_cpus=2)
    yield ray
    if temp_dir is not None:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
