"""``tokendrop bench --json``: an unwritable results path (or its Markdown table's) is refused in
one line before the benchmark runs."""

import os

import pytest
from cli_run import one_line_error as _one_line_error, run_cli as _run


def test_bench_json_unwritable_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    import tokendrop.lab.bench as bench

    monkeypatch.setattr(
        bench, "run_bench", lambda *a, **k: pytest.fail("the benchmark ran before the check")
    )
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = _run(capsys, "bench", "--json", blocker / "sub" / "r.json")
    _one_line_error(rc, err, "bench --json", "is not a directory")
    (tmp_path / "r.md").mkdir()  # where the Markdown table beside r.json would go
    rc, _, err = _run(capsys, "bench", "--json", tmp_path / "r.json")
    _one_line_error(rc, err, "r.md is a directory")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        try:
            rc, _, err = _run(capsys, "bench", "--json", ro / "r.json")
            _one_line_error(rc, err, "not writable")
        finally:
            ro.chmod(0o700)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "r.md"] + (
        ["ro"] if os.geteuid() else []
    )
