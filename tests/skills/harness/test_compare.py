"""evaluator.compare: what counts as the reference's output. allclose element by element, and the
error taken whole beside the reference, so that an absolute tolerance larger than every
reference value (a softmax over many columns) does not let zeros through."""
import torch

from harness.evaluator import compare

ATOL = RTOL = 0.01


def softmax_wide():
    torch.manual_seed(0)
    return torch.softmax(torch.randn(16, 16384), dim=1)


def test_zeros_for_a_wide_softmax_differ_as_a_whole():
    ref = softmax_wide()
    assert ref.max() < ATOL  # every value below atol: allclose alone accepts zeros
    assert torch.allclose(torch.zeros_like(ref), ref, atol=ATOL, rtol=RTOL)
    error = compare([torch.zeros_like(ref)], [ref], ATOL, RTOL)
    assert error is not None and "differs from the reference as a whole" in error, error


def test_an_unnormalised_softmax_differs_too():
    torch.manual_seed(1)
    x = torch.randn(16, 16384)
    ref = torch.softmax(x, dim=1)
    assert compare([torch.exp(x - x.max(dim=1, keepdim=True).values) / 16384], [ref], ATOL, RTOL) is not None


def test_rounding_error_passes():
    ref = softmax_wide()
    torch.manual_seed(2)
    computed = torch.softmax(ref.double().log(), dim=1).float()  # another order of the same sums
    assert compare([computed], [ref], ATOL, RTOL) is None
    noisy = ref * (1 + 1e-3 * torch.randn_like(ref))  # 0.1% off everywhere: a tenth of rtol
    assert compare([noisy], [ref], ATOL, RTOL) is None


def test_a_reference_of_zeros_is_matched_by_zeros_and_by_tiny_errors():
    ref = torch.zeros(64, 64)
    assert compare([torch.zeros(64, 64)], [ref], ATOL, RTOL) is None
    assert compare([torch.full((64, 64), 1e-6)], [ref], ATOL, RTOL) is None
    assert compare([torch.full((64, 64), 1e-3)], [ref], ATOL, RTOL) is not None


def test_matching_infinities_and_nan_are_not_an_error_but_misplaced_nan_is_named():
    ref = torch.tensor([1.0, float("inf"), float("nan"), -2.0])
    assert compare([ref.clone()], [ref], ATOL, RTOL) is None
    moved = torch.tensor([float("nan"), float("inf"), 1.0, -2.0])
    assert "NaN" in compare([moved], [ref], ATOL, RTOL)


def test_shape_dtype_and_count_are_named():
    ref = torch.ones(4)
    assert "shape" in compare([torch.ones(5)], [ref], ATOL, RTOL)
    assert "dtype" in compare([torch.ones(4, dtype=torch.float64)], [ref], ATOL, RTOL)
    assert "outputs" in compare([], [ref], ATOL, RTOL)
