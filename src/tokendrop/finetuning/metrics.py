"""Metrics exactly as the paper (and GLUE, through transformers' ``glue_compute_metrics``) reports
them.

* accuracy -- every classification task (the number for SST-2, MNLI-m/mm, QNLI, RTE, WNLI);
* F1 of the positive class (label 1: "duplicate", "paraphrase") -- QQP, MRPC;
* Matthews correlation -- CoLA (2 classes: the phi coefficient) and AX, scored with the MNLI model
  over its 3 classes: GLUE's diagnostic uses the K-class generalisation (Gorodkin's R_K), which
  this computes for any number of classes (as ``sklearn.metrics.matthews_corrcoef``);
* Pearson and Spearman correlation -- STS-B (regression); Spearman is Pearson's on the ranks, tied
  values sharing their average rank (as ``scipy.stats.spearmanr``);
* SQuAD exact match / F1 with the official answer normalisation (lower-case, strip punctuation, the
  articles a/an/the, collapse white space), max over the gold answers, as in the official v1.1 and
  v2.0 evaluation scripts; for v2.0 an unanswerable question's only gold answer is the empty string,
  and the no-answer threshold is the one that maximises the score on dev (``best_threshold``).

All scores are percentages (0-100), like the paper's tables (correlations too: 100 x r).  A
correlation that is undefined because the predictions are constant (a model predicting one class
or one value) is 0, the convention of ``matthews_corrcoef``; a dev split whose labels are constant
is refused before anything trains (``tasks.base.refuse_constant``: no model can be scored there).
Scoring zero examples is an error.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np


def _pair(labels: Sequence, preds: Sequence, dtype=None) -> tuple[np.ndarray, np.ndarray]:
    y, p = np.asarray(labels, dtype=dtype), np.asarray(preds, dtype=dtype)
    if y.shape != p.shape or y.ndim != 1:
        raise ValueError(
            f"labels and predictions must be two equally long lists, got shapes "
            f"{y.shape} and {p.shape}"
        )
    if len(y) == 0:
        raise ValueError("no examples to score")
    return y, p


def accuracy(labels: Sequence[int], preds: Sequence[int]) -> float:
    y, p = _pair(labels, preds)
    return 100.0 * float(np.mean(y == p))


def f1_binary(labels: Sequence[int], preds: Sequence[int], positive: int = 1) -> float:
    """F1 of the positive class (GLUE's QQP/MRPC F1); 0 when there are no true or predicted
    positives."""
    y, p = _pair(labels, preds)
    tp = int(np.sum((y == positive) & (p == positive)))
    fp = int(np.sum((y != positive) & (p == positive)))
    fn = int(np.sum((y == positive) & (p != positive)))
    return 100.0 * 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def matthews(labels: Sequence[int], preds: Sequence[int]) -> float:
    """Matthews correlation, K-class R_K: ``(c*s - sum_k p_k t_k) / sqrt((s^2 - sum p_k^2)(s^2 - sum
    t_k^2))`` (c correct, s examples, t_k / p_k how often class k is true / predicted); 0 when a
    side is constant."""
    y, p = _pair(labels, preds)
    classes, idx = np.unique(np.concatenate([y, p]), return_inverse=True)
    k = len(classes)
    conf = (
        np.bincount(idx[: len(y)] * k + idx[len(y) :], minlength=k * k)
        .reshape(k, k)
        .astype(np.float64)
    )
    t, q = conf.sum(1), conf.sum(0)
    c, s = np.trace(conf), conf.sum()
    den = np.sqrt((s * s - q @ q) * (s * s - t @ t))
    return 100.0 * float((c * s - t @ q) / den) if den > 0 else 0.0


def pearson(labels: Sequence[float], preds: Sequence[float]) -> float:
    """Pearson correlation x 100; 0 when either side is constant (undefined there)."""
    y, p = _pair(labels, preds, np.float64)
    y, p = y - y.mean(), p - p.mean()
    den = np.sqrt((y @ y) * (p @ p))
    return 100.0 * float(np.clip((y @ p) / den, -1.0, 1.0)) if den > 0 else 0.0


def average_ranks(x: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, tied values sharing the mean of the ranks they span."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    xs = x[order]
    # first index of each run of equal values
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], len(xs)]
    ranks = np.empty(len(x))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def spearman(labels: Sequence[float], preds: Sequence[float]) -> float:
    """Spearman rank correlation x 100: Pearson's on average ranks (ties handled)."""
    y, p = _pair(labels, preds, np.float64)
    return pearson(average_ranks(y), average_ranks(p))


METRICS: dict[str, Callable[[Sequence, Sequence], float]] = {
    "accuracy": accuracy,
    "f1": f1_binary,
    "mcc": matthews,
    "pearson": pearson,
    "spearman": spearman,
}


def split_metrics(
    names: Sequence[str], main: str, labels: Sequence, preds: Sequence
) -> dict[str, float]:
    """One dev split's metrics ``names`` (keys of ``METRICS``), ``score`` = the ``main`` one,
    ``n``."""
    out = {k: METRICS[k](labels, preds) for k in names}
    out["score"] = out[main]
    out["n"] = len(labels)
    return out


# ----------------------------------------------------------------------------------------------
# SQuAD (official evaluation scripts v1.1 and v2.0)

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    """Lower text and remove punctuation, articles and extra whitespace (official SQuAD script)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCT)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def _tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 (v2.0 script: if either side is empty, 1 if both are, else 0)."""
    p, g = _tokens(prediction), _tokens(gold)
    if len(p) == 0 or len(g) == 0:
        return float(p == g)
    common = collections.Counter(p) & collections.Counter(g)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision = same / len(p)
    recall = same / len(g)
    return 2 * precision * recall / (precision + recall)


def gold_answers(answers: Iterable[str]) -> list[str]:
    """The official v2.0 rule: only answers that normalise to something non-empty; none ->
    ``[""]``."""
    golds = [a for a in answers if normalize_answer(a)]
    return golds or [""]


def squad_scores(
    golds: Mapping[str, list[str]], preds: Mapping[str, str]
) -> tuple[dict[str, float], dict[str, float]]:
    """Per-question EM and F1 (0/1 and 0..1), max over the gold answers; missing predictions score
    0."""
    em, f = {}, {}
    for qid, answers in golds.items():
        g = gold_answers(answers)
        p = preds.get(qid, None)
        if p is None:
            em[qid] = f[qid] = 0.0
            continue
        em[qid] = max(exact_match(p, a) for a in g)
        f[qid] = max(f1(p, a) for a in g)
    return em, f


def squad_evaluate(golds: Mapping[str, list[str]], preds: Mapping[str, str]) -> dict[str, float]:
    """``{"exact", "f1", "total"}`` (+ HasAns/NoAns breakdown when there are unanswerable
    questions)."""
    em, f = squad_scores(golds, preds)
    n = len(golds)
    out = {
        "exact": 100.0 * sum(em.values()) / max(n, 1),
        "f1": 100.0 * sum(f.values()) / max(n, 1),
        "total": n,
    }
    has = [q for q, a in golds.items() if any(normalize_answer(x) for x in a)]
    no = [q for q in golds if q not in set(has)]
    if no:
        for name, qs in (("HasAns", has), ("NoAns", no)):
            out[f"{name}_exact"] = 100.0 * sum(em[q] for q in qs) / max(len(qs), 1)
            out[f"{name}_f1"] = 100.0 * sum(f[q] for q in qs) / max(len(qs), 1)
            out[f"{name}_total"] = len(qs)
    return out


def best_threshold(
    golds: Mapping[str, list[str]],
    answer_preds: Mapping[str, str],
    na_scores: Mapping[str, float],
    score: str = "f1",
) -> tuple[float, float]:
    """The no-answer threshold that maximises ``score`` (``"f1"`` or ``"exact"``) on ``golds``.

    ``answer_preds[q]`` is the best non-null answer of question q and ``na_scores[q]`` how much more
    the model believes in "no answer" (null score minus best span score).  A question is answered
    iff ``na_scores[q] <= threshold``.  Same sweep as the official v2.0 script's
    ``find_best_thresh``, except that the all-null starting point gets a threshold below every score
    (the script uses 0.0, which is not all-null when scores are negative) and tied scores are
    crossed together.  Returns ``(best score in %, threshold)``."""
    em, f = squad_scores(golds, answer_preds)
    per_q = f if score == "f1" else em
    has = {q: any(normalize_answer(x) for x in a) for q, a in golds.items()}
    qids = sorted(golds, key=lambda q: na_scores.get(q, np.inf))
    cur = float(sum(1 for q in golds if not has[q]))  # everything predicted as null
    best = cur
    thresh = (min(na_scores.values()) - 1.0) if na_scores else 0.0
    qids = [q for q in qids if q in na_scores]
    for i, q in enumerate(qids):
        if has[q]:
            cur += per_q[q]
        elif normalize_answer(answer_preds.get(q, "")):
            cur -= 1.0
        if i + 1 < len(qids) and na_scores[qids[i + 1]] == na_scores[q]:
            continue  # a threshold answers all tied questions or none of them
        if cur > best:
            best, thresh = cur, float(na_scores[q])
    return 100.0 * best / max(len(golds), 1), thresh


def apply_threshold(
    answer_preds: Mapping[str, str], na_scores: Mapping[str, float], threshold: float
) -> dict[str, str]:
    return {
        q: (a if na_scores.get(q, -np.inf) <= threshold else "") for q, a in answer_preds.items()
    }
