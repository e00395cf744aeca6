"""``CampaignConfig``: what each part of the GPU campaign runs
(configs/bench-campaign-NAME.toml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from tokendrop.config import THREADS_AUTO, load_config, resolve_preset
from tokendrop.errors import ConfigError
from tokendrop.lab.bench.longctx import FamilyShape, LongContextConfig
from tokendrop.lab.sizes import BATCH_MEMORY_DEVICE, check_lab_size
from tokendrop.lab.study.spec import STRONG

PARTS = (
    "step",
    "env",
    "bench",
    "bench-compile",
    "pretrain",
    "quality",
    "bench-modern",
    "strong",
    "scratch",
    "bench-longctx",
)
# ``--campaign priority``: the order a lent GPU's time is spent in (part step first: the training
# step's measurements; then the from-scratch comparisons, the paper's own setting (scratch) before
# the small strong-recipe pair that already has one H100 observation; then the rest), each part
# within what is left
PRIORITY = (
    "step",
    "scratch",
    "strong",
    "pretrain",
    "env",
    "bench-longctx",
    "bench",
    "bench-modern",
    "quality",
    "bench-compile",
)


@dataclass
class BenchPart:
    """``bench`` / ``bench-compile`` (bert-base) and ``bench-modern`` (the ModernBERT-architecture
    family, the [modern] table): ours dense, ours with dropping, transformers', per T."""

    model: str = "bert-base"
    vocab_size: int = 30522
    seq_lens: list[int] = field(default_factory=lambda: [128, 512])
    batch_sizes: list[int] = field(default_factory=lambda: [128, 32])
    rate: float = 0.5
    precision: str = "bf16"
    warmup: int = 10  # bench-compile: compilation happens here
    rounds: int = 10
    reps: int = 5
    compile_backend: str = "inductor"  # dry runs: eager (dynamo only, no code generation)
    memory: bool = True
    max_batch: bool = True  # bench (eager): the largest batch that fits, per T and implementation
    # per T: where the search stops
    max_batch_caps: list[int] = field(default_factory=lambda: [4096, 1024])
    # a batch fits only under this peak (how a CPU dry run "runs out"), or "device"
    # (BATCH_MEMORY_DEVICE): when it runs without running out of memory
    max_batch_memory_bytes: int | str = BATCH_MEMORY_DEVICE
    threads: int | str = THREADS_AUTO  # torch CPU threads, or "auto": torch's default
    # modern-*: per-document attention (BenchConfig.document_attention)
    document_attention: str = "off"
    # model.attention_backend of our rows (BenchConfig.attention_backend): auto = FlexAttention on
    # CUDA for window / document masks; sdpa = the SDPA path (windows in bands) for a side-by-side
    # call
    attention_backend: str = "auto"


def _modern_part() -> BenchPart:
    return BenchPart(
        model="modern-base",
        vocab_size=50368,
        seq_lens=[512, 1024],
        batch_sizes=[64, 32],
        max_batch=False,
        max_batch_caps=[2048, 1024],
    )


@dataclass
class StepPart:
    """``step``: the trainer's step per ``train.compile`` mode, dense vs drop (step_part.py)."""

    # "family:T:tokens per step", in the order they run
    settings: list[str] = field(
        default_factory=lambda: [
            "bert:128:16384",
            "modernbert:128:16384",
            "bert:512:16384",
            "modernbert:512:16384",
            "bert:128:65536",
            "modernbert:128:65536",
        ]
    )
    modes: list[str] = field(default_factory=lambda: ["off", "step", "graphs"])
    bert_model: str = "bert-base"
    bert_vocab_size: int = 30522
    modern_model: str = "modern-base"
    modern_vocab_size: int = 50368
    rate: float = 0.5
    precision: str = "bf16"
    warmup: int = 3  # untimed steps: compilation and graph capture happen here
    rounds: int = 5
    reps: int = 5
    compile_backend: str = "inductor"  # dry runs: aot_eager (no code generation)
    # a row (one mode, dense + drop) starts only with this much budget left
    row_reserve_s: float = 75.0
    # the trainer's step against the bench's at the same micro-batch, after the first setting: a
    # short real `pretrain` of trainer_config on the carried data (its T) at trainer_batch, per
    # mode of trainer_modes, dense and at `rate` dropping, ms per step from the log's clock
    trainer_config: str = "bert-base-128"
    trainer_batch: int = 128  # one micro-batch (16k tokens at T=128)
    trainer_steps: int = 40
    trainer_log_every: int = 10  # ms per step: the log's intervals after the first (compilation)
    trainer_modes: list[str] = field(default_factory=lambda: ["off", "step"])
    trainer_overrides: list[str] = field(default_factory=list)  # dotted Config overrides

    def rows(self) -> list[tuple[str, int, int]]:
        """``settings`` parsed: (family, T, tokens per step)."""
        out = []
        for s in self.settings:
            parts = s.split(":")
            if (
                len(parts) != 3
                or parts[0] not in ("bert", "modernbert")
                or not all(x.isdigit() for x in parts[1:])
            ):
                raise ConfigError(
                    f'step.settings: {s!r} is not "FAMILY:T:TOKENS" (FAMILY bert or modernbert), '
                    'e.g. "bert:128:16384"'
                )
            out.append((parts[0], int(parts[1]), int(parts[2])))
        return out


