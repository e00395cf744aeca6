"""Sentences judging a study's results, each computed from the numbers (no hard-coded outcome):
time saved, quality against the baseline judged by the seed-to-seed spread, the equal-compute
control, the selection / stage-2 / variant / drop-rate ablations, the source checkpoint's row,
and where the result agrees or departs from the paper."""

from __future__ import annotations

import os

from tokendrop.lab.study.common import isnum, mean, pct
from tokendrop.lab.study.records import Stat, StudyResults
from tokendrop.lab.study.spec import ARMS, StudyConfig, sweep_method

PAPER_TIME_SAVING = 0.25  # the paper: ~25% less pretraining time at 50% dropping


def verdict(
    diff: float,
    base: float | None,
    other: float | None = None,
    higher_better: bool = True,
    unit: str = "",
    label: str = "the method",
    ref: str = "the baseline",
) -> str:
    """Words for a difference (method - baseline), judged against each side's own seed-to-seed
    spread (max - min over seeds): ``base`` the baseline's, ``other`` the method's (None: one seed);
    ``ref`` names the baseline (the study's reference arm).

    Within both spreads: not distinguishable; beyond both: better/worse; beyond one only: the two
    seeds of each cannot tell them apart, and the sentence says whose spread is which."""
    good = diff if higher_better else -diff
    side = "better" if good > 0 else "worse" if good < 0 else "equal"
    spreads = [(w, x) for w, x in ((f"{ref}'s", base), (f"{label}'s", other)) if x is not None]
    if not spreads:
        return (
            "better than" if good > 0 else "worse than" if good < 0 else "equal to"
        ) + f" {ref} (one seed: no seed-to-seed spread to judge the difference against)"
    named = ", ".join(f"{w} {x:.3g}{unit}" for w, x in spreads)
    if other is None:  # the method's one seed has no spread: its value is one draw
        named += f"; {label}: one seed, no spread of its own"
    inside = [abs(diff) <= x for _, x in spreads]
    if all(inside):
        return f"within the seed-to-seed spread of each ({named}): not distinguishable from {ref}"
    if not any(inside):
        return f"{side} than {ref} by more than either seed-to-seed spread ({named})"
    return (
        f"{side} than {ref} beyond one seed-to-seed spread but within the other ({named}): "
        "these seeds cannot tell the two apart"
    )


def spread(stat: Stat | None) -> float | None:
    return stat.spread() if stat is not None else None


def judge(
    diff: float,
    method: Stat | None,
    base: Stat | None,
    higher_better: bool,
    unit: str = "",
    label: str = "the method",
    ref: str = "the baseline",
) -> str:
    """:func:`verdict` with the spreads of the method's and the baseline's per-seed values."""
    return verdict(diff, spread(base), spread(method), higher_better, unit, label, ref)


def beyond_noise(diff: float, method: Stat | None, base: Stat | None, higher_better: bool) -> bool:
    """Worse than the baseline by more than both seed spreads (with no spread: merely worse)."""
    bad = -diff if higher_better else diff
    sp = [x for x in (spread(method), spread(base)) if x is not None]
    return bad > max(sp, default=0.0)


def _downstream(res: StudyResults, n: str) -> Stat | None:
    st = res.methods[n].eval.get("downstream_avg")
    return st if st is not None and isnum(st.mean) else None


def equal_time(study: StudyConfig | None) -> bool:
    """Every run trained for the same time budget (``train.time_budget`` among the base overrides):
    the study compares quality at equal time, and time is saved only on the way to a loss."""
    for o in study.base_overrides if study is not None else []:
        key, _, value = o.partition("=")
        if key.strip() == "train.time_budget" and value.strip().strip("'\"") not in ("", "0"):
            return True
    return False


def findings(res: StudyResults, study: StudyConfig) -> list[str]:
    """Sentences judging the results, each computed from the numbers in ``res``."""
    if res.baseline not in res.methods:
        return [f"No finished {res.baseline} run, so nothing can be compared with it."]
    out: list[str] = []
    full = [
        n for n in ("token-drop", "token-drop-stage2") if n in res.methods and n != res.baseline
    ]
    for n in full:
        out += _against_the_baseline(res, n, equal_time(study))
    out += _reference_to_target(res)
    # every other arm in a sentence: the recipe/schedule arms, and with another reference arm than
    # the plain baseline, every arm but that reference (the plain baseline included)
    out += [
        _arm(res, n)
        for n in res.order
        if n != res.baseline
        and n not in full
        and res.methods[n].group != "remedy"
        and (res.methods[n].group in ("recipe", "schedule") or res.baseline != "baseline")
    ]
    out += _remedies(res)
    out += _equal_compute(res)
    out += _methods_that_fell_short(res)
    out += _selection_ablation(res)
    out += _stage2_and_variants(res)
    out += _rate_sweep(res, study)
    out += source_findings(res)
    out += _timing_caveat(res)
    return out


