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


def snapshot_registries():
    """Every registry of the module (each upper-case module-level dict or list: tasks, encodings,
    model options, position schemes, experiments, families, ..) as it is now, and a function that
    puts each back in place, contents and order."""
    kept = {
        name: (value, value.copy()) for name, value in vars(L).items() if name.isupper() and type(value) in (dict, list)
    }

    def restore() -> None:
        for value, contents in kept.values():
            value.clear()
            value.update(contents) if isinstance(value, dict) else value.extend(contents)

    return restore


@pytest.fixture(autouse=True)
def _registries():
    """A test may register anything (a task, an encoding, a model option, an experiment); the next
    test sees the study's registries again."""
    restore = snapshot_registries()
    yield
    restore()


@pytest.fixture(autouse=True)
def _fresh_compute_estimates(monkeypatch):
    """Tests estimate compute afresh and never write the study's cache of estimates."""
    monkeypatch.setattr(L, "COMPUTE_CACHE", None)