@dataclass
class PretrainPart:
    """``pretrain``: real ``tokendrop pretrain`` runs, dense and token drop, on the carried data."""

    config: str = "bert-base-128"
    steps: int = 300
    batch_size: int = 256
    # dotted Config overrides for every run of the part
    overrides: list[str] = field(default_factory=list)
    # checkpoint/resume check: pause at half, resume, compare with an uninterrupted run
    resume_steps: int = 20
    torchrun_steps: int = 10  # the torchrun --nproc-per-node 1 run
    torchrun_timeout_s: float = 240.0
    bench_rounds: int = 3  # the short bench the log's tokens/s and MFU are compared with
    bench_reps: int = 3
    min_loss_drop: float = 1.0  # "loss falls": the final eval loss at least this far below step 0's


RUN_LENGTHS = ("time", "steps", "equal-steps")  # QualityPart.run_length


@dataclass
class QualityPart:
    """``quality``: a small BERT pretrained dense and with token dropping for the same wall-clock
    budget, then fine-tuned; eval MLM loss vs wall-clock and time-to-loss."""

    config: str = "bert-base-128"
    # the small model, lr, ... (dotted Config overrides)
    overrides: list[str] = field(default_factory=list)
    batch_size: int = 256
    train_budget_s: float = 110.0  # training seconds per method (evaluation excluded)
    # "time": each run trains for the same wall-clock seconds (train.time_budget, the per-run budget
    # the calibration allows); "steps": for the step counts the calibration predicts, capped by
    # max_steps (the dry run's: a machine's speed must not decide how many steps a test takes).  On
    # the H100 the trainer's steps took 1.5-1.7x the calibrating bench step, so "steps" overran the
    # part's budget (benchmarks/results/gpu-h100-2026-11-28/strong-call1.md).  "equal-steps": every
    # arm the same step count (times its share, QUALITY_ARMS), the count the calibration fits into
    # the budget for all runs together, capped by max_steps and by train_budget_s for a dense run:
    # the comparison at equal steps and, through dense-75, at equal FLOPs (part scratch)
    run_length: str = "time"
    max_steps: int = 100000
    evals: int = 12  # evaluation points per run
    tasks: list[str] = field(default_factory=lambda: ["sst2", "qnli"])
    finetune_overrides: list[str] = field(default_factory=list)  # dotted FinetuneConfig overrides
    finetune_reserve_s: float = 150.0  # kept back from pretraining for the fine-tuning
    calibrate_rounds: int = 3
    plateau_margin: float = 1.0  # "far below the unigram plateau": at least this many nats below
    # both runs on top of the strongest dense recipe (part strong: :func:`strong_recipe` at
    # batch_size)
    strong_recipe: bool = False
    # the pretraining runs: every arm (QUALITY_ARMS) with every seed, seed by seed (a part cut short
    # keeps whole seeds); one seed names a run by its arm, several as ARM-seedN
    arms: list[str] = field(default_factory=lambda: ["dense", "token-drop"])
    seeds: list[int] = field(default_factory=lambda: [0])
    # > 0: dense and token drop at rate 0 for this many steps each (same seed, a schedule over these
    # steps, log every step): the two per-step training losses must agree within rate0_tolerance
    rate0_steps: int = 0
    rate0_tolerance: float = 0.1
    # > 0: the first steps of a token-drop run (dropout off, batch agreement_batch) on the CPU in
    # fp32 and on the part's device in bf16: per-step training losses within agreement_tolerance
    # (relative)
    agreement_steps: int = 0
    agreement_batch: int = 8
    agreement_tolerance: float = 0.02
    # > 0: each dropping run keeps this many checkpoints through training; the kept-row composition
    # and the importance-vs-rarity correlation at each (tokendrop.lab.inspect.selection_trace)
    diagnostics: int = 0
    # the peak learning rates every arm runs at (rate by rate: a part cut short keeps every arm of
    # its finished rates); [] = the config's train.lr alone
    lrs: list[float] = field(default_factory=list)
    # > 0: the step times that size the runs come from short real `pretrain` runs of this many steps
    # (dense and dropping, the part's model and batch, ms per step from the log); 0: from a bench of
    # the model (BERT family only)
    calibrate_steps: int = 0
    # --campaign priority: the part starts only with this many seconds of campaign.total_s left
    # (runs sized into less would be too short to compare); 0: campaign.min_part_s alone decides
    min_budget_s: float = 0.0

    def validate(self, where: str) -> None:
        if self.run_length not in RUN_LENGTHS:
            raise ConfigError(
                f'{where}.run_length: expected "time", "steps" or "equal-steps", got '
                f"{self.run_length!r}"
            )
        if any(not isinstance(x, int | float) or not x > 0 for x in self.lrs) or len(
            set(self.lrs)
        ) != len(self.lrs):
            raise ConfigError(
                f"{where}.lrs: expected distinct learning rates > 0 (or [] for "
                f"train.lr), got {self.lrs}"
            )
        if self.calibrate_steps < 0 or self.min_budget_s < 0:
            raise ConfigError(
                f"{where}.calibrate_steps/min_budget_s: expected >= 0, got "
                f"{self.calibrate_steps} and {self.min_budget_s}"
            )
        arms = self.arms
        known = all(a in QUALITY_ARMS for a in arms)
        if not known or len(set(arms)) != len(arms) or "dense" not in arms:
            raise ConfigError(
                f"{where}.arms: expected distinct names of {', '.join(QUALITY_ARMS)} "
                f"including dense, got {arms}"
            )
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ConfigError(
                f"{where}.seeds: expected a non-empty list of distinct integers, got {self.seeds}"
            )
        counts = (self.rate0_steps, self.agreement_steps, self.diagnostics)
        if min(counts) < 0 or self.agreement_batch < 1:
            raise ConfigError(
                f"{where}.rate0_steps/agreement_steps/diagnostics: expected >= 0; "
                "agreement_batch: expected >= 1"
            )

    def run_name(self, arm: str, seed: int, lr: float | None = None) -> str:
        """A run's name in the part's files: its arm, ``-lrX`` with several ``lrs`` (``lr`` one of
        them), ``-seedN`` with several seeds."""
        name = arm if lr is None or len(self.lrs) < 2 else f"{arm}-lr{lr:g}"
        return name if len(self.seeds) == 1 else f"{name}-seed{seed}"

    def rates(self) -> list[float | None]:
        """The learning rates the runs go through, in order: ``lrs``, or [None] (train.lr)."""
        return list(self.lrs) or [None]

    def recipe(self) -> list[str]:
        """The recipe's dotted Config overrides both runs get after ``overrides`` ([] without
        one)."""
        return strong_recipe(self.batch_size) if self.strong_recipe else []


