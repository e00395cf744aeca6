"""The demos' PyPI downloads (lab/fetch.py): a failed download is a FetchError (a TokendropError and
a RuntimeError) that the CLI prints as one line, exit status 2."""

import subprocess

from tokendrop.cli import main


def test_fetch_error_keeps_its_builtin_base():
    from tokendrop.lab.fetch import FetchError

    assert issubclass(FetchError, RuntimeError)


def test_fetch_error_from_the_demo_is_one_line_exit_2(tmp_path, monkeypatch, capsys):
    import tokendrop.lab.fetch as fetch

    def failing_pip(cmd, **kw):  # what pip prints without network, two lines
        return subprocess.CompletedProcess(
            cmd,
            1,
            "",
            f"ERROR: Could not find a version that satisfies the "
            f"requirement {cmd[-3]}\nERROR: No matching distribution found\n",
        )

    monkeypatch.setattr(fetch.subprocess, "run", failing_pip)
    rc = main(["demo", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert (
        lines[0].startswith("error: pip download ")
        and "failed" in lines[0]
        and "No matching distribution" in lines[0]
    )
    assert "Traceback" not in err
