"""Fixtures shared by the tests of ``tests/nn``."""
import pytest


@pytest.fixture(scope="session")
def hetero_results():
    """Per rank, ``{(P, configuration): results}`` of test_hetero_models and test_hetero_layers: one
    launch of four ranks runs every configuration of both at P = 1..4 (a launch's start-up on two
    cores costs more than all their configurations)."""
    from test_hetero_layers import launch_all
    return launch_all()