def _mloss(res: StudyResults, n: str) -> float:
    return res.methods[n].final_eval_loss.mean


def _per_seed_to_target(res: StudyResults, n: str) -> str:
    """Each seed's time to the reference's final loss, relative to the reference's mean wall
    time."""
    hits = [res.runs[r].to_target for r in res.methods[n].runs]
    return "per seed: " + ", ".join(
        f"{100 * h.rel_wall:.1f}%" if h else "not reached" for h in hits
    )


def _reference_to_target(res: StudyResults) -> list[str]:
    """How early the reference arm's own seeds reach the mean of their final losses: the
    seed-to-seed spread that the other arms' times to that loss are judged against."""
    b = res.methods[res.baseline]
    hits = [res.runs[r].to_target for r in b.runs]
    if len(hits) < 2 or not isnum(res.target_eval_loss):
        return []
    ref = res.reference()
    return [
        f"Time to {ref}'s final MLM loss ({res.target_eval_loss:.4f}, the mean over its seeds): "
        f"its own seeds reach it in {sum(1 for h in hits if h)} of {len(hits)} "
        f"({_per_seed_to_target(res, res.baseline)}; a share of its mean wall time), which is how "
        "far the time to that loss varies from seed to seed; an arm saves time beyond that only "
        "where it reaches the loss earlier than these."
    ]


def _against_the_baseline(res: StudyResults, n: str, same_time: bool = False) -> list[str]:
    """Time, held-out MLM loss, downstream score and time to the reference arm's loss of method
    ``n``."""
    ref, R = res.baseline, res.reference()
    M, b, d = res.methods, res.methods[ref], res.methods[n]
    bn = "baseline" if ref == "baseline" else b.label
    mloss = lambda m: _mloss(res, m)  # noqa: E731
    if same_time:
        out = [
            f"**{d.label}** trained for {d.wall_time_s.mean:.0f} s vs {R}'s "
            f"{b.wall_time_s.mean:.0f} s: the same time budget, so this study compares quality at "
            f"equal time (time saved is the time to {R}'s loss, below); in it {d.label} took "
            f"{d.steps.mean:g} steps to {R}'s {b.steps.mean:g} ({100 * d.rel_flops:.1f}% of its "
            "analytic FLOPs)."
        ]
    else:
        out = [
            f"**{d.label}** trained for {d.wall_time_s.mean:.0f} s vs {R}'s "
            f"{b.wall_time_s.mean:.0f} s: {100 * d.rel_wall:.1f}% of {R}'s wall time "
            f"({abs(100 * (1 - d.rel_wall)):.1f}% {'less' if d.rel_wall <= 1 else 'more'}) and "
            f"{100 * d.rel_flops:.1f}% of its analytic FLOPs "
            f"(the paper reports a 25% pretraining-time reduction for BERT-base/large)."
        ]
    if d.init_s.mean > 0 or b.init_s.mean > 0:
        tot = (d.wall_time_s.mean + d.init_s.mean) / (b.wall_time_s.mean + b.init_s.mean)
        out.append(
            f"Before its first step {d.label} spent {d.init_s.mean:.0f} s ({R} {b.init_s.mean:.0f} "
            "s) loading the source, warming up a new MLM head and filling the importance vector, "
            f"outside the timed steps; counting it, {d.label} took {100 * tot:.1f}% of {R}'s time."
        )
    diff = mloss(n) - mloss(ref)
    out.append(
        f"Held-out MLM loss: {d.label} {mloss(n):.4f} vs {bn} {mloss(ref):.4f}, a difference "
        f"of {diff:+.4f}; it is "
        f"{judge(diff, d.final_eval_loss, b.final_eval_loss, False, label=d.label, ref=R)}."
    )
    if "baseline-75" in M:
        d75 = mloss(n) - mloss("baseline-75")
        out.append(
            f"Against the equal-compute control, baseline (75%) ({mloss('baseline-75'):.4f}, "
            f"{100 * M['baseline-75'].rel_wall:.1f}% of {R}'s wall time): {d.label} is "
            f"{'lower' if d75 < 0 else 'higher'} by {abs(d75):.4f}."
        )
    ds, bs = _downstream(res, n), _downstream(res, ref)
    if ds and bs:
        diff = ds.mean - bs.mean
        out.append(
            f"Average downstream score (stand-in tasks): {d.label} {ds.mean:.2f} vs {bn} "
            f"{bs.mean:.2f}, a difference of {diff:+.2f} points; it is "
            f"{judge(diff, ds, bs, True, ' points', d.label, R)}."
        )
        c = _downstream(res, "baseline-75") if "baseline-75" in M else None
        if c:
            out.append(
                f"Against baseline (75%) ({c.mean:.2f}) the difference is "
                f"{ds.mean - c.mean:+.2f} points."
            )
    hits = [res.runs[r].to_target for r in d.runs]
    ok = [h for h in hits if h]
    if ok:
        out.append(
            f"{d.label} reached {R}'s final MLM loss ({res.target_eval_loss:.4f}) in {len(ok)} of "
            f"{len(hits)} seeds, after {100 * mean([h.rel_wall for h in ok]):.1f}% of {R}'s wall "
            f"time ({100 * mean([h.rel_flops for h in ok]):.1f}% of its FLOPs; "
            f"{_per_seed_to_target(res, n)})."
        )
    else:
        out.append(
            f"{d.label} did not reach {R}'s final MLM loss ({res.target_eval_loss:.4f}) "
            f"within its steps (its final: {mloss(n):.4f})."
        )
    return out


