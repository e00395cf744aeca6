"""The benchmark and the campaign: rounds and learning rates refused, the campaign's output
directory, its lock, its signals and a killed part."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from faultlib.case import GATE_ENV, Case, Outcome, at_gate
from faultlib.commands import CAMPAIGN, ENV, PY
from faultlib.setups import MINE, chain_checks, make_dir, says_in_output


def campaign_killed(rel: str = "out", drop_lock: bool = False) -> Callable[[Path], None]:
    """A campaign SIGKILLed during its part: OUT/env.json says complete: false, the in-progress
    record and the lock file stay (killed while it waits at its gate ``campaign-part``, after the
    part's first save: provably mid-part).  ``drop_lock``: remove the dead writer's lock file (for a
    case that does not write OUT again)."""

    def setup(c: Path) -> None:
        argv = [PY, "-m", "tokendrop", *CAMPAIGN, "--out", str(c / rel)]
        g = c.parent / f"{c.name}.setup-gate"
        p = subprocess.Popen(
            argv,
            cwd=c,
            env=dict(ENV, **{GATE_ENV: f"campaign-part={g}"}),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        t0 = time.time()
        while time.time() - t0 < 600 and p.poll() is None and not g.exists():
            time.sleep(0.02)
        if not g.exists():
            p.kill()
            raise RuntimeError(
                f"the campaign ended before it reached its gate: {p.communicate()[1][-300:]}"
            )
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        p.stderr.close()
        g.unlink()
        if drop_lock:
            (c / f".{rel}.tokendrop.lock").unlink()

    return setup


def part_record(
    rel: str, complete: bool, error: str | None = None
) -> Callable[[Path, Outcome], str | None]:
    def check(c: Path, o: Outcome) -> str | None:
        d = json.loads((c / rel).read_text())
        if d.get("complete") is not complete:
            return f"{rel} says complete: {d.get('complete')}, expected {complete}"
        if error is not None and error not in (d.get("error") or ""):
            return f"{rel} does not record the error {error!r}: {d.get('error')!r}"
        if (c / Path(rel).parent / ".campaign-in-progress.json").exists():
            return "the in-progress record was left behind"
        return None

    return check


def rows() -> list[Case]:
    """``bench`` and ``bench --campaign``: settings refused, the output dir, the lock, signals."""
    C: list[Case] = []
    add = C.append
    # rounds that run whatever the time budget: 1 ... rounds, refused before anything is timed
    for name, argv, key in (
        (
            "bench-min-rounds-over-rounds",
            ["bench", "--preset", "smoke", "--json", "{C}/bench.json"],
            "bench.min_rounds",
        ),
        (
            "bench-longctx-min-rounds-over-rounds",
            ["bench", "--preset", "longctx-cpu", "--json", "{C}/bench.json"],
            "longctx.min_rounds",
        ),
    ):
        add(
            Case(
                name,
                "bad input, full disk",
                [*argv, "--set", "rounds=2", "--set", "min_rounds=3"],
                f"refused at config time naming {key}; nothing written",
                absent=("bench.json",),
                says=(f"{key}: expected 1 ... rounds (2)", "got 3"),
            )
        )
    # part scratch's learning rates: each > 0 and distinct, refused before anything is written
    for name, lrs, got in (
        ("bench-campaign-scratch-lr-0", "[1e-3, 0]", "[0.001, 0.0]"),
        ("bench-campaign-scratch-lrs-repeated", "[1e-3, 1e-3]", "[0.001, 0.001]"),
    ):
        add(
            Case(
                name,
                "bad input, full disk",
                [*CAMPAIGN, "--set", f"scratch.lrs={lrs}", "--out", "{C}/out"],
                "refused at config time naming scratch.lrs; no output dir",
                absent=("out",),
                says=("scratch.lrs: expected distinct learning rates > 0", f"got {got}"),
            )
        )
    add(
        Case(
            "bench-campaign-into-foreign-dir",
            "outputs",
            [*CAMPAIGN, "--out", "{C}/mine"],
            "refused; untouched",
            setup=make_dir("mine", MINE),
            watch=("mine",),
            says=("{C}/mine", "no campaign output"),
        )
    )
    add(
        Case(
            "bench-campaign-into-a-run",
            "outputs",
            [*CAMPAIGN, "--out", "{C}/run"],
            "refused; the run untouched",
            needs=("run",),
            watch=("run",),
            says=("{C}/run", "run output"),
        )
    )
    add(
        Case(
            "bench-campaign-locked-out",
            "locks",
            [*CAMPAIGN, "--out", "{C}/out"],
            "refused: in use; nothing written",
            hold=("out",),
            absent=("out",),
            says=("in use by pid",),
        )
    )
    add(
        Case(
            "bench-campaign-sigint",
            "signals",
            [*CAMPAIGN[:-2], "--out", "{C}/out", "--set", "pytest=true"],
            "exit 130; env.json keeps what the part finished, marked complete: false",
            rc=130,
            gate="campaign-part",
            drive=at_gate(signal.SIGINT),
            check=chain_checks(
                part_record("out/env.json", False, "interrupted (SIGINT)"),
                says_in_output("env's partial result (complete: false) were kept"),
            ),
            one_line=False,
        )
    )
    add(
        Case(
            "bench-campaign-after-sigkill",
            "signals",
            [*CAMPAIGN, "--out", "{C}/out"],
            "a campaign killed during a part: the next one warns, takes the lock over, "
            "redoes the part",
            rc=0,
            setup=campaign_killed(),
            check=chain_checks(
                says_in_output("was killed before it finished"), part_record("out/env.json", True)
            ),
            one_line=False,
        )
    )
    add(
        Case(
            "verify-campaign-killed-part",
            "corrupt files",
            ["verify", "{C}/out"],
            "non-zero, names env.json",
            rc=(1, 2),
            setup=campaign_killed(drop_lock=True),
            watch=("out",),
            says=("{C}/out/env.json", "did not finish"),
        )
    )
    return C
