"""Fixtures shared by the learner's end-to-end tests."""
import pathlib
import shutil
import tempfile

import pytest


@pytest.fixture(scope="module")
def scratch(request):
    """A directory for one test module's runs, readable by others: sandboxed commands may run as
    another user, who must reach the workdir (pytest's own tmp_path is private)."""
    path = pathlib.Path(tempfile.mkdtemp(prefix=f"cuda-agent-{request.module.__name__}-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)