def _arm(res: StudyResults, n: str) -> str:
    """One arm against the reference arm: held-out MLM loss, downstream, time to its loss (per
    seed)."""
    ref, R = res.baseline, res.reference()
    b, d = res.methods[ref], res.methods[n]
    diff = _mloss(res, n) - _mloss(res, ref)
    s = (
        f"**{d.label}** ({d.steps.mean:g} steps, {100 * d.rel_flops:.1f}% of {R}'s FLOPs): "
        f"held-out MLM loss {_mloss(res, n):.4f}, {diff:+.4f}: "
        f"{judge(diff, d.final_eval_loss, b.final_eval_loss, False, label=d.label, ref=R)}"
    )
    ds, bs = _downstream(res, n), _downstream(res, ref)
    if ds and bs:
        s += (
            f"; average downstream {ds.mean:.2f}, {ds.mean - bs.mean:+.2f} points: "
            f"{judge(ds.mean - bs.mean, ds, bs, True, ' points', d.label, R)}"
        )
    ok = [h for h in (res.runs[r].to_target for r in d.runs) if h]
    s += (
        f"; reached {R}'s final MLM loss in {len(ok)} of {len(d.runs)} seeds, after "
        f"{100 * mean([h.rel_wall for h in ok]):.1f}% of {R}'s wall time "
        f"({_per_seed_to_target(res, n)})."
        if ok
        else f"; did not reach {R}'s final MLM loss."
    )
    return s


def _remedies(res: StudyResults) -> list[str]:
    """Each remedy arm (group "remedy": token drop plus one change) against the plain token-drop
    arm and the reference arm, each difference judged by both arms' seed spreads (an arm with
    fewer seeds says how many)."""
    M, ref, R = res.methods, res.baseline, res.reference()
    out = []
    for n in res.order:
        d = M[n]
        if d.group != "remedy":
            continue
        loss = _mloss(res, n)
        s = f"Remedy **{d.label}** ({len(d.runs)} seed(s)"
        s += f", {100 * d.rel_flops:.1f}% of {R}'s FLOPs): " if isnum(d.rel_flops) else "): "
        s += f"held-out MLM loss {loss:.4f}"
        for name in dict.fromkeys(("token-drop", ref)):  # each once, token drop first
            other = M.get(name)
            if other is None or name == n:
                continue
            diff = loss - other.final_eval_loss.mean
            who = R if name == ref else f"the {other.label}"
            s += (
                f"; {diff:+.4f} against {who} ({len(other.runs)} seed(s), "
                f"{other.final_eval_loss.mean:.4f}): "
                f"{judge(diff, d.final_eval_loss, other.final_eval_loss, False, '', d.label, who)}"
            )
            paired = _same_seeds(res, other, d.seeds)
            if paired is not None and len(d.seeds) < len(other.seeds):
                s += f" (on the same seed(s) {d.seeds}: {loss - paired:+.4f})"
        out.append(s + ".")
    return out


