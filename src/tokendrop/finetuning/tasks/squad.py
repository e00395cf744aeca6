"""SQuAD v1.1 / v2.0 (tasks ``squad1``, ``squad2``; span QA): reading, the standard BERT
preprocessing and post-processing; exact match and F1 (the main number) of the official scripts.

Files: ``train-v1.1.json`` / ``dev-v1.1.json`` and ``train-v2.0.json`` / ``dev-v2.0.json`` as
distributed, in the data directory or its ``squad/``.

Preprocessing (as Google's ``run_squad.py`` / ``transformers``' ``run_qa.py``): the question is cut
to ``max_query_len`` word pieces; the context is tokenized once with character offsets from the
``tokenizers`` library and cut into windows of ``max_seq_len - len(question) - 3`` pieces that start
``doc_stride`` pieces apart; each window becomes ``[CLS] question [SEP] window [SEP]`` (token types
0/1). A training window whose span does not contain the whole answer (and every unanswerable
question) gets the [CLS] position 0 as start and end.

Post-processing: for every question, over all of its windows, the ``n_best`` highest start and end
logits are paired; a pair is kept if both tokens are context tokens, end >= start, the span is at
most ``max_answer_len`` pieces and the start token has its *maximal context* in that window (the
rule of the original BERT code, so a token seen in two windows is judged where it has more context
on both sides).  The answer text is the exact context substring between the start token's first
character and the end token's last character.  The null score is ``start[CLS] + end[CLS]``, minimum
over the question's windows; ``na_score = null - best span score``.  For v2.0 a question is answered
iff ``na_score <= threshold``, the threshold being the one that maximises dev F1
(``metrics.best_threshold``).
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tokendrop.finetuning.common import FinetuneError
from tokendrop.finetuning.metrics import apply_threshold, best_threshold, squad_evaluate
from tokendrop.finetuning.tasks.base import FILLER, TaskSpec
from tokendrop.runs.files import atomic_write_text, read_json

SKIP_QUESTIONS_HINT = " (to leave such questions out, set skip_malformed=true)"
NAMES = "alice bob carol dave".split()  # generated examples' facts: "NAME VERB the THING play."
VERBS = "wrote built founded".split()
THINGS = "paris london rome".split()


@dataclass
class SquadTask(TaskSpec):
    version: int = 1  # 1: SQuAD v1.1 (every question answerable), 2: v2.0 (unanswerable ones too)

    def write_examples(
        self, directory: str | os.PathLike, n_train: int = 8, n_dev: int = 4, seed: int = 0
    ) -> Path:
        """Generated examples (for tests) in the task's files in ``directory``: "who wrote (built,
        founded) the X play?" over short paragraphs, every other one followed by an unanswerable
        question in v2.0."""
        d = Path(directory)
        rng = random.Random(f"{self.name}:{seed}")
        for fname, n in ((self.train, n_train), *((f, n_dev) for f in self.dev.values())):
            data = []
            for i in range(n):
                who, what, verb = rng.choice(NAMES), rng.choice(THINGS), rng.choice(VERBS)
                filler = " ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 15)))
                ctx = f"{filler}. {who.title()} {verb} the {what} play. {filler}."
                qas = [
                    {
                        "id": f"{fname}-{i}",
                        "question": f"Who {verb} the {what} play?",
                        "is_impossible": False,
                        "answers": [{"text": who.title(), "answer_start": ctx.index(who.title())}],
                    }
                ]
                if self.version == 2 and i % 2 == 0:
                    qas.append(
                        {
                            "id": f"{fname}-{i}n",
                            "question": f"Who {verb} the {what} river?",
                            "answers": [],
                            "is_impossible": True,
                        }
                    )
                data.append({"title": f"example-{i}", "paragraphs": [{"context": ctx, "qas": qas}]})
            version = "v2.0" if self.version == 2 else "1.1"
            atomic_write_text(d / fname, json.dumps({"version": version, "data": data}))
        return d


TASKS = [
    SquadTask(
        "squad1",
        "span",
        ("exact", "f1"),
        "f1",
        dirname="squad",
        train="train-v1.1.json",
        dev={"dev": "dev-v1.1.json"},
        test={},
        version=1,
        aliases=("squad", "squad-v1", "squad_v1", "squad1.1"),
    ),
    SquadTask(
        "squad2",
        "span",
        ("exact", "f1"),
        "f1",
        dirname="squad",
        train="train-v2.0.json",
        dev={"dev": "dev-v2.0.json"},
        test={},
        version=2,
        aliases=("squad-v2", "squad_v2", "squad2.0"),
    ),
]


@dataclass
class SquadExample:
    qid: str
    question: str
    context: str
    answers: list[str]  # gold texts (v2 unanswerable: [])
    answer_starts: list[int]
    is_impossible: bool = False
    title: str = ""


@dataclass
class SquadFeature:
    example_index: int
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[tuple[int, int] | None]  # char span in the context for context tokens, else None
    max_context: list[bool]  # context token has its maximal context in this window
    start_position: int = 0
    end_position: int = 0


def _where(path, *parts) -> str:
    return f"{path}: " + "".join(parts)


def read_squad(
    path: str | os.PathLike, version: int | None = None, check_answers: bool = True
) -> tuple[list[SquadExample], int]:
    """Read a SQuAD JSON file -> (examples, version 1 or 2).

    ``version`` (1 or 2) is what the caller expects; a v1.1 task refuses unanswerable questions.
    Answers are checked: ``answer_start`` is an offset into the context (never negative, the
    answer inside it), an answerable question's answer text is not empty, and
    ``context[answer_start:][:len(text)] == text``; an answer failing one is an error naming the
    file, the answer and the question id (never moved to another occurrence: which one was meant is
    not ours to guess).
    """
    path = Path(path)
    if not path.is_file():
        raise FinetuneError(f"{path}: no such file")
    d = read_json(path, FinetuneError, expect=None)
    if not isinstance(d, dict) or not isinstance(d.get("data"), list):
        raise FinetuneError(f"{path}: not a SQuAD file (expected an object with a 'data' list)")
    file_version = str(d.get("version", ""))
    examples: list[SquadExample] = []
    seen: set[str] = set()
    any_impossible = False
    for ai, art in enumerate(d["data"]):
        loc_a = f"data[{ai}]"
        if not isinstance(art, dict) or not isinstance(art.get("paragraphs"), list):
            raise FinetuneError(
                _where(path, loc_a, ": expected an object with a 'paragraphs' list")
            )
        title = str(art.get("title", ""))
        for pi, par in enumerate(art["paragraphs"]):
            loc_p = f"{loc_a}.paragraphs[{pi}]"
            if (
                not isinstance(par, dict)
                or not isinstance(par.get("context"), str)
                or not isinstance(par.get("qas"), list)
            ):
                raise FinetuneError(
                    _where(
                        path, loc_p, ": expected an object with a 'context' string and a 'qas' list"
                    )
                )
            ctx = par["context"]
            for qi, qa in enumerate(par["qas"]):
                loc = f"{loc_p}.qas[{qi}]"
                if not isinstance(qa, dict):
                    raise FinetuneError(_where(path, loc, ": expected an object"))
                for key in ("id", "question"):
                    if not isinstance(qa.get(key), str):
                        raise FinetuneError(_where(path, loc, f": missing or non-string {key!r}"))
                qid = qa["id"]
                if qid in seen:
                    raise FinetuneError(_where(path, loc, f": duplicate question id {qid!r}"))
                seen.add(qid)
                imp = qa.get("is_impossible", False)
                if not isinstance(imp, bool):
                    raise FinetuneError(
                        _where(path, loc, ": 'is_impossible' must be true or false")
                    )
                answers = qa.get("answers", [])
                if not isinstance(answers, list):
                    raise FinetuneError(_where(path, loc, ": 'answers' must be a list"))
                texts, starts = [], []
                for ni, a in enumerate(answers):
                    la = f"{loc}.answers[{ni}]"
                    if (
                        not isinstance(a, dict)
                        or not isinstance(a.get("text"), str)
                        or isinstance(a.get("answer_start"), bool)
                        or not isinstance(a.get("answer_start"), int)
                    ):
                        raise FinetuneError(
                            _where(path, la, ": expected {'text': string, 'answer_start': integer}")
                        )
                    text, start = a["text"], a["answer_start"]
                    if start < 0 or len(text) <= len(ctx) < start + len(text):
                        raise FinetuneError(
                            _where(
                                path,
                                la,
                                f" (id {qid!r}): answer_start {start} is outside the context "
                                f"(0 to {len(ctx) - len(text)} for a {len(text)}-character "
                                f"answer in a {len(ctx)}-character context"
                                f"{_occurs(ctx, text)}); fix answer_start",
                            )
                        )
                    if not imp and not text:
                        raise FinetuneError(
                            _where(
                                path,
                                la,
                                f" (id {qid!r}): empty answer text; give the answer's text, "
                                "or mark an unanswerable question is_impossible",
                            )
                        )
                    if check_answers and ctx[start : start + len(text)] != text:
                        occ = list(_find_all(ctx, text)) if text else []
                        if not occ:
                            raise FinetuneError(
                                _where(
                                    path,
                                    la,
                                    f" (id {qid!r}): answer {text[:40]!r} does not "
                                    "occur in the context",
                                )
                            )
                        at = ", ".join(str(i) for i in occ[:5]) + (" ..." if len(occ) > 5 else "")
                        raise FinetuneError(
                            _where(
                                path,
                                la,
                                f" (id {qid!r}): answer_start {start} does not point at the "
                                f"answer {text[:40]!r} (context[{start}:{start + len(text)}] is "
                                f"{ctx[start : start + len(text)][:40]!r}; the text occurs at "
                                f"{at}); fix answer_start",
                            )
                        )
                    texts.append(text)
                    starts.append(start)
                if imp:
                    any_impossible = True
                    texts, starts = [], []  # plausible answers are not gold answers
                elif not texts:
                    raise FinetuneError(
                        _where(path, loc, ": no answers and not marked is_impossible")
                    )
                examples.append(SquadExample(qid, qa["question"], ctx, texts, starts, imp, title))
    v = 2 if (any_impossible or file_version.lstrip("v").startswith("2")) else 1
    if version == 1 and any_impossible:
        raise FinetuneError(
            f"{path}: contains unanswerable questions (SQuAD v2.0); use task squad2"
        )
    if not examples:
        raise FinetuneError(f"{path}: no questions")
    return examples, (version or v)


def _occurs(ctx: str, text: str) -> str:
    """'' or "; the text occurs at 12, 40" (at most five offsets)."""
    occ = list(_find_all(ctx, text)) if text else []
    if not occ:
        return ""
    return (
        "; the text occurs at "
        + ", ".join(str(i) for i in occ[:5])
        + (" ..." if len(occ) > 5 else "")
    )


def _find_all(s: str, sub: str):
    i = s.find(sub)
    while i >= 0:
        yield i
        i = s.find(sub, i + 1)


# ----------------------------------------------------------------------------------------------
# preprocessing


def _windows(n_ctx: int, max_ctx: int, stride: int) -> list[tuple[int, int]]:
    """(start, length) of the context windows (BERT's ``doc_spans``)."""
    spans = []
    start = 0
    while True:
        length = min(n_ctx - start, max_ctx)
        spans.append((start, length))
        if start + length >= n_ctx:
            break
        start += min(length, stride)
    return spans


def _is_max_context(spans: list[tuple[int, int]], cur: int, pos: int) -> bool:
    best_score, best = None, None
    for i, (s, n) in enumerate(spans):
        end = s + n - 1
        if pos < s or pos > end:
            continue
        score = min(pos - s, end - pos) + 0.01 * n
        if best_score is None or score > best_score:
            best_score, best = score, i
    return cur == best


def _char_to_token_span(offsets: list[tuple[int, int]], cs: int, ce: int) -> tuple[int, int] | None:
    """First and last context token overlapping the character span [cs, ce)."""
    first = last = None
    for i, (a, b) in enumerate(offsets):
        if b > cs and a < ce and b > a:
            if first is None:
                first = i
            last = i
        elif a >= ce:
            break
    return None if first is None else (first, last)


def build_features(
    examples: list[SquadExample],
    tokenizer,
    max_seq_len: int = 384,
    doc_stride: int = 128,
    max_query_len: int = 64,
    training: bool = False,
    specials: dict[str, int | None] | None = None,
    skipped: list[str] | None = None,
    path: str | os.PathLike | None = None,
) -> list[SquadFeature]:
    """The standard SQuAD windows for ``examples`` (see module doc).  ``tokenizer``:
    ``tokenizers.Tokenizer``; ``specials``: its declared special tokens' ids
    (``finetune_tokenizer``'s; default: [CLS] and [SEP]).

    In ``training``, an answer that covers no word piece of the context (only whitespace or
    characters the tokenizer drops) has no span to learn: an error naming ``path`` (the examples'
    file) and the question id, unless ``skipped`` is a list: then the question is left out and its
    message appended there (``skip_malformed``)."""
    if specials is None:
        specials = {"cls": tokenizer.token_to_id("[CLS]"), "sep": tokenizer.token_to_id("[SEP]")}
    cls_id, sep_id = specials.get("cls"), specials.get("sep")
    if cls_id is None or sep_id is None:
        raise FinetuneError("tokenizer vocabulary lacks its declared cls or sep token")
    if max_seq_len < max_query_len + 4:
        raise FinetuneError(
            f"max_seq_len_qa={max_seq_len} leaves no room for context after "
            f"max_query_len={max_query_len}"
        )
    q_enc = tokenizer.encode_batch([e.question for e in examples], add_special_tokens=False)
    uniq: dict[str, int] = {}
    for e in examples:
        uniq.setdefault(e.context, len(uniq))
    ctx_list = list(uniq)
    c_enc = tokenizer.encode_batch(ctx_list, add_special_tokens=False)
    c_ids = [enc.ids for enc in c_enc]
    c_off = [[tuple(o) for o in enc.offsets] for enc in c_enc]
    feats: list[SquadFeature] = []
    for ei, ex in enumerate(examples):
        q_ids = q_enc[ei].ids[:max_query_len]
        ci = uniq[ex.context]
        ids, offs = c_ids[ci], c_off[ci]
        max_ctx = max_seq_len - len(q_ids) - 3
        spans = _windows(len(ids), max_ctx, doc_stride)
        tok_span = None
        if training and not ex.is_impossible and ex.answers:
            cs = ex.answer_starts[0]
            tok_span = _char_to_token_span(offs, cs, cs + len(ex.answers[0]))
            if tok_span is None:
                msg = (
                    f"{path}: " * (path is not None) + f"question id {ex.qid!r}: answer "
                    f"{ex.answers[0][:40]!r} at answer_start {cs} covers no word piece of the "
                    "context (only whitespace or characters the tokenizer drops); fix the answer"
                )
                if skipped is None:
                    raise FinetuneError(msg + SKIP_QUESTIONS_HINT)
                skipped.append(msg)
                continue
        prefix = len(q_ids) + 2
        for wi, (s, n) in enumerate(spans):
            input_ids = [cls_id] + q_ids + [sep_id] + ids[s : s + n] + [sep_id]
            types = [0] * prefix + [1] * (n + 1)
            offsets: list[tuple[int, int] | None] = [None] * prefix + list(offs[s : s + n]) + [None]
            maxc = (
                [False] * prefix + [_is_max_context(spans, wi, s + j) for j in range(n)] + [False]
            )
            sp = ep = 0
            if tok_span is not None and s <= tok_span[0] and tok_span[1] < s + n:
                sp, ep = prefix + tok_span[0] - s, prefix + tok_span[1] - s
            feats.append(SquadFeature(ei, input_ids, types, offsets, maxc, sp, ep))
    return feats


# ----------------------------------------------------------------------------------------------
# post-processing


@dataclass
class SquadPrediction:
    text: str  # best non-null answer ("" if none)
    score: float  # its start + end logit (-inf if none)
    null_score: float
    na_score: float  # null_score - score
    nbest: list[dict] = field(default_factory=list)


def _top(x: np.ndarray, k: int) -> np.ndarray:
    k = min(k, len(x))
    idx = np.argpartition(-x, k - 1)[:k]
    return idx[np.argsort(-x[idx], kind="stable")]


def postprocess(
    examples: list[SquadExample],
    features: list[SquadFeature],
    start_logits,
    end_logits,
    n_best: int = 20,
    max_answer_len: int = 30,
) -> dict[str, SquadPrediction]:
    """Best span per question (see module doc).  ``start_logits[i]``/``end_logits[i]``: feature i's
    logits (at least as long as its input; padding beyond is ignored)."""
    by_ex: dict[int, list[int]] = {}
    for fi, f in enumerate(features):
        by_ex.setdefault(f.example_index, []).append(fi)
    out: dict[str, SquadPrediction] = {}
    for ei, ex in enumerate(examples):
        cands: list[tuple[float, int, int, int]] = []
        null = math.inf
        for fi in by_ex.get(ei, []):
            f = features[fi]
            n = len(f.input_ids)
            s = np.asarray(start_logits[fi], dtype=np.float64)[:n]
            e = np.asarray(end_logits[fi], dtype=np.float64)[:n]
            null = min(null, float(s[0] + e[0]))
            for si in _top(s, n_best):
                if f.offsets[si] is None or not f.max_context[si]:
                    continue
                for ej in _top(e, n_best):
                    if f.offsets[ej] is None or ej < si or ej - si + 1 > max_answer_len:
                        continue
                    cands.append((float(s[si] + e[ej]), fi, int(si), int(ej)))
        cands.sort(key=lambda c: -c[0])
        nbest, seen = [], set()
        for score, fi, si, ej in cands:
            f = features[fi]
            a, b = f.offsets[si][0], f.offsets[ej][1]
            text = ex.context[a:b]
            if text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "score": score, "start": a, "end": b})
            if len(nbest) >= n_best:
                break
        if nbest:
            scores = np.array([c["score"] for c in nbest] + ([null] if math.isfinite(null) else []))
            probs = np.exp(scores - scores.max())
            probs /= probs.sum()
            for c, p in zip(nbest, probs):
                c["probability"] = float(p)
        if not math.isfinite(null):
            null = 0.0
        best_text = nbest[0]["text"] if nbest else ""
        best_score = nbest[0]["score"] if nbest else -math.inf
        na = null - best_score if nbest else math.inf
        out[ex.qid] = SquadPrediction(best_text, best_score, null, na, nbest)
    return out