class Arm(NamedTuple):
    """A pretraining arm of parts quality, strong and scratch."""

    method: str  # drop.method
    overrides: tuple[str, ...] = ()  # extra dotted Config overrides
    # its step count as a share of the dense run's (run_length "equal-steps"; else of its budget),
    # with its own full schedule over those steps
    steps_share: float = 1.0


QUALITY_ARMS: dict[str, Arm] = {
    "dense": Arm("none"),
    "token-drop": Arm("cumulative"),
    "token-drop-rate0": Arm("cumulative", ("drop.rate=0.0",)),  # the dropping path, every row kept
    # the paper's "baseline (75%)": dense for 75% of the steps with its own full decay, about token
    # drop's FLOPs (12 layers, half the rows in 6 of them)
    "dense-75": Arm("none", (), 0.75),
}


def strong_recipe(batch_size: int) -> list[str]:
    """The strong dense recipe of study-strong (``tokendrop.lab.study.spec.STRONG``: WSD with a full
    1-sqrt decay over the last 20%, batch warm-up over the first quarter, masking 30% -> 15%), its
    batch warm-up starting from half of ``batch_size``.  The MLM head runs on the masked slots only
    in every tokendrop model (no option)."""
    return [o for o in STRONG if not o.startswith("train.batch_warmup_start=")] + [
        f"train.batch_warmup_start={max(1, batch_size // 2)}"
    ]


