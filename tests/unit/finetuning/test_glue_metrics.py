"""The GLUE metrics against hand-computed cases: Matthews corr. (CoLA, AX), F1 and accuracy
(MRPC, QQP), Pearson and Spearman with ties (STS-B); each task's split metrics as transformers'
``glue_compute_metrics`` reports them; a cross-check with scipy/scikit-learn where installed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokendrop.finetuning.metrics import (
    METRICS,
    accuracy,
    average_ranks,
    f1_binary,
    matthews,
    pearson,
    spearman,
    split_metrics,
)
from tokendrop.finetuning.tasks import TASKS


def test_mcc_on_a_2x2_table_by_hand():
    # TP=3 TN=4 FP=1 FN=2: (3*4 - 1*2) / sqrt((3+1)(3+2)(4+1)(4+2)) = 10 / sqrt(600)
    y = [1, 1, 1, 0, 0, 0, 0, 0, 1, 1]
    p = [1, 1, 1, 0, 0, 0, 0, 1, 0, 0]
    assert (
        matthews(y, p)
        == pytest.approx(100 * 10 / math.sqrt(600))
        == pytest.approx(40.8248, abs=1e-4)
    )
    # symmetric in the classes
    assert matthews(y, p) == matthews([1 - v for v in y], [1 - v for v in p])
    # one side constant
    assert matthews([0, 0, 1], [0, 0, 0]) == 0.0 and matthews([1, 1], [1, 0]) == 0.0


def test_mrpc_f1_and_accuracy_by_hand():
    # TP=3 FP=1 FN=2 TN=4: P=3/4, R=3/5, F1 = 2*3/(2*3+1+2) = 2/3; accuracy 7/10
    y = [1, 1, 1, 0, 0, 0, 0, 0, 1, 1]
    p = [1, 1, 1, 0, 0, 0, 0, 1, 0, 0]
    m = split_metrics(TASKS["mrpc"].metrics, TASKS["mrpc"].main, y, p)
    assert m["f1"] == pytest.approx(200 / 3) and m["accuracy"] == pytest.approx(70.0)
    assert m["score"] == m["f1"] and m["n"] == 10 and set(m) == {"accuracy", "f1", "score", "n"}


def test_pearson_by_hand():
    # x - 3 = (-2,-1,0,1,2), y - 4 = (-2,0,1,0,1): sum of products 6, squares 10 and 6 -> 6/sqrt(60)
    x, y = [1, 2, 3, 4, 5], [2, 4, 5, 4, 5]
    assert (
        pearson(x, y) == pytest.approx(100 * 6 / math.sqrt(60)) == pytest.approx(77.4597, abs=1e-4)
    )
    assert pearson(x, [2 * v + 1 for v in x]) == pytest.approx(100.0)
    assert pearson(x, [-v for v in x]) == pytest.approx(-100.0)
    assert pearson(x, [3.0] * 5) == 0.0  # a constant prediction: undefined, 0 by convention


def test_spearman_with_ties_by_hand():
    # ranks of y = (2,4,5,4,5): 1, 2.5, 4.5, 2.5, 4.5 (ties share the mean rank); minus 3:
    # (-2,-.5,1.5,-.5,1.5) against (-2,-1,0,1,2): products 7, squares 9 and 10 -> 7/sqrt(90)
    x, y = [1, 2, 3, 4, 5], [2, 4, 5, 4, 5]
    assert list(average_ranks(y)) == [1.0, 2.5, 4.5, 2.5, 4.5]
    assert list(average_ranks([3.0, 1.0, 3.0, 3.0])) == [3.0, 1.0, 3.0, 3.0]
    assert (
        spearman(x, y) == pytest.approx(100 * 7 / math.sqrt(90)) == pytest.approx(73.7865, abs=1e-4)
    )
    # monotone, not linear: Spearman 1, Pearson not
    assert spearman(x, [v**3 for v in x]) == pytest.approx(100.0)
    assert pearson(x, [v**3 for v in x]) < 99.0
    assert spearman(x, [5, 4, 3, 2, 1]) == pytest.approx(-100.0)


def test_stsb_split_metrics():
    gold = [0.0, 1.2, 2.5, 3.75, 5.0]
    preds = [0.4, 1.0, 3.0, 2.9, 4.8]  # one pair swapped: Spearman 1 - 6*2/(5*24) = 0.9
    m = split_metrics(TASKS["stsb"].metrics, TASKS["stsb"].main, gold, preds)
    assert set(m) == {"pearson", "spearman", "score", "n"}
    assert m["spearman"] == pytest.approx(90.0) and m["score"] == m["spearman"]
    assert m["pearson"] == pytest.approx(100 * np.corrcoef(gold, preds)[0, 1])


def test_zero_examples_are_an_error():
    for _name, fn in METRICS.items():
        with pytest.raises(ValueError, match="no examples"):
            fn([], [])
    with pytest.raises(ValueError, match="equally long"):
        accuracy([1, 0], [1])


def test_agrees_with_scipy_and_sklearn_on_random_data():
    stats = pytest.importorskip("scipy.stats")
    skm = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for _trial in range(20):
        n = int(rng.integers(3, 40))
        y = rng.integers(0, 6, n) / 2.0  # many ties
        p = np.round(y + rng.normal(0, 1, n), 1)
        if len(set(y)) > 1 and len(set(p)) > 1:
            assert spearman(y, p) == pytest.approx(100 * stats.spearmanr(y, p)[0], abs=1e-9)
            assert pearson(y, p) == pytest.approx(100 * stats.pearsonr(y, p)[0], abs=1e-9)
        k = int(rng.integers(2, 4))
        a, b = rng.integers(0, k, n), rng.integers(0, k, n)
        assert matthews(a, b) == pytest.approx(100 * skm.matthews_corrcoef(a, b), abs=1e-9)
        assert f1_binary(a, b) == pytest.approx(
            100
            * skm.f1_score(
                a,
                b,
                pos_label=1,
                average="binary" if k == 2 else "micro",
                labels=[1] if k > 2 else None,
                zero_division=0.0,
            ),
            abs=1e-9,
        )
        assert accuracy(a, b) == pytest.approx(100 * skm.accuracy_score(a, b))