def _equal_compute(res: StudyResults) -> list[str]:
    """Each arm that has its equal-compute control in the study (a dense arm whose ``flops_of``
    names it: the steps that spend its FLOPs, with its own schedule) against that control, judged
    by both spreads, with the difference on every seed both ran (the pairs share batches and
    masks)."""
    out = []
    for c in res.order:
        spec = ARMS.get(c)
        x = spec.flops_of if spec is not None else ""
        if not x or x not in res.methods:
            continue
        dx, dc = res.methods[x], res.methods[c]
        diff = _mloss(res, x) - _mloss(res, c)
        s = (
            f"Against its equal-compute control, {dc.label} ({len(dc.runs)} seed(s), "
            f"{_mloss(res, c):.4f}"
        )
        if isnum(dc.rel_flops) and isnum(dx.rel_flops):
            s += f"; {100 * dc.rel_flops:.1f}% of {res.reference()}'s FLOPs, {dx.label} "
            s += f"{100 * dx.rel_flops:.1f}%"
        s += (
            f"): {dx.label} is {diff:+.4f}, "
            f"{judge(diff, dx.final_eval_loss, dc.final_eval_loss, False, '', dx.label, dc.label)}"
        )
        xs = {res.runs[r].seed: res.runs[r].final_eval_loss for r in dx.runs}
        cs = {res.runs[r].seed: res.runs[r].final_eval_loss for r in dc.runs}
        pairs = [(k, xs[k] - cs[k]) for k in sorted(xs) if isnum(xs[k]) and isnum(cs.get(k))]
        if pairs:
            same = sum(1 for _, p in pairs if (p > 0) == (diff > 0) and p != 0)
            s += (
                "; per seed "
                + ", ".join(f"{p:+.3f} (seed {k})" for k, p in pairs)
                + f": the sign of the mean on {same} of {len(pairs)}"
            )
        out.append(s + ".")
    return out


def _same_seeds(res: StudyResults, d, seeds: list[int]) -> float | None:
    """The mean final held-out MLM loss of arm ``d``'s runs of ``seeds`` (None unless it has all
    of them)."""
    by_seed = {res.runs[r].seed: res.runs[r].final_eval_loss for r in d.runs}
    if not seeds or any(s not in by_seed for s in seeds):
        return None
    return mean([by_seed[s] for s in seeds])


def _methods_that_fell_short(res: StudyResults) -> list[str]:
    """Every dropping method against the baseline: which fell short by more than both seed
    spreads."""
    ref, M = res.baseline, res.methods
    b = M[ref]
    rows = []
    for n in res.order:
        # schedule: dense arms
        if n == ref or not M[n].group or M[n].group in ("baseline", "schedule"):
            continue
        ds, bs = _downstream(res, n), _downstream(res, ref)
        if ds and bs:
            diff, short, what = (
                ds.mean - bs.mean,
                beyond_noise(ds.mean - bs.mean, ds, bs, True),
                "avg. downstream",
            )
        else:
            diff = _mloss(res, n) - _mloss(res, ref)
            short, what = (
                beyond_noise(diff, M[n].final_eval_loss, b.final_eval_loss, False),
                "MLM loss",
            )
        rows.append((M[n].label, diff, short, what))
    if not rows:
        return []
    fell = [f"{lab} ({what} {diff:+.3g})" for lab, diff, short, what in rows if short]
    return [
        f"Of {len(rows)} token-dropping methods, {len(rows) - len(fell)} matched or beat "
        f"{res.reference()} or were not distinguishable from it (within either seed spread, where "
        f"there is one) and {len(fell)} fell short by more than both seed spreads"
        + (": " + "; ".join(fell) + "." if fell else ".")
    ]