def _strong_part() -> QualityPart:
    """Part ``strong``: a 6 x 384 BERT from scratch, dense with the strong recipe vs + 50% token
    drop, the same training wall-clock each (150 s on the GPU), no fine-tuning: time to the dense
    run's loss."""
    return QualityPart(
        overrides=[
            "model.num_layers=6",
            "model.hidden_size=384",
            "model.num_heads=6",
            "model.intermediate_size=1536",
            "train.lr=1e-3",
            "train.compile=false",
            "train.eval_batches=20",
            "data.num_workers=2",
        ],
        batch_size=256,
        train_budget_s=150.0,
        evals=15,
        tasks=[],
        finetune_reserve_s=0.0,
        strong_recipe=True,
        arms=["dense", "token-drop-rate0", "token-drop"],
        seeds=[0, 1],
        rate0_steps=100,
        agreement_steps=8,
        diagnostics=4,
    )


def _scratch_part() -> QualityPart:
    """Part ``scratch``: the paper's setting at BERT-base width from random weights -- a 12 x 768
    ModernBERT-family encoder, every layer global, the paper's layout (drop span 5-10), T=128, batch
    256, linear decay to zero -- dense, dense-75 and token drop at two learning rates, equal steps
    (configs/bench-campaign-gpu.toml says why each choice)."""
    return QualityPart(
        overrides=[
            "model.preset='modern-base'",
            "model.num_layers=12",
            "model.global_attn_every_n_layers=1",
            "model.attention_backend='sdpa'",
            "model.vocab_size='data'",
            "train.lr_schedule='linear'",
            "train.compile=false",
            "train.eval_batches=20",
            "data.num_workers=2",
        ],
        batch_size=256,
        train_budget_s=60.0,
        run_length="equal-steps",
        evals=10,
        tasks=[],
        finetune_reserve_s=0.0,
        arms=["dense", "token-drop", "dense-75"],
        lrs=[5e-4, 1e-3],
        calibrate_steps=30,
        min_budget_s=420.0,
    )


def _longctx_gpu() -> LongContextConfig:
    """Part ``bench-longctx``: the long-context rows on the GPU -- bert-base and modern-base shapes,
    T = 512 ... 8192, 64k tokens per step, bf16, per-document attention (one document per row), 5
    interleaved rounds per row whatever the budget (a median and a range at every T)."""
    return LongContextConfig(
        name="campaign-longctx",
        device="cuda",
        tokens_per_step=65536,
        precision="bf16",
        warmup=2,
        rounds=5,
        min_rounds=5,
        reps=1,
        bert=FamilyShape(model="bert-base", vocab_size=30522),
        modern=FamilyShape(model="modern-base", vocab_size=50368),
    )


