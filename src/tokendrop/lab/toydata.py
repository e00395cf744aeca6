"""Generated data for tests, smoke runs, the study's ``toy_data`` preset and ``configs/suite-tiny.toml``:
the one source of toy data in the project (no external files, deterministic for a seed).

Vocabularies (the special tokens ``tokendrop.data.tokenizer.SPECIAL_TOKENS`` at ids 0-4):

* ``write_toy_vocab`` / ``toy_vocab_tokens``: ten ``[unusedN]``, punctuation, the letters with their
  ``##`` continuations and ``num_words`` syllable pseudo-words (``toy_words``), each one token;
* ``write_vocab`` / ``task_vocab_tokens``: letters, digits (both with ``##`` continuations),
  punctuation and the words of the toy fine-tuning tasks (``task_words``): it spells any lower-case text.

Corpora (BERT-format text: one sentence a line, documents separated by a blank line):

* ``write_toy_corpus`` / ``toy_documents``: sentences of the syllable pseudo-words, lengths varying;
* ``write_corpus`` / ``structured_documents``: "NAME VERB the ADJ NOUN near the NOUN ." (adjective and
  noun paired), counting runs, ...: enough structure that an MLM learns it in seconds (the golden
  curves are made from it);
* ``write_task_corpus`` / ``task_corpus_documents``: the words of the toy fine-tuning tasks, so a
  vocabulary trained on it covers them (the study's ``toy_data``).

``write_bpe_tokenizer_dir`` writes a ModernBERT-style tokenizer directory (byte-level BPE trained
on the task corpus, the five specials as added tokens after the BPE vocabulary, a ``[CLS] $A [SEP]``
post-processor, tokenizer_config.json with ``PreTrainedTokenizerFast`` and ``added_tokens_decoder``,
special_tokens_map.json), the layout of answerdotai/ModernBERT-base.

``toy_prepared`` prepares a toy corpus with the toy vocabulary.  Models and tasks:
``write_checkpoint`` (a randomly initialised tokendrop checkpoint dir, the layout
``tokendrop.models.source.load_pretrained`` reads), ``write_keyword_sentiment`` (SST-2 layout; the label is one
sentiment keyword among filler words -- learnable in seconds by a tiny encoder), ``write_toy_glue`` /
``write_toy_squad`` (every GLUE task and SQuAD v1.1/v2.0 in its layout as distributed, for tests of
the readers and the evaluation protocol, not for meaningful scores).

    vocab = write_toy_vocab(tmp_path / "vocab.txt")
    corpus = write_toy_corpus(tmp_path / "corpus.txt", num_docs=40)
    pd_path = toy_prepared(tmp_path / "prep", seq_len=32)      # -> PreparedData.open(pd_path)
"""

from __future__ import annotations

import io
import json
import os
import random
import string
import tarfile
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

from tokendrop.config import ModelConfig
from tokendrop.data.prepare import prepare
from tokendrop.data.tokenizer import SPECIAL_TOKENS
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.runs.checkpoint import sha256_file
from tokendrop.runs.files import atomic_write_bytes, atomic_write_text

LETTERS = list(string.ascii_lowercase) + ["##" + c for c in string.ascii_lowercase]


def write_documents(path: str | os.PathLike, documents: list[str]) -> Path:
    """A BERT-format text file: the documents (lines = sentences) separated by one blank line."""
    return atomic_write_text(path, "\n\n".join(documents) + "\n")


def _write_vocab_file(path: str | os.PathLike, tokens: list[str]) -> Path:
    return atomic_write_text(path, "\n".join(tokens) + "\n")


