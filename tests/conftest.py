"""Shared fixtures: a fixed seed for every test, registries restored after each, no GUI backend."""

import matplotlib
import pytest
import torch

matplotlib.use("agg")  # figures are drawn, never shown

import lengen_helpers as L  # noqa: E402


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True)
def _registries():
    """A test may register encodings and tasks; the next test sees the study's registries again."""
    encodings, tasks = dict(L.ENCODINGS), dict(L.TASKS)
    yield
    L.ENCODINGS.clear()
    L.ENCODINGS.update(encodings)
    L.TASKS.clear()
    L.TASKS.update(tasks)


@pytest.fixture(autouse=True)
def _fresh_compute_estimates(monkeypatch):
    """Tests estimate compute afresh and never write the study's cache of estimates."""
    monkeypatch.setattr(L, "COMPUTE_CACHE", None)
