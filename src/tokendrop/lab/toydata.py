"""The study's generated toy tasks (``study-tiny``, the study's ``toy_data`` preset,
``configs/suite-tiny.toml``): every GLUE task and SQuAD v1.1/v2.0 in its layout as distributed,
learnable from a keyword (deterministic for a seed).  Their pretraining corpus is the library's
``tokendrop.finetuning.task_corpus`` (sentences of the same words).  Tests make their own data:
each task's examples from its definition (``tokendrop.finetuning.tasks.TaskSpec.write_examples``),
corpora, vocabularies and checkpoints from ``tests/fixtures/toydata.py``.

* ``write_keyword_sentiment`` (SST-2 layout; the label is one sentiment keyword among filler words
  -- learnable in seconds by a tiny encoder), ``write_toy_glue`` / ``write_toy_squad`` (every GLUE
  task and SQuAD v1.1/v2.0 in its layout as distributed).

The words are the fine-tuning tasks' example words (``tokendrop.finetuning.tasks.base``,
``.squad``).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from tokendrop.finetuning.tasks.base import FILLER, NEGATIVE, POSITIVE
from tokendrop.finetuning.tasks.squad import (
    NAMES as TASK_NAMES,
    THINGS as TASK_THINGS,
    VERBS as TASK_VERBS,
)
from tokendrop.runs.files import atomic_write_text


def keyword_sentence(rng: random.Random, label: int) -> str:
    words = [rng.choice(FILLER) for _ in range(rng.randint(4, 12))]
    words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
    s = " ".join(words)
    return s[0].upper() + s[1:] + rng.choice([".", "!", ""])


def _write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    atomic_write_text(path, "\n".join("\t".join(r) for r in [header, *rows]) + "\n")


def write_keyword_sentiment(
    out_dir: str | os.PathLike, n_train: int = 400, n_dev: int = 100, seed: int = 0
) -> Path:
    """SST-2 layout: ``train.tsv``/``dev.tsv`` with header ``sentence\\tlabel``."""
    out = Path(out_dir)
    rng = random.Random(seed)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        _write_tsv(
            out / name,
            ["sentence", "label"],
            [[keyword_sentence(rng, i % 2), str(i % 2)] for i in range(n)],
        )
    return out


def _pair(rng: random.Random) -> tuple[str, str, int]:
    """A pair task learnable from surface cues: label 1 iff both sentences share the keyword
    polarity."""
    a, b = rng.randint(0, 1), rng.randint(0, 1)
    return keyword_sentence(rng, a), keyword_sentence(rng, b), int(a == b)


def write_toy_glue(
    root: str | os.PathLike, n_train: int = 64, n_dev: int = 32, seed: int = 0
) -> Path:
    """Every GLUE task in its layout as distributed, under ``root``: CoLA (header-less train/dev),
    SST-2, MRPC, STS-B (10 columns, float scores), QQP, MNLI (12/16 columns, matched/mismatched),
    QNLI, RTE, WNLI, AX (``diagnostic-full.tsv``), and each task's unlabelled test file(s)."""
    root = Path(root)
    rng = random.Random(seed)
    write_keyword_sentiment(root / "SST-2", n_train, n_dev, seed)
    nli = ["contradiction", "entailment", "neutral"]
    mnli_train_h = (
        "index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
        "sentence2_parse sentence1 sentence2 label1 gold_label"
    ).split()
    mnli_dev_h = mnli_train_h[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]
    for name, n, header in (
        ("train.tsv", n_train, mnli_train_h),
        ("dev_matched.tsv", n_dev, mnli_dev_h),
        ("dev_mismatched.tsv", n_dev, mnli_dev_h),
    ):
        rows = []
        for i in range(n):
            a, b, same = _pair(rng)
            lab = nli[1] if same else nli[0] if i % 3 else nli[2]
            vals = {
                "index": str(i),
                "promptID": str(i),
                "pairID": f"{i}e",
                "genre": "toy",
                "sentence1": a,
                "sentence2": b,
                "sentence1_binary_parse": a,
                "sentence2_binary_parse": b,
                "sentence1_parse": a,
                "sentence2_parse": b,
                "label1": lab,
                "gold_label": lab,
            }
            rows.append([vals.get(h, "") for h in header])
        _write_tsv(root / "MNLI" / name, header, rows)
    for task, header, labs in (
        ("QNLI", ["index", "question", "sentence", "label"], ["not_entailment", "entailment"]),
        ("RTE", ["index", "sentence1", "sentence2", "label"], ["not_entailment", "entailment"]),
        ("QQP", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], ["0", "1"]),
    ):
        for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
            rows = []
            for i in range(n):
                a, b, same = _pair(rng)
                rows.append(
                    [str(i)]
                    + ([str(2 * i), str(2 * i + 1)] if task == "QQP" else [])
                    + [a, b, labs[same]]
                )
            _write_tsv(root / task / name, header, rows)
    ax_header = [
        "Lexical Semantics",
        "Predicate-Argument Structure",
        "Logic",
        "Knowledge",
        "Domain",
        "Premise",
        "Hypothesis",
        "Label",
    ]
    rows = []
    for _ in range(n_dev):
        a, b, same = _pair(rng)
        rows.append(["", "", "", "", "toy", a, b, nli[1] if same else nli[0]])
    _write_tsv(root / "AX" / "diagnostic-full.tsv", ax_header, rows)
    _write_more_glue(root, n_train, n_dev, random.Random(f"{seed}-more"))
    return root


