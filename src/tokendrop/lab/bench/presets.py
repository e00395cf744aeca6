"""What to measure: ``BenchConfig`` and the presets ``configs/bench-NAME.toml``.

Presets load through the project's one config mechanism (``tokendrop.config.load_config``): TOML,
``extends = "bench-other"`` inheritance, and dotted ``key=value`` overrides checked against the
dataclass fields (``--set rounds=3 --set seq_lens=[128]``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tokendrop.config import THREADS_AUTO, ModelConfig, config_dir, from_dict, load_config
from tokendrop.config.model import MODEL_PRESETS
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.methods import DEFAULT_VARIANT, METHODS, VARIANTS
from tokendrop.errors import ConfigError
from tokendrop.lab.sizes import (
    BUDGET_NONE,
    PEAK_TABLE,
    SHAPE_FIELDS,
    SHAPE_PRESET,
    check_lab_size,
)
from tokendrop.models.attention import check_training_device
from tokendrop.models.families import spec_of


@dataclass(frozen=True)
class BenchVariant:
    """A dropping setting the benchmark times (``bench.variants``): which ``drop.method`` runs
    (None: the benchmark's importance method, ``bench.method``) with which ``drop.variant``."""

    method: str | None
    variant: str = "drop"

    @property
    def headline(self) -> bool:
        """Its rows drop tokens (the default ``drop.variant``): the speedups a README quotes at rate
        0.5."""
        return self.variant == DEFAULT_VARIANT

    @property
    def pools(self) -> bool:
        """Its ``drop.variant`` pools 2:1 (avg): timed at rate 0.5 only."""
        return VARIANTS[self.variant].pools

    def drop_config(self, method: str, rate: float = 0.5) -> DropConfig:
        """The ``[drop]`` section of this setting at drop rate ``rate`` (``method``:
        ``bench.method``). A per-layer method of its own (random-LTD) keeps 1 - rate of T in every
        middle layer, its schedule's first step; ``avg`` pools 2:1 (rate 0.5, whatever ``rate``
        says)."""
        if self.method is not None and METHODS[self.method].per_layer:
            return DropConfig(method=self.method, ltd_start_fraction=1.0 - rate)
        return DropConfig(
            method=self.method or method, variant=self.variant, rate=0.5 if self.pools else rate
        )


BENCH_VARIANTS = {  # bench.variants -> what each runs
    "drop": BenchVariant(None),
    "pass": BenchVariant(None, "pass"),
    "avg": BenchVariant("none", "avg"),
    "random_ltd": BenchVariant("random_ltd"),
}
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")


@dataclass
class BenchConfig:
    """One benchmark: the model, the settings (sequence lengths x variants x drop rates) and the
    protocol."""

    name: str = "custom"
    device: str = "cpu"  # cpu | cuda
    # a tokendrop.config.model.MODEL_PRESETS name (bert-* / cpu-* / modern-*)
    model: str = "cpu-12x256"
    # a positive size overrides the model preset's shape (intermediate = 4 x hidden, unless given),
    # or "preset" (SHAPE_PRESET): the model preset's
    num_layers: int | str = SHAPE_PRESET
    hidden_size: int | str = SHAPE_PRESET
    num_heads: int | str = SHAPE_PRESET
    # the FFN width, or "preset": the preset's (a modern-* preset's GeGLU width stays)
    intermediate_size: int | str = SHAPE_PRESET
    # modern-*: per-document attention in the packed rows (model.document_attention); off by
    # default, as transformers' ModernBertForMaskedLM without the flash_attn package attends across
    # documents
    document_attention: str = "off"
    # the synthetic batch's documents: a [SEP] every document_tokens tokens, or "row"
    # (DOCUMENT_ROW): one document per row, as long-context data whose documents fill the row
    # (attention over all T, what the FLOP model counts)
    document_tokens: int | str = 64
    # the attention dropout, or "preset" (SHAPE_PRESET): the model preset's (BERT's 0.1); 0 lets
    # SDPA run a fused kernel; with dropout CPU runs its math path, T x T scores materialised
    # (quadratic memory at long T)
    attention_dropout: float | str = SHAPE_PRESET
    # the HF baseline's head on the masked positions only, as ours (modern-*: transformers'
    # sparse_prediction; bert: BertForMaskedLM's own head applied to the gathered slots); false =
    # the models as released (the head on all T positions)
    hf_sparse_prediction: bool = False
    # model.attention_backend (tokendrop.models.attention): auto = FlexAttention for window /
    # document masks on CUDA without attention dropout, SDPA (windows block by block) otherwise;
    # sdpa; flex (CUDA)
    attention_backend: str = "auto"
    vocab_size: int = 30522  # BERT's WordPiece vocabulary
    seq_lens: list[int] = field(default_factory=lambda: [128, 512])
    tokens_per_step: int = 2048  # B = tokens_per_step // T (unless batch_sizes gives it)
    batch_sizes: list[int] = field(default_factory=list)  # per seq_len, overrides tokens_per_step
    rates: list[float] = field(default_factory=lambda: [0.5])
    # drop | pass | avg (rate 0.5 only) | random_ltd
    variants: list[str] = field(default_factory=lambda: ["drop"])
    method: str = "cumulative"  # importance method for drop/pass (the paper's)
    # time transformers.BertForMaskedLM (modern-*: ModernBertForMaskedLM) side by side
    hf: bool = True
    # also time that model patched by tokendrop.transformers.apply_token_dropping at every variant x
    # rate (its head as hf_sparse_prediction says), against the unpatched one and against ours
    hf_token_dropping: bool = False
    # with hf_sparse_prediction and hf_token_dropping: also time transformers' MLM class as released
    # (its head on all T positions, labels -100 elsewhere) as T<n>/hf-released, interleaved with the
    # rest, and report the integration's three numbers: patched vs released, the sparse head alone
    # (the sparse-head baseline vs released), dropping alone (patched vs the sparse-head baseline)
    hf_released: bool = False
    precision: str = "fp32"  # fp32 | bf16 (autocast, fp32 master weights, both models)
    compile: bool = False  # torch.compile(model, dynamic=False), ours and HF's
    # inductor | aot_eager | eager (the last two: dry runs without codegen)
    compile_backend: str = "inductor"
    fused_adamw: bool = True  # AdamW(fused=True), ours and HF's (CUDA and, since torch 2.4, CPU)
    threads: int | str = THREADS_AUTO  # torch CPU threads, or "auto": torch's default
    warmup: int = 2  # untimed steps per setting before the rounds (compile: more)
    rounds: int = 5
    # rounds that run whatever time_budget_s says (the budget stops only the rounds after them): a
    # spread over at least this many paired ratios
    min_rounds: int = 1
    reps: int = 1  # timed steps per setting per round
    memory: bool = True  # the extra untimed, profiled step per setting
    # the census (ops, would-be syncs) of one step per setting; CUDA: its sync debug mode too
    sync_check: bool = True
    # the peak MFU is measured against, or "table" (PEAK_TABLE): the GPU's bf16 peak from the
    # table (none on CPU)
    peak_tflops: float | str = PEAK_TABLE
    # stop the rounds early rather than run past this many seconds, or "none" (BUDGET_NONE)
    time_budget_s: float | str = BUDGET_NONE
    seed: int = 0

    def validate(self) -> BenchConfig:
        if self.device not in ("cpu", "cuda"):
            raise ConfigError(f"bench.device: expected cpu or cuda, got {self.device!r}")
        if self.model not in MODEL_PRESETS:
            raise ConfigError(
                f"bench.model: unknown model preset {self.model!r}; expected one of "
                f"{', '.join(MODEL_PRESETS)}"
            )
        for k in SHAPE_FIELDS:
            check_lab_size(f"bench.{k}", getattr(self, k))
        check_lab_size("bench.attention_dropout", self.attention_dropout)
        check_lab_size("bench.document_tokens", self.document_tokens)
        mc = self.model_config()  # the shape overrides are consistent

        check_training_device(mc.attention_backend, self.device)
        longest = spec_of(mc).max_seq_len
        if not self.seq_lens or any(t < 8 or t > longest for t in self.seq_lens):
            raise ConfigError(
                f"bench.seq_lens: expected lengths in [8, {longest}] for model {self.model!r}, got "
                f"{self.seq_lens}"
            )
        if len(set(self.seq_lens)) != len(self.seq_lens):
            raise ConfigError(f"bench.seq_lens: each length once, got {self.seq_lens}")
        if self.batch_sizes and len(self.batch_sizes) != len(self.seq_lens):
            raise ConfigError(
                f"bench.batch_sizes: one batch size per seq_len expected ({len(self.seq_lens)}), "
                f"got {self.batch_sizes}"
            )
        if any(b <= 0 for b in self.batch_sizes) or self.tokens_per_step <= 0:
            raise ConfigError("bench.batch_sizes/tokens_per_step: expected positive sizes")
        for v in self.variants:
            if v not in BENCH_VARIANTS:
                raise ConfigError(
                    f"bench.variants: unknown variant {v!r}; expected one of "
                    f"{', '.join(BENCH_VARIANTS)}"
                )
        for r in self.rates:
            if not 0.0 < r < 1.0:
                raise ConfigError(f"bench.rates: expected drop rates in (0, 1), got {r}")
        if self.hf_token_dropping and not self.hf:
            raise ConfigError(
                "bench.hf_token_dropping: the patched transformers model is compared with the "
                "unpatched one; set hf = true"
            )
        if self.hf_released and not (self.hf_token_dropping and self.hf_sparse_prediction):
            raise ConfigError(
                "bench.hf_released: the released model is the third arm beside the "
                "sparse-head baseline and the patched model; set "
                "hf_sparse_prediction = true and hf_token_dropping = true"
            )
        if self.precision not in ("fp32", "bf16"):
            raise ConfigError(f"bench.precision: expected fp32 or bf16, got {self.precision!r}")
        if self.compile_backend not in COMPILE_BACKENDS:
            raise ConfigError(
                f"bench.compile_backend: expected one of {', '.join(COMPILE_BACKENDS)}, got "
                f"{self.compile_backend!r}"
            )
        check_lab_size("bench.threads", self.threads)
        if self.warmup < 0 or self.rounds < 1 or self.reps < 1:
            raise ConfigError(
                "bench.warmup/rounds/reps: expected warmup >= 0, rounds >= 1, reps >= 1"
            )
        if not 1 <= self.min_rounds <= self.rounds:
            raise ConfigError(
                f"bench.min_rounds: expected 1 ... rounds ({self.rounds}), got {self.min_rounds}"
            )
        check_lab_size("bench.time_budget_s", self.time_budget_s)
        check_lab_size("bench.peak_tflops", self.peak_tflops)
        return self

    def model_config(self) -> ModelConfig:
        """The model preset with the shape overrides applied (dropout etc. as in pretraining)."""
        longest = max(self.seq_lens or [0])
        # more positions than BERT's 512 when a length needs them, else the preset's (a field given
        # wins over it)
        positions = {"max_position_embeddings": longest} if longest > 512 else {}
        shape = {k: getattr(self, k) for k in SHAPE_FIELDS if getattr(self, k) != SHAPE_PRESET}
        mc = ModelConfig(
            preset=self.model,
            vocab_size=self.vocab_size,
            document_attention=self.document_attention,
            attention_backend=self.attention_backend,
            **shape,
            **positions,
        )
        if self.attention_dropout != SHAPE_PRESET:
            mc.attention_dropout = self.attention_dropout
        if mc.uses_document_attention:
            mc.sep_token_id = SPECIAL_IDS["sep"]  # the synthetic batch's documents: document_tokens
        mc.validate()
        return mc

    def batch_size(self, seq_len: int) -> int:
        if self.batch_sizes:
            return self.batch_sizes[self.seq_lens.index(seq_len)]
        return max(1, self.tokens_per_step // seq_len)


PRESET_PREFIX = "bench-"
CAMPAIGN_PREFIX = "bench-campaign-"  # configs/bench-campaign-*.toml are CampaignConfig presets
# configs/bench-longctx-*.toml are LongContextConfig presets (bench.longctx)
LONGCTX_PREFIX = "bench-longctx-"


def _preset_files() -> dict[str, Path]:
    d = config_dir()
    files = sorted(d.glob(f"{PRESET_PREFIX}*.toml")) if d.is_dir() else []
    return {
        p.stem[len(PRESET_PREFIX) :]: p
        for p in files
        if not p.stem.startswith((CAMPAIGN_PREFIX, LONGCTX_PREFIX))
    }


class _PresetIndex(Mapping[str, Path]):
    """The bench presets by name (``configs/bench-NAME.toml``), read when asked (honours
    $TOKENDROP_CONFIG_DIR)."""

    def __getitem__(self, name: str) -> Path:
        return _preset_files()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_preset_files())

    def __len__(self) -> int:
        return len(_preset_files())


PRESETS: Mapping[str, Path] = _PresetIndex()


def default_preset(device: str | None) -> str:
    return "gpu-full" if device == "cuda" else "cpu-quick"


def make_preset(
    name: str = "", device: str | None = None, overrides: list[str] | tuple[str, ...] = ()
) -> BenchConfig:
    """A preset by name (default: ``cpu-quick``, or ``gpu-full`` for ``device="cuda"``) or a
    ``.toml`` path, with ``key=value`` overrides; ``device`` (when given) overrides the preset's
    device."""
    name = name or default_preset(device)
    is_path = name.endswith(".toml") or os.sep in name
    if not is_path and name not in PRESETS:
        raise ConfigError(
            f"bench --preset: unknown preset {name!r}; expected one of {', '.join(PRESETS)} "
            "or a .toml file"
        )
    extra = [f'device="{device}"'] if device else []
    cfg = load_config(name if is_path else PRESETS[name], list(overrides) + extra, cls=BenchConfig)
    if cfg.name == "custom":  # a file without a name: its stem
        cfg.name = Path(name).stem
    return cfg


def bench_config(values: dict, overrides: list[str] | tuple[str, ...] = ()) -> BenchConfig:
    """A BenchConfig from plain values (a TOML table) with dotted overrides, validated."""
    return from_dict(BenchConfig, values, overrides)
