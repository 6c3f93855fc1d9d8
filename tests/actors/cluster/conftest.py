"""The node tests' scratch directory, and the processes a failed test left running stopped with it."""
import os
import shutil
import tempfile

import pytest

from cluster_run import stop_all


@pytest.fixture
def scratch():
    path = tempfile.mkdtemp(prefix="cluster-nodes-")
    os.chmod(path, 0o755)  # sandboxed commands may run as another user
    yield path
    stop_all()  # what a failed test left running
    shutil.rmtree(path, ignore_errors=True)
