"""A long-input question-answering task in SQuAD v1.1's layout: the paragraphs of a SQuAD-format
train/dev pair whose context is at least ``--min-tokens`` WordPiece tokens under ``--vocab`` (with
every question of those paragraphs), so that a model must read a context of 512 tokens or more to
answer.  study-long's long downstream task:

    python scripts/make_long_squad.py --squad DIR --vocab VOCAB.txt --min-tokens 512 --out OUT

reads DIR/train-v1.1.json and DIR/dev-v1.1.json, writes OUT/train-v1.1.json, OUT/dev-v1.1.json and
OUT/long-squad.json (the counts and the settings).  Deterministic; nothing is rewritten but the
selection."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from tokendrop.runs.files import atomic_write_json


def long_paragraphs(squad: dict, count_tokens, min_tokens: int) -> tuple[dict, dict]:
    """-> (the SQuAD dict with only the paragraphs of >= min_tokens context tokens, counts)."""
    data, lengths, questions, kept = [], [], 0, 0
    total = 0
    for article in squad["data"]:
        paras = []
        for p in article["paragraphs"]:
            total += 1
            n = count_tokens(p["context"])
            if n >= min_tokens:
                paras.append(p)
                lengths.append(n)
                questions += len(p["qas"])
        if paras:
            data.append({**article, "paragraphs": paras})
            kept += len(paras)
    counts = {
        "paragraphs": total,
        "kept_paragraphs": kept,
        "questions": questions,
        "median_context_tokens": statistics.median(lengths) if lengths else None,
        "max_context_tokens": max(lengths) if lengths else None,
    }
    return {**squad, "data": data}, counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--squad", type=Path, required=True, help="dir with train/dev-v1.1.json")
    ap.add_argument(
        "--vocab", type=Path, required=True, help="the WordPiece vocab.txt to count with"
    )
    ap.add_argument("--min-tokens", type=int, default=512)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    if a.min_tokens < 1:
        print(f"error: --min-tokens: expected >= 1, got {a.min_tokens}", file=sys.stderr)
        return 2
    from transformers import BertTokenizerFast

    for f in ("train-v1.1.json", "dev-v1.1.json"):
        if not (a.squad / f).is_file():
            print(
                f"error: {a.squad / f}: no such file (give --squad a SQuAD v1.1 dir)",
                file=sys.stderr,
            )
            return 2
    if not a.vocab.is_file():
        print(f"error: {a.vocab}: no such vocabulary file (--vocab)", file=sys.stderr)
        return 2
    tok = BertTokenizerFast(str(a.vocab), do_lower_case=True)

    def count(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    report = {"min_tokens": a.min_tokens, "vocab": a.vocab.name}
    outs = {}
    for f in ("train-v1.1.json", "dev-v1.1.json"):
        squad = json.loads((a.squad / f).read_text(encoding="utf-8"))
        outs[f], report[f] = long_paragraphs(squad, count, a.min_tokens)
        if not report[f]["questions"]:
            print(
                f"error: {a.squad / f}: no paragraph of >= {a.min_tokens} tokens; "
                "lower --min-tokens",
                file=sys.stderr,
            )
            return 2
    a.out.mkdir(parents=True, exist_ok=True)
    for f, d in outs.items():
        atomic_write_json(a.out / f, d)
    atomic_write_json(a.out / "long-squad.json", report)
    for f in outs:
        r = report[f]
        print(
            f"{a.out / f}: {r['kept_paragraphs']} of {r['paragraphs']} paragraphs, "
            f"{r['questions']} questions, median context {r['median_context_tokens']} tokens"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
