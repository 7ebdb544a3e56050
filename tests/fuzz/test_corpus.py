"""Every saved fuzz input replays through its target (``make test``): the seeds, and
every crash ``make fuzz`` found, kept as a regression test once the core was fixed."""

from __future__ import annotations

import pathlib

import pytest

from .targets import TARGETS

CORPUS = pathlib.Path(__file__).parent / "corpus"
INPUTS = sorted(p for p in CORPUS.glob("*/*") if p.is_file())


def test_every_target_has_saved_inputs() -> None:
    assert {p.parent.name for p in INPUTS} == set(TARGETS)


@pytest.mark.parametrize("path", INPUTS, ids=[f"{p.parent.name}/{p.name}" for p in INPUTS])
def test_saved_input_passes(path: pathlib.Path) -> None:
    TARGETS[path.parent.name](path.read_bytes())
