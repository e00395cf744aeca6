"""A corpus of the fine-tuning tasks' example words: text that a vocabulary or a tokenizer is
trained on so that it covers every example ``TaskSpec.write_examples`` generates (and the study's
toy tasks, ``lab/toydata.py``, which use the same words).

* ``task_corpus_documents``: documents (lines = sentences) of "NAME VERB the THING play ." (the
  SQuAD examples' facts, ``tasks/squad.py``) and sentences of filler words with one sentiment
  keyword (``tasks/base.py``'s ``FILLER``, ``POSITIVE``, ``NEGATIVE``);
* ``write_task_corpus``: the same as a BERT-format text file (the study's generated corpus with
  ``toy_data = true``; the tests' corpora and BPE tokenizers).

Deterministic for a seed (Python's ``random``).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from tokendrop.finetuning.tasks.base import FILLER, NEGATIVE, POSITIVE
from tokendrop.finetuning.tasks.squad import NAMES, THINGS, VERBS
from tokendrop.runs.files import atomic_write_text


def task_corpus_documents(num_docs: int = 300, seed: int = 0) -> list[str]:
    """``num_docs`` documents of 3 to 9 sentences each: 45% "NAME VERB the THING play .", the rest
    4 to 10 filler words with one positive (30%) or negative (25%) keyword inserted."""
    rng = random.Random(seed)

    def sentence() -> str:
        k = rng.random()
        if k < 0.45:
            return f"{rng.choice(NAMES)} {rng.choice(VERBS)} the {rng.choice(THINGS)} play ."
        words = [rng.choice(FILLER) for _ in range(rng.randint(4, 10))]
        words.insert(rng.randint(0, len(words)), rng.choice(POSITIVE if k < 0.75 else NEGATIVE))
        return " ".join(words) + rng.choice([" .", " !", ""])

    return ["\n".join(sentence() for _ in range(rng.randint(3, 9))) for _ in range(num_docs)]


def write_task_corpus(path: str | os.PathLike, num_docs: int = 300, seed: int = 0) -> Path:
    """``task_corpus_documents`` as a BERT-format text file (the documents separated by one blank
    line); returns its path."""
    return atomic_write_text(path, "\n\n".join(task_corpus_documents(num_docs, seed)) + "\n")
