"""The commands of the documents in part "training" of `docs_commands.PARTS` work as written:
an evaluation of the embedded model.

A file of their own so that a parallel worker runs them beside the other documents' (tests/test_docs_commands.py).
"""

import pytest

from docs_commands import ROOT, docs_of, problems_of

pytestmark = pytest.mark.slow  # processes importing torch: minutes on 2 cores


@pytest.mark.parametrize("doc", docs_of("training"), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_command_works_as_written(doc, tmp_path):
    assert not (problems := problems_of(doc, tmp_path)), problems
