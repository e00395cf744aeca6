"""Running one case: its directory, its command, and the verdict."""

from __future__ import annotations

import os
import resource
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from faultlib.case import DRIVE_NOTES, Case, Outcome, gate_file, gated_env, text_lines
from faultlib.commands import ENV, PY, expand, shorten
from faultlib.files import leftovers, snapshot
from tokendrop.runs.rundir import HOLD_COMMAND

HOLD = HOLD_COMMAND  # another process holding write locks (tokendrop.runs.rundir.hold)


def run_case(case: Case, idx: int, work: Path, base: Path) -> dict[str, Any]:
    c = work / f"{idx:03d}-{case.name}"
    c.mkdir(parents=True)
    rec: dict[str, Any] = {
        "case": case.name,
        "row": case.row,
        "expect": case.expect,
        "command": "tokendrop "
        + shlex.join(a.replace("{C}", "CASE").replace("{B}", "BASE") for a in case.argv),
        "expected_rc": list(case.rc) if isinstance(case.rc, tuple) else case.rc,
    }
    try:
        for item in case.needs:
            src = base / item
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, c / item)
        if case.setup is not None:
            case.setup(c)
    # a setup that cannot be built is a failure of the case, reported as such
    except Exception as e:
        rec.update(
            rc=None,
            stderr_first="",
            traceback=False,
            disk="",
            passed=False,
            why="setup failed: "
            f"{shorten(str(e), c, base).splitlines()[-1][:200] if str(e) else type(e).__name__}",
            seconds=0.0,
        )
        return rec
    watched = {w: snapshot(c / w) for w in case.watch}
    argv = [expand(a, c, base) for a in case.argv]
    holder = None
    if case.hold:
        holder = subprocess.Popen(
            [PY, "-c", HOLD, *[str(c / h) for h in case.hold]],
            stdout=subprocess.PIPE,
            text=True,
            env=ENV,
        )
        assert holder.stdout.readline().strip() == "held"

    def limits() -> None:
        os.umask(0o022)
        # a matrix started in the background inherits SIGINT ignored (and Python then keeps it so):
        # every case starts with the default disposition, as from a terminal
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if case.fsize:
            resource.setrlimit(resource.RLIMIT_FSIZE, (case.fsize, case.fsize))

    cwd = c / case.cwd if case.cwd else c
    cmd = [PY, "-m", "tokendrop", *argv]
    if case.read_only:  # a private mount namespace in which the case dir is mounted read-only
        cmd = [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" || exit 99; exec "$@"',
            str(c),
            *cmd,
        ]
    t0 = time.time()
    p = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=gated_env(case, c),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=limits,
        start_new_session=True,
    )
    try:
        if case.drive is not None:
            import threading

            th = threading.Thread(target=case.drive, args=(p, c), daemon=True)
            th.start()
        try:
            out, err = p.communicate(timeout=case.timeout)
            rc: int | str = p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            rc = "timeout"
        if case.drive is not None:
            th.join(timeout=30)
    finally:
        gate_file(c).unlink(missing_ok=True)
        if holder is not None:
            holder.terminate()
            holder.wait(timeout=30)
    secs = time.time() - t0
    o = Outcome(rc, out, err, secs)
    lines = text_lines(err)
    tb = "Traceback (most recent call last)" in err
    exp = case.rc if isinstance(case.rc, tuple) else (case.rc,)
    why: list[str] = [DRIVE_NOTES.pop(c)] if c in DRIVE_NOTES else []
    if case.read_only and rc == 99:
        why.append(
            "no read-only mount on this machine (needs `unshare -m` and `mount`: root or "
            "user namespaces)"
        )
    if rc not in exp:
        why.append(f"exit {rc}, expected {' or '.join(map(str, exp))}")
    if tb:
        why.append("traceback")
    one_line = case.one_line if case.one_line is not None else 0 not in exp
    # a refusal is one line; the notes before it (a resume's accepted setting changes) inform
    refusal = [ln for ln in lines if not ln.startswith("note: ")]
    if one_line and rc != 0:
        if rc in (130, 143):  # progress lines may come first; the last one says it was interrupted
            if lines and not lines[-1].startswith("interrupted"):
                why.append("the last line of stderr is not 'interrupted ...'")
        elif len(refusal) != 1:
            why.append(f"{len(refusal)} lines on stderr besides notes, expected one")
        elif rc == 2 and not refusal[0].startswith("error: "):
            why.append("the message does not start with 'error: '")
        else:
            miss = [s for s in case.says if expand(s, c, base).lower() not in refusal[0].lower()]
            if miss:
                why.append(
                    "the message does not name "
                    + ", ".join(shorten(expand(m, c, base), c, base) for m in miss)
                )
    disk: list[str] = []
    for w, before in watched.items():
        after = snapshot(c / w)
        if after != before:
            changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            disk.append(f"{w} changed ({', '.join(changed[:2])})")
    for a in case.absent:
        if (c / a).exists():
            disk.append(f"{a} exists")
    left = leftovers(c)
    if left:
        disk.append("left " + ", ".join(left[:2]))
    if case.check is not None and not why:
        try:
            msg = case.check(c, o)
        except Exception as e:  # the state the check reads is not there: that is the finding
            msg = f"check could not read the result: {type(e).__name__}: {e}"
        if msg:
            disk.append(shorten(msg, c, base))
    why += disk
    shown = refusal if rc != 0 and refusal else lines  # a refusal's own line, else the first
    first = shorten(shown[0], c, base) if shown else ""
    rec.update(
        rc=rc,
        stderr_first=first[:300],
        stderr_lines=len(lines),
        traceback=tb,
        disk="intact" if not disk else "; ".join(disk),
        passed=not why,
        why="; ".join(why),
        seconds=round(secs, 1),
    )
    if tb:
        tail = [ln for ln in lines if ln and not ln.startswith(" ")]
        rec["exception"] = shorten(tail[-1], c, base)[:300] if tail else ""
    return rec