# ----------------------------------------------------------------------------------------------
# syllable pseudo-words: vocabulary and corpus

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def toy_words(num_words: int = 300, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words: list[str] = []
    seen = set(string.ascii_lowercase)
    while len(words) < num_words:
        w = "".join(rng.choice(_SYLLABLES, size=int(rng.integers(2, 4))))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def toy_vocab_tokens(num_words: int = 300, seed: int = 0) -> list[str]:
    tokens = list(SPECIAL_TOKENS) + [f"[unused{i}]" for i in range(10)]
    tokens += list(".,;:!?'\"()-")
    tokens += LETTERS
    tokens += toy_words(num_words, seed)
    return tokens


def write_toy_vocab(path: str | os.PathLike, num_words: int = 300, seed: int = 0) -> str:
    return os.fspath(_write_vocab_file(path, toy_vocab_tokens(num_words, seed)))


def toy_documents(num_docs: int = 40, seed: int = 1, min_words: int = 1, max_words: int = 120,
                  num_words: int = 300) -> list[str]:
    """Documents (lines = sentences) of toy words; lengths vary from ``min_words`` to ``max_words``."""
    rng = np.random.default_rng(seed)
    words = toy_words(num_words)
    docs = []
    for _ in range(num_docs):
        n = int(rng.integers(min_words, max_words + 1))
        toks = list(rng.choice(words, size=n))
        lines, i = [], 0
        while i < n:
            k = int(rng.integers(3, 15))
            sent = " ".join(toks[i : i + k])
            lines.append(sent[0].upper() + sent[1:] + ".")
            i += k
        docs.append("\n".join(lines))
    return docs


def write_toy_corpus(path: str | os.PathLike, num_docs: int = 40, seed: int = 1, **kw) -> str:
    """``toy_documents`` as a BERT-format text file."""
    return os.fspath(write_documents(path, toy_documents(num_docs, seed, **kw)))


def toy_prepared(out_dir: str | os.PathLike, seq_len: int = 32, num_docs: int = 60, packed: bool = True,
                 eval_fraction: float = 0.1, seed: int = 1, **prepare_kw) -> str:
    """Write a toy vocab + corpus beside ``out_dir`` and prepare it; returns ``out_dir``."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    base = out_dir + ".src"
    os.makedirs(base, exist_ok=True)
    vocab = write_toy_vocab(os.path.join(base, "vocab.txt"))
    corpus = write_toy_corpus(os.path.join(base, "corpus.txt"), num_docs=num_docs, seed=seed)
    prepare_kw.setdefault("workers", 1)
    prepare_kw.setdefault("progress", False)
    prepare([corpus], out_dir, seq_len, vocab=vocab, packed=packed, eval_fraction=eval_fraction, **prepare_kw)
    return out_dir


# ----------------------------------------------------------------------------------------------
# the structured corpus (an MLM learns it in seconds)

NAMES = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
VERBS = ["sees", "likes", "finds", "paints", "buys", "sells", "moves", "keeps"]
ADJS = ["red", "blue", "green", "small", "large", "old", "new", "bright"]
NOUNS = ["house", "river", "garden", "window", "table", "boat", "lamp", "book"]
NUMBERS = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]


def structured_sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.6:
        a = rng.randrange(len(ADJS))
        return f"{rng.choice(NAMES)} {rng.choice(VERBS)} the {ADJS[a]} {NOUNS[a]} near the {rng.choice(NOUNS)} ."
    if kind < 0.85:
        i = rng.randrange(len(NUMBERS) - 3)
        return "counting " + " ".join(NUMBERS[i : i + 4]) + " and then stop ."
    return f"the {rng.choice(NOUNS)} is {rng.choice(ADJS)} today ."


def structured_documents(docs: int = 120, seed: int = 0, sentences: tuple[int, int] = (3, 9)) -> list[str]:
    """``docs`` documents of ``sentences[0]..sentences[1]`` structured sentences (Python's ``random``)."""
    rng = random.Random(seed)
    return ["\n".join(structured_sentence(rng) for _ in range(rng.randint(*sentences))) for _ in range(docs)]


def write_corpus(path: str | os.PathLike, docs: int = 120, seed: int = 0, sentences: tuple[int, int] = (3, 9)) -> Path:
    """``structured_documents`` as a BERT-format text file."""
    return write_documents(path, structured_documents(docs, seed, sentences))


# ----------------------------------------------------------------------------------------------
# the toy fine-tuning tasks' words: vocabulary and corpus

FILLER = ("the movie film story plot actor scene music script cast it was is this a an of and with "
          "to in very quite really rather truly simply just so").split()
POSITIVE = "good great excellent wonderful fun brilliant".split()
NEGATIVE = "bad awful boring dull terrible poor".split()
TASK_NAMES = "alice bob carol dave".split()  # the toy SQuAD facts: "NAME VERB the THING play."
TASK_VERBS = "wrote built founded".split()
TASK_THINGS = "paris london rome".split()
EXTRA = ("who what where when which name city river person year play wrote built founded "
         "paris london rome alice bob carol dave same different yes no maybe").split()


def task_words() -> list[str]:
    return sorted(set(FILLER + POSITIVE + NEGATIVE + EXTRA))


def task_vocab_tokens() -> list[str]:
    """A WordPiece vocab that can spell anything lower-case (letters, ``##`` letters, digits, punctuation)."""
    toks = list(SPECIAL_TOKENS) + LETTERS
    toks += list(string.digits) + ["##" + c for c in string.digits] + list(".,!?'\"-:;()")
    toks += [w for w in task_words() if w not in toks]
    return toks


def write_vocab(path: str | os.PathLike) -> Path:
    """``task_vocab_tokens`` as ``path`` (a ``.txt`` file) or ``path/vocab.txt`` (a directory)."""
    p = Path(path)
    if p.suffix != ".txt":
        p = p / "vocab.txt"
    return _write_vocab_file(p, task_vocab_tokens())


MODERNBERT_SPECIALS = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")  # in ModernBERT's order, after the BPE vocab


def write_bpe_tokenizer_dir(out_dir: str | os.PathLike, vocab_size: int = 400, num_docs: int = 200, seed: int = 0,
                            post_processor: bool = True, specials: tuple[str, ...] = MODERNBERT_SPECIALS) -> Path:
    """A tokenizer directory laid out like answerdotai/ModernBERT-base's, built offline: a byte-level
    BPE (GPT-NeoX style: NFC, ByteLevel pre-tokenizer and decoder, no unknown token) trained on
    ``task_corpus_documents`` plus a few unicode/whitespace lines, then added tokens as ModernBERT
    has them: a non-special whitespace run and ``|||IP_ADDRESS|||``, special ``<|endoftext|>``, then
    ``[UNK] [CLS] [SEP] [PAD] [MASK]`` (``[MASK]`` with ``lstrip``); the post-processor is
    ``[CLS] $A [SEP]`` / ``[CLS] $A [SEP] $B [SEP]`` (left out with ``post_processor=False``);
    ``tokenizer_config.json`` declares ``PreTrainedTokenizerFast`` with ``added_tokens_decoder`` and
    ``special_tokens_map.json`` the five names.  ``specials``: other names for the unk, cls, sep,
    pad and mask tokens (e.g. ``<unk> <cls> <sep> <pad> <mask>``), in that order.  Deterministic for
    a seed.  -> the directory."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    docs = task_corpus_documents(num_docs=num_docs, seed=seed) + [
        "Café naïve Zürich — 東京 😀 déjà vu", "tabs\tand  double  spaces", "UPPER lower MiXeD 123 4.5"]
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    tok.add_tokens([AddedToken("    ", normalized=True), AddedToken("|||IP_ADDRESS|||", normalized=True)])
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    unk_t, cls_t, sep_t, pad_t, mask_t = specials
    tok.add_special_tokens([AddedToken(t, special=True, lstrip=t == mask_t) for t in specials])
    if post_processor:
        cls, sep = tok.token_to_id(cls_t), tok.token_to_id(sep_t)
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls_t}:0 $A:0 {sep_t}:0", pair=f"{cls_t}:0 $A:0 {sep_t}:0 $B:1 {sep_t}:1",
            special_tokens=[(cls_t, cls), (sep_t, sep)])
    tok.save(str(out / "tokenizer.json"))
    added = {str(i): {"content": t.content, "lstrip": t.lstrip, "normalized": t.normalized, "rstrip": t.rstrip,
                      "single_word": t.single_word, "special": t.special}
             for i, t in sorted(tok.get_added_tokens_decoder().items())}
    names = {"unk_token": unk_t, "cls_token": cls_t, "sep_token": sep_t, "pad_token": pad_t, "mask_token": mask_t}
    atomic_write_text(out / "tokenizer_config.json", json.dumps({
        "added_tokens_decoder": added, "clean_up_tokenization_spaces": True, **names,
        "model_input_names": ["input_ids", "attention_mask"], "model_max_length": 8192,
        "tokenizer_class": "PreTrainedTokenizerFast"}, indent=2))
    atomic_write_text(out / "special_tokens_map.json", json.dumps(
        {k: {"content": v, "lstrip": v == mask_t, "normalized": False, "rstrip": False, "single_word": False}
         for k, v in names.items()}, indent=2))
    return out


def task_corpus_documents(filler: list[str] = FILLER, positive: list[str] = POSITIVE, negative: list[str] = NEGATIVE,
                          num_docs: int = 300, seed: int = 0) -> list[str]:
    """Documents (lines = sentences) made of the words of the toy fine-tuning tasks, so that a
    vocabulary trained on them covers the tasks: "NAME VERB the THING play ." (the toy SQuAD
    layout's facts) and sentences of ``filler`` words with one ``positive`` or ``negative`` keyword
    (the toy sentiment tasks).  Deterministic for a seed (Python's ``random``)."""
    rng = random.Random(seed)

    def sentence() -> str:
        k = rng.random()
        if k < 0.45:
            return f"{rng.choice(TASK_NAMES)} {rng.choice(TASK_VERBS)} the {rng.choice(TASK_THINGS)} play ."
        words = [rng.choice(filler) for _ in range(rng.randint(4, 10))]
        words.insert(rng.randint(0, len(words)), rng.choice(positive if k < 0.75 else negative))
        return " ".join(words) + rng.choice([" .", " !", ""])

    return ["\n".join(sentence() for _ in range(rng.randint(3, 9))) for _ in range(num_docs)]


def write_task_corpus(path: str | os.PathLike, num_docs: int = 300, seed: int = 0) -> Path:
    """``task_corpus_documents`` as a BERT-format text file (the study's generated corpus)."""
    return write_documents(path, task_corpus_documents(num_docs=num_docs, seed=seed))


# ----------------------------------------------------------------------------------------------
# a model and the toy fine-tuning tasks


def write_checkpoint(out_dir: str | os.PathLike, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 2,
                     intermediate_size: int = 128, max_position_embeddings: int = 512, seed: int = 0,
                     vocab: str | os.PathLike | None = None) -> Path:
    """A randomly initialised ``BertForMaskedLM`` saved as a tokendrop checkpoint dir (``meta.json``,
    ``model.safetensors`` in our parameter names, ``tokenizer/vocab.txt``: ``vocab`` or ``write_vocab``'s)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if vocab is None:
        write_vocab(out / "tokenizer")
    else:
        atomic_write_bytes(out / "tokenizer" / "vocab.txt", Path(vocab).read_bytes())
    n_vocab = sum(1 for _ in open(out / "tokenizer" / "vocab.txt", encoding="utf-8"))
    cfg = ModelConfig(vocab_size=n_vocab, hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
                      intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings)
    torch.manual_seed(seed)
    model = BertForMaskedLM(cfg)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"))
    save_file({}, str(out / "state.safetensors"))  # no training state; hashed so the checkpoint verifies
    files = {n: {"bytes": (out / n).stat().st_size, "sha256": sha256_file(out / n)} for n in ("model.safetensors", "state.safetensors")}
    atomic_write_text(out / "meta.json", json.dumps({"config": {"model": asdict(cfg)}, "step": 0, "toy": True, "files": files}, indent=2))
    return out


def keyword_sentence(rng: random.Random, label: int) -> str:
    words = [rng.choice(FILLER) for _ in range(rng.randint(4, 12))]
    words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if label else NEGATIVE))
    s = " ".join(words)
    return s[0].upper() + s[1:] + rng.choice([".", "!", ""])


def _write_tsv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    atomic_write_text(path, "\n".join("\t".join(r) for r in [header, *rows]) + "\n")


def write_keyword_sentiment(out_dir: str | os.PathLike, n_train: int = 400, n_dev: int = 100, seed: int = 0) -> Path:
    """SST-2 layout: ``train.tsv``/``dev.tsv`` with header ``sentence\\tlabel``."""
    out = Path(out_dir)
    rng = random.Random(seed)
    for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
        _write_tsv(out / name, ["sentence", "label"], [[keyword_sentence(rng, i % 2), str(i % 2)] for i in range(n)])
    return out


def _pair(rng: random.Random) -> tuple[str, str, int]:
    """A pair task learnable from surface cues: label 1 iff both sentences share the keyword polarity."""
    a, b = rng.randint(0, 1), rng.randint(0, 1)
    return keyword_sentence(rng, a), keyword_sentence(rng, b), int(a == b)


def write_toy_glue(root: str | os.PathLike, n_train: int = 64, n_dev: int = 32, seed: int = 0) -> Path:
    """Every GLUE task in its layout as distributed, under ``root``: CoLA (header-less train/dev),
    SST-2, MRPC, STS-B (10 columns, float scores), QQP, MNLI (12/16 columns, matched/mismatched),
    QNLI, RTE, WNLI, AX (``diagnostic-full.tsv``), and each task's unlabelled test file(s)."""
    root = Path(root)
    rng = random.Random(seed)
    write_keyword_sentiment(root / "SST-2", n_train, n_dev, seed)
    nli = ["contradiction", "entailment", "neutral"]
    mnli_train_h = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
                    "sentence2_parse sentence1 sentence2 label1 gold_label").split()
    mnli_dev_h = mnli_train_h[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]
    for name, n, header in (("train.tsv", n_train, mnli_train_h), ("dev_matched.tsv", n_dev, mnli_dev_h),
                            ("dev_mismatched.tsv", n_dev, mnli_dev_h)):
        rows = []
        for i in range(n):
            a, b, same = _pair(rng)
            lab = nli[1] if same else nli[0] if i % 3 else nli[2]
            vals = {"index": str(i), "promptID": str(i), "pairID": f"{i}e", "genre": "toy", "sentence1": a,
                    "sentence2": b, "sentence1_binary_parse": a, "sentence2_binary_parse": b,
                    "sentence1_parse": a, "sentence2_parse": b, "label1": lab, "gold_label": lab}
            rows.append([vals.get(h, "") for h in header])
        _write_tsv(root / "MNLI" / name, header, rows)
    for task, header, labs in (("QNLI", ["index", "question", "sentence", "label"], ["not_entailment", "entailment"]),
                               ("RTE", ["index", "sentence1", "sentence2", "label"], ["not_entailment", "entailment"]),
                               ("QQP", ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"], ["0", "1"])):
        for name, n in (("train.tsv", n_train), ("dev.tsv", n_dev)):
            rows = []
            for i in range(n):
                a, b, same = _pair(rng)
                rows.append([str(i)] + ([str(2 * i), str(2 * i + 1)] if task == "QQP" else []) + [a, b, labs[same]])
            _write_tsv(root / task / name, header, rows)
    ax_header = ["Lexical Semantics", "Predicate-Argument Structure", "Logic", "Knowledge", "Domain", "Premise",
                 "Hypothesis", "Label"]
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
    for name, n in splits:  # CoLA: no header; source, label, original mark ("*" = unacceptable), sentence
        rows = []
        for i in range(n):
            lab = rng.randint(0, 1)
            rows.append([f"toy{i % 7:02d}", str(lab), "" if lab else "*", keyword_sentence(rng, lab)])
        atomic_write_text(root / "CoLA" / name, "\n".join("\t".join(r) for r in rows) + "\n")
    mrpc_h = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    stsb_h = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2", "score"]
    for name, n in splits:
        rows = []
        for i in range(n):
            a, b, same = _pair(rng)
            rows.append([str(same), str(1000 + 2 * i), str(1001 + 2 * i), a, b])
        atomic_write_text(root / "MRPC" / name, "\ufeff" * (name == "train.tsv")  # the download's train file has a BOM
                    + "\n".join("\t".join(r) for r in [mrpc_h, *rows]) + "\n")
        rows = []
        for i in range(n):  # similarity 0-5: high when both sentences carry the same sentiment polarity, plus noise
            la, lb = rng.randint(0, 1), rng.randint(0, 1)
            score = min(5.0, max(0.0, (4.0 if la == lb else 1.0) + rng.choice([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0])))
            rows.append([str(i), "main-toy", "toy", "2012", f"{i:04d}", "none", "none", keyword_sentence(rng, la),
                         keyword_sentence(rng, lb), f"{score:.3f}"])
        _write_tsv(root / "STS-B" / name, stsb_h, rows)
        rows = []
        for i in range(n):
            a, b, same = _pair(rng)
            rows.append([str(i), a, b, str(same)])
        _write_tsv(root / "WNLI" / name, ["index", "sentence1", "sentence2", "label"], rows)
    # the unlabelled test files: the labelled layout without its label (STS-B: 9 of its 10 columns,
    # MNLI: 10), except CoLA (a header, index + sentence), MRPC (index for Quality), QQP (id + the questions)
    n = max(1, n_dev // 2)

    def pair_rows(k: int):
        return [_pair(rng)[:2] for _ in range(k)]

    tests = {
        "CoLA/test.tsv": (["index", "sentence"], [[str(i), keyword_sentence(rng, i % 2)] for i in range(n)]),
        "SST-2/test.tsv": (["index", "sentence"], [[str(i), keyword_sentence(rng, i % 2)] for i in range(n)]),
        "MRPC/test.tsv": (["index"] + mrpc_h[1:], [[str(i), str(i), str(i + 1), a, b] for i, (a, b) in enumerate(pair_rows(n))]),
        "STS-B/test.tsv": (stsb_h[:-1], [[str(i), "main-toy", "toy", "2012", f"{i:04d}", "none", "none", a, b]
                                         for i, (a, b) in enumerate(pair_rows(n))]),
        "QQP/test.tsv": (["id", "question1", "question2"], [[str(i), a, b] for i, (a, b) in enumerate(pair_rows(n))]),
        "QNLI/test.tsv": (["index", "question", "sentence"], [[str(i), a, b] for i, (a, b) in enumerate(pair_rows(n))]),
        "AX/AX.tsv": (["index", "sentence1", "sentence2"], [[str(i), a, b] for i, (a, b) in enumerate(pair_rows(n))]),
    }
    for t in ("RTE", "WNLI"):
        tests[f"{t}/test.tsv"] = (["index", "sentence1", "sentence2"], [[str(i), a, b] for i, (a, b) in enumerate(pair_rows(n))])
    mnli_test_h = ("index promptID pairID genre sentence1_binary_parse sentence2_binary_parse sentence1_parse "
                   "sentence2_parse sentence1 sentence2").split()
    for f in ("test_matched.tsv", "test_mismatched.tsv"):
        tests[f"MNLI/{f}"] = (mnli_test_h, [[str(i), str(i), f"{i}n", "toy", a, b, a, b, a, b]
                                            for i, (a, b) in enumerate(pair_rows(n))])
    for rel, (header, rows) in tests.items():
        _write_tsv(root / rel, header, rows)


def write_toy_squad(root: str | os.PathLike, n_train: int = 48, n_dev: int = 24, seed: int = 0) -> Path:
    """train/dev-v1.1.json and train/dev-v2.0.json: "who <verb> X?" over short generated paragraphs."""
    root = Path(root)
    rng = random.Random(seed)

    def make(n: int, v2: bool, prefix: str) -> dict:
        data = []
        for i in range(n):
            who, what, verb = rng.choice(TASK_NAMES), rng.choice(TASK_THINGS), rng.choice(TASK_VERBS)
            filler = " ".join(rng.choice(FILLER) for _ in range(rng.randint(5, 15)))
            ctx = f"{filler}. {who.title()} {verb} the {what} play. {filler}."
            start = ctx.index(who.title())
            qas = [{"id": f"{prefix}{i:05d}a", "question": f"Who {verb} the {what} play?",
                    "answers": [{"text": who.title(), "answer_start": start}], "is_impossible": False}]
            if v2 and i % 2 == 0:
                other = rng.choice([t for t in TASK_THINGS if t != what])
                qas.append({"id": f"{prefix}{i:05d}n", "question": f"Who {verb} the {other} river?",
                            "answers": [], "is_impossible": True})
            data.append({"title": f"toy-{i}", "paragraphs": [{"context": ctx, "qas": qas}]})
        return {"version": "v2.0" if v2 else "1.1", "data": data}

    for v2, tag in ((False, "v1.1"), (True, "v2.0")):
        for split, n in (("train", n_train), ("dev", n_dev)):
            atomic_write_text(root / f"{split}-{tag}.json", json.dumps(make(n, v2, f"{split}{tag}")))
    return root


def write_vader_sdist(path: str | os.PathLike, files: dict[str, str]) -> Path:
    """A stand-in for the ``vaderSentiment`` sdist (tokendrop.finetune.tasks.sst2_vader): a tar.gz holding
    ``additional_resources/hutto_ICWSM_2014.tar.gz`` with ``files`` (name -> text, written as UTF-8
    under ``hutto_ICWSM_2014/``)."""
    def add(t: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))

    inner = io.BytesIO()
    with tarfile.open(fileobj=inner, mode="w:gz") as t:
        for name, text in files.items():
            add(t, f"hutto_ICWSM_2014/{name}", text.encode("utf-8"))
    with tarfile.open(path, "w:gz") as t:
        add(t, "vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz", inner.getvalue())
    return Path(path)
