"""Small generated fixtures for tests, smoke runs and ``configs/suite-tiny.toml``.

* ``write_vocab``: a tiny uncased WordPiece vocabulary (specials, letters, ``##`` letters, the toy words);
* ``write_checkpoint``: a randomly initialised tokendrop checkpoint dir (``meta.json`` +
  ``model.safetensors`` in our parameter names, ``tokenizer/vocab.txt``), the layout
  ``tokendrop.hf.load_pretrained`` reads;
* ``write_keyword_sentiment``: an SST-2-format task (``sentence\\tlabel``) whose label is given by one
  sentiment keyword among filler words — learnable in seconds by a tiny encoder;
* ``write_toy_glue`` / ``write_toy_squad``: all suite tasks in the original layouts, tiny and
  generated (for tests of the evaluation protocol, not for meaningful scores).
"""

from __future__ import annotations

import json
import os
import random
import string
from dataclasses import asdict
from pathlib import Path

FILLER = ("the movie film story plot actor scene music script cast it was is this a an of and with "
          "to in very quite really rather truly simply just so").split()
POSITIVE = "good great excellent wonderful fun brilliant".split()
NEGATIVE = "bad awful boring dull terrible poor".split()
EXTRA = ("who what where when which name city river person year play wrote built founded "
         "paris london rome alice bob carol dave same different yes no maybe").split()
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def toy_words() -> list[str]:
    return sorted(set(FILLER + POSITIVE + NEGATIVE + EXTRA))


def write_vocab(path: str | os.PathLike) -> Path:
    """A WordPiece vocab that can spell anything lower-case (letters, ``##`` letters, digits, punctuation)."""
    p = Path(path)
    if p.suffix != ".txt":
        p.mkdir(parents=True, exist_ok=True)
        p = p / "vocab.txt"
    else:
        p.parent.mkdir(parents=True, exist_ok=True)
    toks = SPECIALS + list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]
    toks += list(string.digits) + ["##" + c for c in string.digits] + list(".,!?'\"-:;()")
    toks += [w for w in toy_words() if w not in toks]
    p.write_text("\n".join(toks) + "\n", encoding="utf-8")
    return p


def write_checkpoint(out_dir: str | os.PathLike, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 2,
                     intermediate_size: int = 128, max_position_embeddings: int = 512, seed: int = 0,
                     vocab: str | os.PathLike | None = None) -> Path:
    """A randomly initialised ``BertForMaskedLM`` saved as a tokendrop checkpoint dir."""
    import torch
    from safetensors.torch import save_file

    from ..config import ModelConfig
    from ..model import BertForMaskedLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab_path = write_vocab(out / "tokenizer") if vocab is None else Path(vocab)
    if vocab is not None:
        (out / "tokenizer").mkdir(exist_ok=True)
        (out / "tokenizer" / "vocab.txt").write_bytes(vocab_path.read_bytes())
    n_vocab = sum(1 for _ in open(out / "tokenizer" / "vocab.txt", encoding="utf-8"))
    cfg = ModelConfig(vocab_size=n_vocab, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                      intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings)
    torch.manual_seed(seed)
    model = BertForMaskedLM(cfg)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"))
    (out / "meta.json").write_text(json.dumps({"config": {"model": asdict(cfg)}, "step": 0, "toy": True}, indent=2))
    return out


def keyword_sentence(rng: random.Random, label: int) -> str:
    words = [rng.choice(FILLER) for _ in range(rng.randint(4, 12))]
    words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
    s = " ".join(words)
    return s[0].upper() + s[1:] + rng.choice([".", "!", ""])


