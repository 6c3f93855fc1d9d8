"""The input sets both sides draw from a job's seeds, and the fingerprints that compare them."""
import random
import types

import torch

from harness import task_inputs


def task(get_inputs):
    return types.SimpleNamespace(get_inputs=get_inputs)


def test_the_same_seed_draws_the_same_set_and_another_seed_does_not():
    t = task(lambda: [torch.randn(64, 32), torch.randint(0, 9, (5,)), 7])
    a = task_inputs.fingerprint(task_inputs.draw(t, 11, "cpu"))
    torch.randn(1000)  # whatever ran in between, the seed decides
    assert task_inputs.difference(a, task_inputs.fingerprint(task_inputs.draw(t, 11, "cpu"))) is None
    assert task_inputs.difference(a, task_inputs.fingerprint(task_inputs.draw(t, 12, "cpu")))


def test_python_random_is_seeded_too():
    t = task(lambda: [torch.full((4,), float(random.randint(0, 10 ** 9)))])
    a = task_inputs.fingerprint(task_inputs.draw(t, 5, "cpu"))
    assert task_inputs.difference(a, task_inputs.fingerprint(task_inputs.draw(t, 5, "cpu"))) is None


def test_differences_are_named():
    x = torch.randn(8, 8)
    ours = task_inputs.fingerprint([x, 3])
    assert "float64" in task_inputs.difference(ours, task_inputs.fingerprint([x.double(), 3]))
    assert "[4, 16]" in task_inputs.difference(ours, task_inputs.fingerprint([x.reshape(4, 16), 3]))
    assert "other values" in task_inputs.difference(ours, task_inputs.fingerprint([x + 1e-4, 3]))
    assert "4 instead of 3" in task_inputs.difference(ours, task_inputs.fingerprint([x, 4]))
    assert "2 values expected" == task_inputs.difference(ours, task_inputs.fingerprint([x]))


def test_one_changed_element_of_a_large_tensor_changes_the_fingerprint():
    x = torch.randn(1 << 20)
    y = x.clone()
    y[12345] += 1.0  # not a sampled element: the float64 sum catches it
    assert task_inputs.difference(task_inputs.fingerprint([x]), task_inputs.fingerprint([y]))


def test_a_malformed_reply_is_a_difference_not_an_exception():
    ours = task_inputs.fingerprint([torch.ones(3)])
    for theirs in (None, "x", [None], [["torch.float32", 3, 1.0, "d"]], [[1, 2, 3, 4, 5]]):
        assert task_inputs.difference(ours, theirs)
