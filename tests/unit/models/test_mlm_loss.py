"""The MLM loss (``MaskedLM.mlm_nll``, a custom autograd function): the same values and gradients as
``F.cross_entropy(reduction="none")``, the ignored label, a float64 finite difference, and a second
backward refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tokendrop.models.masked_lm import _NLL, IGNORE_INDEX


def _case(dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(23, 97, generator=g, dtype=dtype) * 3
    labels = torch.randint(0, 97, (23,), generator=g)
    labels[[2, 11]] = IGNORE_INDEX
    weights = torch.rand(23, generator=g, dtype=dtype)
    return logits, labels, weights


def test_matches_cross_entropy_in_values_and_gradients():
    logits, labels, weights = _case()
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    nll_a = _NLL.apply(a, labels)
    nll_b = F.cross_entropy(b, labels, reduction="none")
    torch.testing.assert_close(nll_a, nll_b, rtol=0, atol=1e-6)
    assert nll_a[2] == 0 and nll_a[11] == 0
    (nll_a * weights).sum().backward()
    (nll_b * weights).sum().backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=1e-7)
    assert a.grad[2].abs().max() == 0  # an ignored slot has no gradient


def test_finite_difference_float64():
    """A central difference along random directions (``gradcheck`` backpropagates twice through one
    graph, which this function refuses by design)."""
    logits, labels, weights = _case(torch.float64)
    f = lambda x: (_NLL.apply(x, labels) * weights).sum()  # noqa: E731
    x = logits.clone().requires_grad_()
    f(x).backward()
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        u = torch.randn(logits.shape, generator=g, dtype=torch.float64)
        eps = 1e-6
        fd = (f(logits + eps * u) - f(logits - eps * u)) / (2 * eps)
        torch.testing.assert_close((x.grad * u).sum(), fd, rtol=1e-7, atol=1e-9)


def test_a_second_backward_is_refused():
    logits, labels, _ = _case()
    x = logits.requires_grad_()
    loss = _NLL.apply(x, labels).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
