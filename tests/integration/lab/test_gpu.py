"""GPU tests (``pytest -m gpu``; the campaign's ``env`` part runs them): a bf16 training step, the
SDPA kernel that actually runs, torch.compile without a recompilation per step, and token dropping
on CUDA equal to the CPU within bf16 tolerance.  Without CUDA they skip."""

import pytest
import torch

from tokendrop.config import Config, ModelConfig, TrainConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.importance import TokenSelector
from tokendrop.dropping.plan import DropPlan, DropStep
from tokendrop.lab.bench import SPECIAL_IDS, sdpa_backends, synthetic_batch
from tokendrop.lab.bench.profiling import FUSED_SDPA
from tokendrop.models.bert.model import BertForMaskedLM
from tokendrop.train.runtime import param_groups
from tokendrop.train.step import MLMStep

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

CUDA = torch.device("cuda", 0)
V, T, B = 1000, 128, 8


def _model_cfg(dropout: float = 0.1) -> ModelConfig:
    # 64-wide heads: the shape the flash / memory-efficient kernels are built for
    return ModelConfig(
        vocab_size=V,
        hidden_size=256,
        num_layers=4,
        num_heads=4,
        intermediate_size=1024,
        max_position_embeddings=512,
        hidden_dropout=dropout,
        attention_dropout=dropout,
    )


def _drop() -> DropConfig:
    return DropConfig(method="cumulative", variant="drop", rate=0.5)


def _step(model, drop, device, compile_=False):
    cfg = Config(model=model.config, drop=drop, train=TrainConfig(grad_clip=1.0))
    plan = DropPlan.for_model(drop, model.config, T, SPECIAL_IDS, total_steps=1, device=device)
    opt = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, fused=True)
    run = torch.compile(model, dynamic=False) if compile_ else None
    return MLMStep(
        model,
        plan,
        opt,
        cfg.train.grad_clip,
        torch.bfloat16,
        use_attention_mask=False,
        run_model=run,
    )


def _at(step: MLMStep, dropping: bool) -> DropStep:
    """The first step's plan, or a dense step."""
    return _at_step(step, 0, dropping)


def _at_step(step: MLMStep, i: int, dropping: bool) -> DropStep:
    """Step ``i``'s plan, or a dense step."""
    return step.plan.at(i, T) if dropping else DropStep.dense(i, T)


def test_bf16_training_step_updates_weights_and_importance():
    torch.manual_seed(0)
    model = BertForMaskedLM(_model_cfg(), _drop()).to(CUDA).train()
    model.bert.pooler.requires_grad_(False)  # no NSP: the pooler gets no gradient in pretraining
    step = _step(model, _drop(), CUDA)
    mb = synthetic_batch(B, T, V, CUDA)
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    scores0 = step.plan.importance.clone()
    losses = [step([mb], 1e-3, _at(step, True))["loss"].item() for _ in range(5)]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]  # the same batch five times: the loss must fall
    changed = {
        n
        for n, p in model.named_parameters()
        if n in before and not torch.equal(before[n], p.detach())
    }
    # every trained weight moved, half layers included
    assert changed == set(before), sorted(set(before) - changed)
    assert not torch.equal(scores0, step.plan.importance)  # the importance vector was updated
    with torch.autocast(CUDA.type, dtype=torch.bfloat16):
        logits = model(mb["input_ids"], mb["mlm_positions"])
    assert logits.dtype == torch.bfloat16


def test_sdpa_runs_a_fused_kernel():
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = BertForMaskedLM(_model_cfg(), _drop()).to(CUDA).train()
    step = _step(model, _drop(), CUDA)
    mb = synthetic_batch(B, T, V, CUDA)
    step([mb], 1e-3, _at(step, True))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        # with dropping: the half layers attend with fewer query rows
        step([mb], 1e-3, _at(step, True))
        step([mb], 1e-3, _at(step, False))
        torch.cuda.synchronize()
    found = sdpa_backends({e.name for e in prof.events()})
    # never the math fallback (cuDNN's on an H100, torch 2.11)
    assert found and set(found) <= FUSED_SDPA, found
    # and flash / memory-efficient alone accept our calls too (no silent fallback needed)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]):
        out = step([mb], 1e-3, _at(step, True))
    assert torch.isfinite(out["loss"])


