"""The conversation data model and the environment registry."""

from __future__ import annotations

import pytest

from saag_opt.episodes import Episode, Turn, environment_names, open_environment
from saag_opt.errors import ConfigError
from saag_opt.model import Registry, ToolSpec
from saag_opt.testing.toy_environment import TOOLS, NotesEnvironment

EXTRA = ToolSpec.from_dict({"name": "archive_note", "description": "Archive a note.",
                            "parameters": {"type": "object", "properties": {"title": {"type": "string"}}}})


def test_tools_at_a_turn_add_the_ones_that_arrived_up_to_it() -> None:
    turns = (Turn(({"role": "user", "content": "a"},)), Turn((), (EXTRA,)), Turn(({"role": "user", "content": "c"},)))
    episode = Episode("e", "toy", turns, TOOLS, "toy-notes")
    assert episode.tools_at(0) is TOOLS
    assert episode.tools_at(1).names == (*TOOLS.names, "archive_note") == episode.tools_at(2).names
    assert episode.with_split("test").split == "test" and episode.with_split("test").tools_at(1) == episode.tools_at(1)


def test_an_episode_needs_a_turn() -> None:
    with pytest.raises(ValueError, match="has no turns"):
        Episode("e", "toy", (), Registry(), "toy-notes")


def test_an_unknown_environment_names_the_registered_ones() -> None:
    assert "toy-notes" in environment_names()
    assert isinstance(open_environment("toy-notes"), NotesEnvironment)
    with pytest.raises(ConfigError, match="unknown environment 'nope'; registered: .*toy-notes"):
        open_environment("nope")
