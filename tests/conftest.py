"""Shared fixtures: the target matrix and a deterministic random generator."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import tessera

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # so every test module can ``import classic_kernels``
    sys.path.insert(0, HERE)

# Targets every semantic test runs on. Add "cuda" and "debug" here when they exist.
TARGETS = ["cpu"]


@pytest.fixture(params=TARGETS)
def target(request):
    """Run the test with ``tessera.config(target=...)`` set to each target in turn."""
    with tessera.config(target=request.param):
        yield request.param


@pytest.fixture
def rng():
    return np.random.default_rng(0)
