"""docs/reliability.md, category "bad input, full disk": a failed read or write names its real cause
-- read-only, permissions, disk full and quota are told apart (``runs.files.os_error_fix``, the one
mapping), through the CLI and on a real read-only mount where the machine allows one."""

import errno
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tokendrop.cli import main as cli
from tokendrop.runs.files import DISK_ERRNOS, os_error_fix

CAUSES = {
    errno.EROFS: "read-only",
    errno.EACCES: "permission",
    errno.ENOSPC: "disk is full",
    errno.EDQUOT: "quota",
    errno.EFBIG: "larger than the file system allows",
}


@pytest.mark.parametrize("code", sorted(CAUSES))
def test_each_errno_names_its_own_cause(code):
    fix = os_error_fix(OSError(code, "x"))
    assert CAUSES[code] in fix
    others = [c for k, c in CAUSES.items() if k != code]
    assert not any(o in fix for o in others), fix
    assert ("free space" in fix) == (code in (errno.ENOSPC, errno.EDQUOT)), fix


@pytest.mark.parametrize("code", sorted(DISK_ERRNOS))
def test_the_cli_says_the_cause_of_a_failed_write(code, tiny_run, tmp_path, capsys, monkeypatch):
    from tokendrop.models import source

    def failing(*a, **k):
        raise OSError(code, "failed", str(tmp_path / "hf" / "model.safetensors"))

    monkeypatch.setattr(source, "export_hf", failing)
    rc = cli(["export", str(tiny_run), str(tmp_path / "hf")])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert CAUSES[code] in lines[0], lines[0]
    assert ("free space" in lines[0]) == (code in (errno.ENOSPC, errno.EDQUOT)), lines[0]


def _read_only_mount_works(d: Path) -> bool:
    if shutil.which("unshare") is None:
        return False
    r = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {d} {d} && mount -o remount,bind,ro {d}"],
        capture_output=True,
    )
    return r.returncode == 0


def test_read_only_file_system_is_named_read_only(tiny_run, tmp_path):
    """resume, export and prepare into a read-only mount (a private mount namespace): one line each
    that says read-only, never "free space"."""
    if not _read_only_mount_works(tmp_path):
        pytest.skip("no private read-only bind mount on this machine (needs unshare -m and mount)")
    run = tmp_path / "run"
    shutil.copytree(tiny_run, run)
    (tmp_path / "corpus.txt").write_text("a b c\n\nd e f\n")
    py = sys.executable
    cmds = [
        f"{py} -m tokendrop pretrain --resume {run} --quiet --set train.steps=6",
        f"{py} -m tokendrop export {run} {tmp_path}/hf",
        f"{py} -m tokendrop prepare --corpus {tmp_path}/corpus.txt --out {tmp_path}/data --seq-len "
        "64 --workers 1 --quiet --vocab-size 150",
    ]
    script = (
        f"mount --bind {tmp_path} {tmp_path} && mount -o remount,bind,ro {tmp_path} || exit 99\n"
    )
    script += "".join(
        f"{c} 2>>{tmp_path.parent}/ro-err.txt; echo $? >>{tmp_path.parent}/ro-rc.txt\n"
        for c in cmds
    )
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    subprocess.run(["unshare", "-m", "sh", "-c", script], check=True, timeout=300)
    rcs = (tmp_path.parent / "ro-rc.txt").read_text().split()
    lines = (tmp_path.parent / "ro-err.txt").read_text().strip().splitlines()
    assert rcs == ["2", "2", "2"] and len(lines) == 3, (rcs, lines)
    for line in lines:
        assert line.startswith("error: ") and "read-only" in line and "free space" not in line, line
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
