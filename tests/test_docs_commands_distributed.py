"""The commands of the documents in part "distributed" of `docs_commands.PARTS` work as written:
a run of two gloo ranks under torchrun.

A file of their own so that a parallel worker runs them beside the other documents' (tests/test_docs_commands.py).
"""

import pytest

from docs_commands import ROOT, docs_of, problems_of

pytestmark = pytest.mark.slow  # torchrun starting two ranks, each importing torch


@pytest.mark.parametrize("doc", docs_of("distributed"), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_works_as_written(doc, tmp_path):
    assert not (problems := problems_of(doc, tmp_path)), problems