def _selection_ablation(res: StudyResults) -> list[str]:
    """Which tokens to drop: cumulative vs the alternatives (all + stage-2, as in the paper)."""
    M = res.methods
    sel = [
        n for n in ("token-drop-stage2", "half-rand-stage2", "rand-stage2", "freq-stage2") if n in M
    ]
    if len(sel) < 2:
        return []
    by_loss = sorted(sel, key=lambda n: _mloss(res, n))
    txt = ", ".join(f"{M[n].label} {_mloss(res, n):.4f}" for n in by_loss)
    out = [
        f"Selection ablation (all with stage-2), ranked by held-out MLM loss: {txt}. "
        "Cumulative-loss selection ranks "
        f"{by_loss.index('token-drop-stage2') + 1 if 'token-drop-stage2' in sel else '–'} of "
        f"{len(sel)} (the paper found cumulative-loss selection better than frequency-based and "
        "random dropping, and adding randomness unhelpful)."
    ]
    ev = [n for n in sel if _downstream(res, n)]
    if len(ev) >= 2 and "token-drop-stage2" in ev:
        by_ds = sorted(ev, key=lambda n: -_downstream(res, n).mean)
        out.append(
            "By average downstream score: "
            + ", ".join(f"{M[n].label} {_downstream(res, n).mean:.2f}" for n in by_ds)
            + f"; cumulative-loss selection ranks "
            f"{by_ds.index('token-drop-stage2') + 1} of {len(ev)}."
        )
    return out


def _stage2_and_variants(res: StudyResults) -> list[str]:
    M, out = res.methods, []
    mloss = lambda m: _mloss(res, m)  # noqa: E731
    if "token-drop" in M and "token-drop-stage2" in M:
        diff = mloss("token-drop-stage2") - mloss("token-drop")
        out.append(
            f"Stage-2: token drop + stage-2 {mloss('token-drop-stage2'):.4f} vs token drop "
            f"{mloss('token-drop'):.4f} "
            f"held-out MLM loss ({diff:+.4f}; the full-model evaluation favours stage-2, which "
            "ends with dense "
            "steps). The paper found stage-2 unnecessary downstream."
        )
    var = [n for n in ("pass-stage2", "avg-stage2", "layer-rearranged-stage2") if n in M]
    if var and "token-drop-stage2" in M:
        out.append(
            "Variants vs token drop + stage-2 (held-out MLM loss, wall time rel. to baseline): "
            + "; ".join(
                f"{M[n].label} {mloss(n):.4f} ({mloss(n) - mloss('token-drop-stage2'):+.4f}), "
                f"{100 * M[n].rel_wall:.1f}%"
                for n in var
            )
            + f"; token drop + stage-2 {mloss('token-drop-stage2'):.4f}, "
            f"{100 * M['token-drop-stage2'].rel_wall:.1f}%."
        )
    return out


def _rate_sweep(res: StudyResults, study: StudyConfig) -> list[str]:
    M = res.methods
    sweep = [
        (r, sweep_method(r).name) for r in sorted(study.drop_rates) if sweep_method(r).name in M
    ]
    if len(sweep) < 2:
        return []
    best_l = min(sweep, key=lambda rn: _mloss(res, rn[1]))
    txt = ", ".join(
        f"{pct(r)}%: {_mloss(res, n):.4f} at {100 * M[n].rel_wall:.0f}% time" for r, n in sweep
    )
    out = [f"Drop-rate sweep, held-out MLM loss: {txt}. Lowest loss at {pct(best_l[0])}%."]
    ev2 = [(r, n) for r, n in sweep if _downstream(res, n)]
    if len(ev2) >= 2:
        best_d = max(ev2, key=lambda rn: _downstream(res, rn[1]).mean)
        out.append(
            "Average downstream score by rate: "
            + ", ".join(f"{pct(r)}%: {_downstream(res, n).mean:.2f}" for r, n in ev2)
            + f"; best at {pct(best_d[0])}% (the paper: 50% best, more than 62.5% worse)."
        )
    return out


def _timing_caveat(res: StudyResults) -> list[str]:
    loads = [r.loadavg for r in res.runs.values() if r.loadavg]
    cores = os.cpu_count() or 1

    def peak(ld: list) -> float:
        return max([x for x in ld if x is not None], default=0.0)

    busy = [ld for ld in loads if ld and peak(ld) > cores + 0.5]
    if not busy:
        return []
    return [
        f"Timing caveat: for {len(busy)} of {len(loads)} runs the 1-minute load average exceeded "
        f"the {cores} cores (max {max(peak(ld) for ld in busy):.1f}) at the start or end of the "
        "run: other work shared the machine, so wall times are noisier than the FLOP ratios."
    ]