def _write_more_glue(root: Path, n_train: int, n_dev: int, rng: random.Random) -> None:
    """CoLA, MRPC, STS-B and WNLI, and every task's test files (a random stream of their own, so the
    tasks above are the same for a seed as before these were added)."""
    splits = (("train.tsv", n_train), ("dev.tsv", n_dev))
    # CoLA: no header; source, label, original mark ("*" = unacceptable), sentence
    for (
        name,
        n,
    ) in splits:
        rows = []
        for i in range(n):
            lab = rng.randint(0, 1)
            rows.append(
                [f"toy{i % 7:02d}", str(lab), "" if lab else "*", keyword_sentence(rng, lab)]
            )
        atomic_write_text(root / "CoLA" / name, "\n".join("\t".join(r) for r in rows) + "\n")
    mrpc_h = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    stsb_h = [
        "index",
        "genre",
        "filename",
        "year",
        "old_index",
        "source1",
        "source2",
        "sentence1",
        "sentence2",
        "score",
    ]
    for name, n in splits:
        rows = []
        for i in range(n):
            a, b, same = _pair(rng)
            rows.append([str(same), str(1000 + 2 * i), str(1001 + 2 * i), a, b])
        atomic_write_text(
            root / "MRPC" / name,
            "\ufeff" * (name == "train.tsv")  # the download's train file has a BOM
            + "\n".join("\t".join(r) for r in [mrpc_h, *rows])
            + "\n",
        )
        rows = []
        # similarity 0-5: high when both sentences carry the same sentiment polarity, plus noise
        for i in range(n):
            la, lb = rng.randint(0, 1), rng.randint(0, 1)
            score = min(
                5.0,
                max(
                    0.0, (4.0 if la == lb else 1.0) + rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0])
                ),
            )
            rows.append(
                [
                    str(i),
                    "main-toy",
                    "toy",
                    "2012",
                    f"{i:04d}",
                    "none",
                    "none",
                    keyword_sentence(rng, la),
                    keyword_sentence(rng, lb),
                    f"{score:.3f}",
                ]
            )
        _write_tsv(root / "STS-B" / name, stsb_h, rows)
        rows = []
        for i in range(n):
            a, b, same = _pair(rng)
            rows.append([str(i), a, b, str(same)])
        _write_tsv(root / "WNLI" / name, ["index", "sentence1", "sentence2", "label"], rows)
    # the unlabelled test files: the labelled layout without its label (STS-B: 9 of its 10 columns,
    # MNLI: 10), except CoLA (a header, index + sentence), MRPC (index for Quality), QQP (id + the
    # questions)
    n = max(1, n_dev // 2)

    def pair_rows(k: int):
        return [_pair(rng)[:2] for _ in range(k)]

    tests = {
        "CoLA/test.tsv": (
            ["index", "sentence"],
            [[str(i), keyword_sentence(rng, i % 2)] for i in range(n)],
        ),
        "SST-2/test.tsv": (
            ["index", "sentence"],
            [[str(i), keyword_sentence(rng, i % 2)] for i in range(n)],
        ),
        "MRPC/test.tsv": (
            ["index"] + mrpc_h[1:],
            [[str(i), str(i), str(i + 1), a, b] for i, (a, b) in enumerate(pair_rows(n))],
        ),
        "STS-B/test.tsv": (
            stsb_h[:-1],
            [
                [str(i), "main-toy", "toy", "2012", f"{i:04d}", "none", "none", a, b]
                for i, (a, b) in enumerate(pair_rows(n))
            ],
        ),
        "QQP/test.tsv": (
            ["id", "question1", "question2"],
            [[str(i), a, b] for i, (a, b) in enumerate(pair_rows(n))],
        ),
        "QNLI/test.tsv": (
            ["index", "question", "sentence"],
            [[str(i), a, b] for i, (a, b) in enumerate(pair_rows(n))],
        ),
        "AX/AX.tsv": (
            ["index", "sentence1", "sentence2"],
            [[str(i), a, b] for i, (a, b) in enumerate(pair_rows(n))],
        ),
    }
    for t in ("RTE", "WNLI"):
        tests[f"{t}/test.tsv"] = (
            ["index", "sentence1", "sentence2"],
            [[str(i), a, b] for i, (a, b) in enumerate(pair_rows(n))],
        )
    mnli_test_h = (
        "index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
        "sentence2_parse sentence1 sentence2"
    ).split()
    for f in ("test_matched.tsv", "test_mismatched.tsv"):
        tests[f"MNLI/{f}"] = (
            mnli_test_h,
            [
                [str(i), str(i), f"{i}n", "toy", a, b, a, b, a, b]
                for i, (a, b) in enumerate(pair_rows(n))
            ],
        )
    for rel, (header, rows) in tests.items():
        _write_tsv(root / rel, header, rows)


def write_toy_squad(
    root: str | os.PathLike, n_train: int = 48, n_dev: int = 24, seed: int = 0
) -> Path:
    """train/dev-v1.1.json and train/dev-v2.0.json: "who <verb> X?" over short generated
    paragraphs."""
    root = Path(root)
    rng = random.Random(seed)

    def make(n: int, v2: bool, prefix: str) -> dict:
        data = []
        for i in range(n):
            who, what, verb = (
                rng.choice(TASK_NAMES),
                rng.choice(TASK_THINGS),
                rng.choice(TASK_VERBS),
            )
            filler = " ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 15)))
            ctx = f"{filler}. {who.title()} {verb} the {what} play. {filler}."
            start = ctx.index(who.title())
            qas = [
                {
                    "id": f"{prefix}{i:05d}a",
                    "question": f"Who {verb} the {what} play?",
                    "answers": [{"text": who.title(), "answer_start": start}],
                    "is_impossible": False,
                }
            ]
            if v2 and i % 2 == 0:
                other = rng.choice([t for t in TASK_THINGS if t != what])
                qas.append(
                    {
                        "id": f"{prefix}{i:05d}n",
                        "question": f"Who {verb} the {other} river?",
                        "answers": [],
                        "is_impossible": True,
                    }
                )
            data.append({"title": f"toy-{i}", "paragraphs": [{"context": ctx, "qas": qas}]})
        return {"version": "v2.0" if v2 else "1.1", "data": data}

    for v2, tag in ((False, "v1.1"), (True, "v2.0")):
        for split, n in (("train", n_train), ("dev", n_dev)):
            atomic_write_text(
                root / f"{split}-{tag}.json", json.dumps(make(n, v2, f"{split}{tag}"))
            )
    return root