@dataclass
class CampaignConfig:
    name: str = "gpu"
    dry_run: bool = False
    device: str = "cuda"
    # `tokendrop prepare` output (benchmarks/gpu_campaign_prepare.sh)
    data: str = "runs/gpu-carry/data-128"
    glue: str = "runs/gpu-carry/glue"  # holds SST-2/ and QNLI/ (GLUE TSV layout)
    budget_s: float = 480.0  # each part stops itself before this many seconds
    pytest: bool = True  # env: run `pytest -m gpu tests/integration/lab/test_gpu.py`
    # --campaign priority: the device time all its parts share (a lent GPU: 15 minutes including the
    # machine's start; one call at most 10); each part gets min(budget_s, what is left)
    total_s: float = 540.0
    min_part_s: float = 60.0  # a part starts only with this much of total_s left
    step: StepPart = field(default_factory=StepPart)
    bench: BenchPart = field(default_factory=BenchPart)
    modern: BenchPart = field(default_factory=_modern_part)  # part bench-modern
    pretrain: PretrainPart = field(default_factory=PretrainPart)
    quality: QualityPart = field(default_factory=QualityPart)
    strong: QualityPart = field(default_factory=_strong_part)  # part strong
    scratch: QualityPart = field(default_factory=_scratch_part)  # part scratch
    longctx: LongContextConfig = field(default_factory=_longctx_gpu)  # part bench-longctx

    def validate(self) -> CampaignConfig:
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"campaign.device: expected cpu or cuda, got {self.device!r}")
        if self.budget_s <= 0:
            raise ConfigError(f"campaign.budget_s: expected > 0, got {self.budget_s}")
        for sec, b in (("bench", self.bench), ("modern", self.modern)):
            if len(b.batch_sizes) != len(b.seq_lens) or len(b.max_batch_caps) != len(b.seq_lens):
                raise ConfigError(
                    f"{sec}.batch_sizes/{sec}.max_batch_caps: one per {sec}.seq_lens entry "
                    f"({len(b.seq_lens)})"
                )
            if not 0.0 < b.rate < 1.0:
                raise ConfigError(f"{sec}.rate: expected a drop rate in (0, 1), got {b.rate}")
            check_lab_size("campaign.threads", b.threads, f"{sec}.threads")
            check_lab_size(
                "campaign.max_batch_memory_bytes",
                b.max_batch_memory_bytes,
                f"{sec}.max_batch_memory_bytes",
            )
        p = self.pretrain
        if p.steps < 2 or p.resume_steps < 2 or p.torchrun_steps < 1:
            raise ConfigError(
                "pretrain.steps/resume_steps/torchrun_steps: expected >= 2, >= 2, >= 1"
            )
        for sec, q in (
            ("quality", self.quality),
            ("strong", self.strong),
            ("scratch", self.scratch),
        ):
            if q.train_budget_s <= 0 or q.evals < 2:
                raise ConfigError(f"{sec}.train_budget_s/evals: expected > 0 and >= 2")
            q.validate(sec)
        self.longctx.validate()
        self.step.rows()
        bad = [m for m in self.step.modes if m not in ("off", "forward", "step", "graphs")]
        if bad:
            raise ConfigError(
                f"step.modes: {bad[0]!r} is not a train.compile mode (off, forward, step, graphs)"
            )
        if self.total_s <= 0:
            raise ConfigError(f"campaign.total_s: expected > 0, got {self.total_s}")
        return self


def part_start_s(cfg: CampaignConfig, part: str) -> float:
    """--campaign priority: the seconds of ``total_s`` part ``part`` needs left to start:
    ``min_part_s``, or its section's ``min_budget_s`` if larger."""
    q = {"quality": cfg.quality, "strong": cfg.strong, "scratch": cfg.scratch}.get(part)
    return max(cfg.min_part_s, q.min_budget_s if q else 0.0)


CAMPAIGN_PREFIX = "bench-campaign-"


def campaign_config(
    preset: str = "gpu", overrides: list[str] | tuple[str, ...] = (), dry_run: bool = False
) -> CampaignConfig:
    """``configs/bench-campaign-PRESET.toml`` (or a .toml path) with dotted overrides; ``dry_run``
    forces ``dry_run=true`` and the CPU."""
    name = preset if preset.endswith(".toml") else f"{CAMPAIGN_PREFIX}{preset}"
    try:
        path = resolve_preset(name)
    except ConfigError:
        raise ConfigError(
            f"bench --campaign --preset: no campaign preset {preset!r} "
            f"(configs/{CAMPAIGN_PREFIX}NAME.toml "
            "or a .toml path)"
        ) from None
    extra = ["dry_run=true", 'device="cpu"'] if dry_run else []
    return load_config(path, list(overrides) + extra, cls=CampaignConfig)