def test_compile_does_not_recompile_every_step():
    import torch._dynamo

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = BertForMaskedLM(_model_cfg(), _drop()).to(CUDA).train()
    step = _step(model, _drop(), CUDA, compile_=True)
    mb = synthetic_batch(B, T, V, CUDA)
    for dropping in (True, False):  # one graph per (shape, dropping): compile both first
        step([mb], 1e-3, _at(step, dropping))
    old = torch._dynamo.config.error_on_recompile
    torch._dynamo.config.error_on_recompile = True
    try:
        losses = [
            step([mb], 1e-3, _at(step, d))["loss"].item() for d in (True, True, False, True, False)
        ]
    finally:
        torch._dynamo.config.error_on_recompile = old
    assert all(torch.isfinite(torch.tensor(losses)))


def test_token_dropping_on_cuda_matches_cpu_within_bf16_tolerance():
    torch.manual_seed(0)
    # train mode (the model drops only when training) without dropout: deterministic forwards
    cpu_model = BertForMaskedLM(_model_cfg(dropout=0.0), _drop()).train()
    gpu_model = BertForMaskedLM(_model_cfg(dropout=0.0), _drop())
    gpu_model.load_state_dict(cpu_model.state_dict())
    gpu_model = gpu_model.to(CUDA).train()
    mb = synthetic_batch(B, T, V, torch.device("cpu"))
    sel_cpu = TokenSelector(_drop(), V, SPECIAL_IDS, T)
    g = torch.Generator().manual_seed(1)
    # distinct scores: a unique top-M per sequence
    sel_cpu.scores.copy_(torch.rand(V, generator=g) * 10)
    sel_cpu._repin()
    sel_gpu = TokenSelector(_drop(), V, SPECIAL_IDS, T).to(CUDA)
    sel_gpu.scores.copy_(sel_cpu.scores.to(CUDA))
    keep_cpu = sel_cpu.select(mb["input_ids"], mb["mlm_positions"], mb["mlm_weights"])
    keep_gpu = sel_gpu.select(
        mb["input_ids"].to(CUDA), mb["mlm_positions"].to(CUDA), mb["mlm_weights"].to(CUDA)
    )
    assert torch.equal(keep_cpu, keep_gpu.cpu())  # the same tokens are dropped on both devices
    with torch.no_grad():
        ref = cpu_model(
            mb["input_ids"], mb["mlm_positions"], keep_idx=keep_cpu, drop_active=True
        ).float()
        dense = cpu_model(mb["input_ids"], mb["mlm_positions"]).float()
        with torch.autocast(CUDA.type, dtype=torch.bfloat16):
            got = (
                gpu_model(
                    mb["input_ids"].to(CUDA),
                    mb["mlm_positions"].to(CUDA),
                    keep_idx=keep_gpu,
                    drop_active=True,
                )
                .float()
                .cpu()
            )
    err = (got - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= 0.03 * scale + 0.05, (err, scale)
    # not vacuous: CUDA's dropped forward is much closer to the CPU's dropped one than to the dense
    # one
    assert (got - ref).abs().mean() < 0.5 * (dense - ref).abs().mean()
    assert (got.argmax(-1) == ref.argmax(-1)).float().mean() > 0.9


def _modern_cfg(backend: str) -> ModelConfig:
    # 64-wide heads; a 32-token window; packed documents (a [SEP] every 64 tokens in the batch)
    return ModelConfig(
        preset="modern-tiny",
        vocab_size=V,
        hidden_size=128,
        num_layers=4,
        num_heads=2,
        intermediate_size=192,
        local_attention=32,
        global_attn_every_n_layers=2,
        sep_token_id=SPECIAL_IDS["sep"],
        document_attention="on",
        attention_backend=backend,
        hidden_dropout=0.0,
        attention_dropout=0.0,
    )


@pytest.mark.parametrize("variant", ["drop", "pass"])
def test_flex_attention_matches_sdpa_on_cuda(variant):
    """FlexAttention block masks (documents + windows, compiled) give the loss and gradients of the
    SDPA path (biases and bands) in fp32 on CUDA, dense and with dropping."""
    from tokendrop.models.families import build_model

    torch.manual_seed(0)
    batch = synthetic_batch(B, 256, V, CUDA)
    g = torch.Generator().manual_seed(1)
    keep = torch.stack([torch.randperm(256, generator=g)[:128].sort().values for _ in range(B)]).to(
        CUDA
    )
    drop = DropConfig(method="random", variant=variant, rate=0.5)
    out = {}
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for backend in ("sdpa", "flex"):
            torch.manual_seed(0)
            m = build_model(_modern_cfg(backend), drop).to(CUDA).train()
            for k in (None, keep):
                logits = m(batch["input_ids"], batch["mlm_positions"], None, None, k)
                loss = m.mlm_nll(logits, batch["mlm_labels"]).mean()
                loss.backward()
                out[(backend, k is None)] = (
                    loss.item(),
                    [p.grad.clone() for p in m.parameters() if p.grad is not None],
                )
                m.zero_grad()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    for dense in (True, False):
        (la, ga), (lb, gb) = out[("sdpa", dense)], out[("flex", dense)]
        assert abs(la - lb) < 1e-4
        for a, b in zip(ga, gb):
            torch.testing.assert_close(b, a, atol=1e-4, rtol=1e-3)


def test_flex_attention_compiled_bf16_training_steps():
    """The whole modern model compiled with FlexAttention inside, bf16: losses finite and
    falling."""
    from tokendrop.models.families import build_model

    torch.manual_seed(0)
    cfg = _modern_cfg("flex")
    m = build_model(cfg, _drop()).to(CUDA)
    step = _step(m, _drop(), CUDA, compile_=True)
    batch = synthetic_batch(B, T, V, CUDA)
    losses = [float(step([batch], 1e-3, _at(step, True))["loss"]) for _ in range(6)]
    assert all(map(lambda x: x == x and abs(x) < 1e4, losses)) and losses[-1] < losses[0]


def test_dropping_adds_no_host_sync():
    """The drop step synchronises the host no more often than the dense step (a sync inside the step
    stalls the launch queue: on an H100 at bert-base, T=128, B=128 the drop step had 2 syncs against
    dense's 1 and reached 81% of its FLOP bound).  On failure the message names the Python lines."""
    from tokendrop.lab.bench.timing import count_host_syncs

    torch.manual_seed(0)
    model = BertForMaskedLM(_model_cfg(), _drop()).to(CUDA).train()
    step = _step(model, _drop(), CUDA)
    mb = synthetic_batch(B, T, V, CUDA)
    step([mb], 1e-3, _at(step, True))  # first calls: generator, allocator, kernels chosen
    step([mb], 1e-3, _at(step, False))
    dense = count_host_syncs(lambda: step([mb], 1e-3, _at(step, False)), CUDA)
    drop = count_host_syncs(lambda: step([mb], 1e-3, _at(step, True)), CUDA)
    assert drop.count <= dense.count, (
        f"drop {drop.count} syncs at {drop.locations}; dense {dense.count} at {dense.locations}"
    )


@pytest.mark.parametrize("mode", ["step", "graphs"])
def test_compiled_and_graph_captured_steps_match_eager(mode):
    """train.compile = step / graphs (forward + loss compiled, the backward with it; graphs:
    captured as CUDA graphs): three dropping and two dense bf16 steps give eager's losses within
    bf16 tolerance, and further steps of both kinds compile nothing new."""
    from torch._dynamo.utils import counters

    from tokendrop.train.compiled import compiled_shapes

    def run(compile_mode):
        torch.manual_seed(0)
        model = BertForMaskedLM(_model_cfg(0.0), _drop()).to(CUDA).train()
        cfg = Config(model=model.config, drop=_drop(), train=TrainConfig(grad_clip=1.0, steps=20))
        plan = DropPlan.for_model(
            _drop(), model.config, T, SPECIAL_IDS, total_steps=20, device=CUDA
        )
        opt = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, fused=True)
        step = MLMStep(
            model,
            plan,
            opt,
            cfg.train.grad_clip,
            torch.bfloat16,
            use_attention_mask=False,
            compile=compile_mode,
            shapes=compiled_shapes(plan, [T]),
        )
        batches = [
            {k: v.to(CUDA) for k, v in synthetic_batch(B, T, V, CUDA, seed=i).items()}
            for i in range(7)
        ]
        losses = [
            float(step([batches[i]], 1e-3, _at_step(step, i, i < 3))["loss"]) for i in range(5)
        ]
        return step, batches, losses

    torch._dynamo.reset()
    _, _, eager = run("off")
    step, batches, compiled = run(mode)
    assert compiled == pytest.approx(eager, rel=2e-2, abs=2e-2)
    seen = counters["stats"]["unique_graphs"]
    for i, dropping in ((5, True), (6, False)):
        step([batches[i]], 1e-3, _at_step(step, i, dropping))
    assert counters["stats"]["unique_graphs"] == seen