def squad_metrics(
    examples: list[SquadExample], preds: dict[str, SquadPrediction], version: int
) -> tuple[dict, dict[str, str]]:
    """Official EM/F1.  v1: best span.  v2: the dev-optimal no-answer threshold on F1 (also
    reported: EM at that threshold, the best-EM threshold and the scores at threshold 0)."""
    golds = {e.qid: list(e.answers) for e in examples}
    answer = {q: p.text for q, p in preds.items()}
    if version == 1:
        m = squad_evaluate(golds, answer)
        m["score"] = m["f1"]
        return m, answer
    na = {q: (p.na_score if math.isfinite(p.na_score) else 1e30) for q, p in preds.items()}
    best_f1, th_f1 = best_threshold(golds, answer, na, "f1")
    best_em, th_em = best_threshold(golds, answer, na, "exact")
    final = apply_threshold(answer, na, th_f1)
    m = squad_evaluate(golds, final)
    at0 = squad_evaluate(golds, apply_threshold(answer, na, 0.0))
    m.update(
        {
            "best_f1": best_f1,
            "best_f1_thresh": th_f1,
            "best_exact": best_em,
            "best_exact_thresh": th_em,
            "f1_thresh0": at0["f1"],
            "exact_thresh0": at0["exact"],
            "null_threshold": th_f1,
            "score": m["f1"],
        }
    )
    return m, final
