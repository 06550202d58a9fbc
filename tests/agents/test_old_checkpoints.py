"""GEPA checkpoints written when ``saag_opt.agents.mechanisms`` was one module still unpickle.

A ``gepa_state.bin`` (cloudpickle) names the outcome's data types by the module they lived in; an
optimize run from before resumes only if those names still resolve.
"""

from __future__ import annotations

import pickle

import pytest

from saag_opt.agents.mechanisms import base


@pytest.mark.parametrize("name", ["MechanismOutcome", "ReviewRound", "Candidate"])
def test_the_old_module_path_of_an_outcome_type_resolves(name: str) -> None:
    pickled = f"csaag_opt.agents.mechanisms\n{name}\n.".encode()  # protocol 0 GLOBAL: module, then name
    assert pickle.loads(pickled) is getattr(base, name)  # noqa: S301 - our own bytes
