"""Metric definitions against hand-computed values (MCC, F1, accuracy, SQuAD EM/F1 +
normalisation)."""

import math
import random

import pytest

from tokendrop.finetuning.metrics import (
    accuracy,
    apply_threshold,
    best_threshold,
    exact_match,
    f1,
    f1_binary,
    gold_answers,
    matthews,
    normalize_answer,
    split_metrics,
    squad_evaluate,
)


def _mcc_binary(tp, tn, fp, fn):
    return (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))


def test_mcc_binary_known_values():
    # TP=2 TN=2 FP=1 FN=1 -> (4-1)/sqrt(3^4) = 1/3
    assert matthews([1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 1]) == pytest.approx(100 / 3)
    # TP=6 FP=2 FN=3 TN=9 -> 48/sqrt(8*9*11*12) = 0.49237...
    y = [1] * 6 + [0] * 2 + [1] * 3 + [0] * 9
    p = [1] * 6 + [1] * 2 + [0] * 3 + [0] * 9
    assert (
        matthews(y, p)
        == pytest.approx(100 * _mcc_binary(6, 9, 2, 3))
        == pytest.approx(49.2366, abs=1e-3)
    )
    assert matthews([0, 1, 0, 1], [0, 1, 0, 1]) == pytest.approx(100.0)
    assert matthews([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-100.0)
    assert matthews([0, 1, 1, 0], [1, 1, 1, 1]) == 0.0  # constant prediction: 0 by convention


def test_mcc_multiclass_is_gorodkin_rk():
    # GLUE's AX uses the K-class MCC: (c*s - sum p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum t_k^2))
    y = [0, 0, 1, 1, 2, 2]
    p = [0, 1, 1, 2, 2, 0]  # c=3, s=6, t=p=(2,2,2): (18-12)/sqrt(24*24) = 0.25
    assert matthews(y, p) == pytest.approx(25.0)
    y2 = [0, 0, 0, 1, 1, 2, 2, 2, 2, 1]
    p2 = [0, 1, 0, 1, 2, 2, 2, 0, 2, 1]
    c, s = sum(a == b for a, b in zip(y2, p2)), len(y2)
    t = [y2.count(k) for k in range(3)]
    pk = [p2.count(k) for k in range(3)]
    want = (c * s - sum(a * b for a, b in zip(t, pk))) / math.sqrt(
        (s * s - sum(x * x for x in pk)) * (s * s - sum(x * x for x in t))
    )
    assert matthews(y2, p2) == pytest.approx(100 * want)


def test_f1_and_accuracy_known_values():
    # TP=2 FP=1 FN=1 -> P=R=2/3 -> F1=2/3
    assert f1_binary([1, 1, 0, 0, 1], [1, 0, 0, 1, 1]) == pytest.approx(200 / 3)
    # TP=1 FP=3 FN=0 -> P=1/4 R=1 -> F1=0.4
    assert f1_binary([1, 0, 0, 0], [1, 1, 1, 1]) == pytest.approx(40.0)
    assert f1_binary([0, 0], [0, 0]) == 0.0  # no positives anywhere
    with pytest.raises(ValueError, match="no examples"):
        accuracy([], [])
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == pytest.approx(50.0)
    m = split_metrics(("accuracy", "f1"), "f1", [1, 0, 1, 1], [1, 1, 1, 0])
    assert m["score"] == m["f1"] == pytest.approx(200 / 3) and m["accuracy"] == 50.0 and m["n"] == 4
    m = split_metrics(("accuracy", "mcc"), "mcc", [0, 1], [0, 1])
    assert m["score"] == m["mcc"] == pytest.approx(100.0)


@pytest.mark.parametrize(
    "raw, norm",
    [
        ("The Cat!", "cat"),
        ("  an  apple,  a day ", "apple day"),
        ("theater of the absurd", "theater of absurd"),  # articles only as whole words
        ("Denver Broncos.", "denver broncos"),
        ("U.S.A.", "usa"),
        ("A", ""),
        ("tab\tand\nnewline", "tab and newline"),
    ],
)
def test_official_normalisation(raw, norm):
    assert normalize_answer(raw) == norm


def test_squad_em_f1_cases():
    assert exact_match("the Denver Broncos", "Denver Broncos.") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0
    assert f1("Denver Broncos won", "Denver Broncos") == pytest.approx(0.8)  # P=2/3 R=1
    assert f1("x y y", "y y z") == pytest.approx(2 / 3)  # multiset overlap: 2 common tokens
    assert f1("x y", "z") == 0.0
    # v2.0 rule for no-answer
    assert f1("", "") == 1.0 and f1("x", "") == 0.0 and f1("", "x") == 0.0
    # answers that normalise to nothing: treated as no answer
    assert gold_answers(["the", "A"]) == [""]
    golds = {"q1": ["Denver Broncos", "Broncos"], "q2": ["Santa Clara"], "q3": []}
    preds = {"q1": "broncos", "q2": "Santa Clara, California", "q3": ""}
    m = squad_evaluate(golds, preds)
    # q1: EM 1 (max over golds), q2: F1 2*(2/3*1)/(5/3)=0.8, q3 (no answer, predicted none): 1
    assert m["exact"] == pytest.approx(200 / 3)
    assert m["f1"] == pytest.approx(100 * (1 + 0.8 + 1) / 3)
    assert m["HasAns_total"] == 2 and m["NoAns_total"] == 1 and m["NoAns_exact"] == 100.0
    assert squad_evaluate({"q": ["x"]}, {})["f1"] == 0.0  # missing prediction scores 0


def test_best_threshold_matches_brute_force():
    rng = random.Random(0)
    words = ["alpha", "beta", "gamma"]
    for _trial in range(20):
        golds, preds, na = {}, {}, {}
        for i in range(12):
            q = f"q{i}"
            golds[q] = [] if rng.random() < 0.4 else [rng.choice(words)]
            preds[q] = rng.choice(words + [""]) if rng.random() < 0.9 else ""
            na[q] = round(rng.uniform(-3, 3), 1)  # rounding creates ties
        best, th = best_threshold(golds, preds, na, "f1")
        brute = max(
            squad_evaluate(golds, apply_threshold(preds, na, t))["f1"]
            for t in [min(na.values()) - 1] + sorted(na.values())
        )
        assert best == pytest.approx(brute)
        assert squad_evaluate(golds, apply_threshold(preds, na, th))["f1"] == pytest.approx(best)


def test_threshold_everything_null_when_answers_are_wrong():
    golds = {"a": [], "b": ["x"]}
    best, th = best_threshold(golds, {"a": "y", "b": "z"}, {"a": -1.0, "b": -2.0})
    assert best == 50.0 and th < -2.0  # answering anything only loses