def source_findings(res: StudyResults) -> list[str]:
    """Continued pretraining: what continuing bought over the starting checkpoint itself."""
    src = res.source
    if src is None:
        return []
    out = []
    sd = src.eval.get("downstream_avg")
    for n in dict.fromkeys((res.baseline, "token-drop")):
        if n not in res.methods:
            continue
        d = res.methods[n]
        ds = _downstream(res, n)
        if ds and isnum(sd):
            diff = ds.mean - sd
            sp = spread(ds)
            judged = (
                "within the seeds' spread"
                if sp is not None and abs(diff) <= sp
                else "above it"
                if diff > 0
                else "below it"
                if diff < 0
                else "equal to it"
            )
            out.append(
                f"Continuing the source ({src.label}, average downstream {sd:.2f}): {d.label} "
                f"scores {ds.mean:.2f}, {diff:+.2f} points"
                + (f" (its seeds spread {sp:.2f}), {judged}" if sp is not None else f", {judged}")
                + "."
            )
    if src.final_eval_loss is not None and res.baseline in res.methods:
        out.append(
            f"Held-out MLM loss of the source itself: {src.final_eval_loss:.4f}; after continued "
            f"pretraining {res.reference()}'s is "
            f"{res.methods[res.baseline].final_eval_loss.mean:.4f}."
        )
    elif src.mlm_note:
        out.append(f"The source's held-out MLM loss is not reported: {src.mlm_note}.")
    return out


def paper_comparison(res: StudyResults, study: StudyConfig | None = None) -> list[str]:
    """Agrees / departs, claim by claim, computed from the numbers."""
    M = res.methods
    out: list[str] = []
    td, b = M.get("token-drop"), M.get("baseline")
    # the paper's own comparison only
    if not td or not b or not isnum(td.rel_wall) or res.baseline != "baseline":
        return out
    # every arm had the same budget: time saved on the way to the baseline's loss
    if equal_time(study):
        ok = [h for h in (res.runs[r].to_target for r in td.runs) if h]
        if ok:
            rel = mean([h.rel_wall for h in ok])
            close = abs(1 - rel - PAPER_TIME_SAVING) <= 0.05
            out.append(
                "Time saved by token drop (equal time budgets): it reached the baseline's final "
                f"MLM loss in {len(ok)} of {len(td.runs)} seeds after {100 * rel:.1f}% of the "
                f"baseline's wall time, i.e. {100 * (1 - rel):.1f}% saved vs the paper's ~25%: "
                + ("agrees (within 5 points)." if close else "departs (more than 5 points away).")
            )
        else:
            out.append(
                "Time saved by token drop (equal time budgets): it did not reach the baseline's "
                "final MLM loss within the budget: departs from the paper's ~25% saving."
            )
    else:
        saved = 1 - td.rel_wall
        close = abs(saved - PAPER_TIME_SAVING) <= 0.05
        out.append(
            f"Time saved by token drop: its training steps took {100 * td.rel_wall:.1f}% of the "
            f"baseline's wall time ({100 * td.rel_flops:.1f}% of its FLOPs), i.e. "
            f"{100 * saved:.1f}% saved vs the paper's ~25%: "
            + ("agrees (within 5 points)." if close else "departs (more than 5 points away).")
        )
    ds, bs = _downstream(res, "token-drop"), _downstream(res, "baseline")
    if ds and bs:
        diff = ds.mean - bs.mean
        worse = beyond_noise(diff, ds, bs, True)
        sps = ", ".join(
            f"{w} {x:.2f}"
            for w, x in (("baseline", spread(bs)), ("token drop", spread(ds)))
            if x is not None
        )
        out.append(
            "Quality: the paper finds token drop equal to or better than the baseline downstream; "
            f"here {diff:+.2f} points ({f'seed spreads: {sps}' if sps else 'one seed'}): "
            + ("departs (worse by more than both seed spreads)." if worse else "agrees.")
        )
    sel = [
        n for n in ("token-drop-stage2", "half-rand-stage2", "rand-stage2", "freq-stage2") if n in M
    ]
    ev = [n for n in sel if _downstream(res, n)]
    if "token-drop-stage2" in ev and len(ev) >= 2:
        best = max(ev, key=lambda n: _downstream(res, n).mean)
        out.append(
            "Selection: the paper finds cumulative-loss selection best; here the best average "
            f"downstream score among the stage-2 selection methods is {M[best].label}'s: "
            + ("agrees." if best == "token-drop-stage2" else "departs.")
        )
    return out