def write_keyword_sentiment(out_dir: str | os.PathLike, n_train: int = 400, n_dev: int = 100, seed: int = 0) -> Path:
    """SST-2 layout: ``train.tsv``/``dev.tsv`` with header ``sentence\\tlabel``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        rows = ["sentence\tlabel"]
        for i in range(n):
            y = i % 2
            rows.append(f"{keyword_sentence(rng, y)}\t{y}")
        (out / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out


def _pair(rng: random.Random) -> tuple[str, str, int]:
    """A pair task learnable from surface cues: label 1 iff both sentences share the keyword polarity."""
    a, b = rng.randint(0, 1), rng.randint(0, 1)
    return keyword_sentence(rng, a), keyword_sentence(rng, b), int(a == b)


def write_toy_glue(root: str | os.PathLike, n_train: int = 64, n_dev: int = 32, seed: int = 0) -> Path:
    """SST-2, MNLI (12/16 columns), QNLI, QQP, RTE and AX in the GLUE layouts under ``root``."""
    root = Path(root)
    rng = random.Random(seed)
    write_keyword_sentiment(root / "SST-2", n_train, n_dev, seed)
    nli = ["contradiction", "entailment", "neutral"]
    mnli_train_h = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
                    "sentence2_parse sentence1 sentence2 label1 gold_label").split()
    mnli_dev_h = mnli_train_h[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]
    (root / "MNLI").mkdir(parents=True, exist_ok=True)
    for name, n, header in (("train.tsv", n_train, mnli_train_h), ("dev_matched.tsv", n_dev, mnli_dev_h),
                            ("dev_mismatched.tsv", n_dev, mnli_dev_h)):
        rows = ["\t".join(header)]
        for i in range(n):
            a, b, same = _pair(rng)
            lab = nli[1] if same else nli[0] if i % 3 else nli[2]
            vals = {"index": str(i), "promptID": str(i), "pairID": f"{i}e", "genre": "toy", "sentence1": a,
                    "sentence2": b, "sentence1_binary_parse": a, "sentence2_binary_parse": b,
                    "sentence1_parse": a, "sentence2_parse": b, "label1": lab, "gold_label": lab}
            rows.append("\t".join(vals.get(h, "") for h in header))
        (root / "MNLI" / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    for task, header, labs in (("QNLI", ["index", "question", "sentence", "label"], ["not_entailment", "entailment"]),
                               ("RTE", ["index", "sentence1", "sentence2", "label"], ["not_entailment", "entailment"]),
                               ("QQP", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], ["0", "1"])):
        (root / task).mkdir(parents=True, exist_ok=True)
        for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
            rows = ["\t".join(header)]
            for i in range(n):
                a, b, same = _pair(rng)
                vals = [str(i)] + ([str(2 * i), str(2 * i + 1)] if task == "QQP" else []) + [a, b, labs[same]]
                rows.append("\t".join(vals))
            (root / task / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
    (root / "AX").mkdir(parents=True, exist_ok=True)
    rows = ["Lexical Semantics\tPredicate-Argument Structure\tLogic\tKnowledge\tDomain\tPremise\tHypothesis\tLabel"]
    for i in range(n_dev):
        a, b, same = _pair(rng)
        rows.append(f"\t\t\t\ttoy\t{a}\t{b}\t{nli[1] if same else nli[0]}")
    (root / "AX" / "diagnostic-full.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def write_toy_squad(root: str | os.PathLike, n_train: int = 48, n_dev: int = 24, seed: int = 0) -> Path:
    """train/dev-v1.1.json and train/dev-v2.0.json: "who <verb> X?" over short generated paragraphs."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    names = ["alice", "bob", "carol", "dave"]
    things = ["paris", "london", "rome"]
    verbs = ["wrote", "built", "founded"]

    def make(n: int, v2: bool, prefix: str) -> dict:
        data = []
        for i in range(n):
            who, what, verb = rng.choice(names), rng.choice(things), rng.choice(verbs)
            filler = " ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 15)))
            ctx = f"{filler}. {who.title()} {verb} the {what} play. {filler}."
            start = ctx.index(who.title())
            qas = [{"id": f"{prefix}{i:05d}a", "question": f"Who {verb} the {what} play?",
                    "answers": [{"text": who.title(), "answer_start": start}], "is_impossible": False}]
            if v2 and i % 2 == 0:
                other = rng.choice([t for t in things if t != what])
                qas.append({"id": f"{prefix}{i:05d}n", "question": f"Who {verb} the {other} river?",
                            "answers": [], "is_impossible": True})
            data.append({"title": f"toy-{i}", "paragraphs": [{"context": ctx, "qas": qas}]})
        return {"version": "v2.0" if v2 else "1.1", "data": data}

    for v2, tag in ((False, "v1.1"), (True, "v2.0")):
        for split, n in (("train", n_train), ("dev", n_dev)):
            (root / f"{split}-{tag}.json").write_text(json.dumps(make(n, v2, f"{split}{tag}")), encoding="utf-8")
    return root
