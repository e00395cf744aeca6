"""train.compile: the compiled step (forward + MLM loss as one graph, its backward compiled with it,
AdamW's update as another) equals the eager step -- loss, accuracy, the gradients AdamW is given,
the weights after every step, the importance update -- for both families, dropping and dense; after
its first step of each kind it never recompiles, whatever the learning rate.  The
default run checks the graphs with AOTAutograd on the eager backend (dynamo's capture and the
autograd split, no code generation: seconds); the inductor check (minutes of C++ compilation on CPU)
is slow.  CUDA graphs (``graphs``): ``@pytest.mark.gpu``."""

from __future__ import annotations

import pytest
import torch
from batches import mlm_batch
from tiny_models import tiny_config
from torch._dynamo.testing import CompileCounterWithBackend

from tokendrop.config import Config, TrainConfig, load_config
from tokendrop.data.tokenizer import SPECIAL_IDS
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.plan import DropPlan, DropStep
from tokendrop.errors import ConfigError
from tokendrop.models.families import build_model
from tokendrop.train.compiled import CompiledAdamW, compiled_shapes, resolve_mode
from tokendrop.train.runtime import param_groups
from tokendrop.train.step import MLMStep

V, T, B = 97, 32, 2


class RecordingAdamW(torch.optim.AdamW):
    """AdamW that keeps a copy of the gradients it was given."""

    def step(self, closure=None):
        self.grads = [
            None if p.grad is None else p.grad.clone()
            for g in self.param_groups
            for p in g["params"]
        ]
        return super().step(closure)


def _step(family: str, mode: str, backend, device: str = "cpu", amp=None):
    mc = tiny_config(family, V)
    drop = DropConfig(method="cumulative")
    cfg = Config(
        model=mc, drop=drop, train=TrainConfig(steps=20, batch_size=B, lr=1e-3, warmup_steps=0)
    ).validate()
    torch.manual_seed(0)
    model = build_model(mc, drop).train().to(device)
    plan = DropPlan.for_model(
        drop, mc, T, SPECIAL_IDS, seed=0, total_steps=cfg.train.steps, device=device
    )
    opt = RecordingAdamW(param_groups(model, 0.01), lr=1e-3)
    step = MLMStep(
        model,
        plan,
        opt,
        cfg.train.grad_clip,
        amp,
        use_attention_mask=False,
        compile=mode,
        compile_backend=backend,
        shapes=compiled_shapes(plan, [T]),
    )
    return step, model, plan.selector


def _record_grads(step) -> None:
    """The compiled AdamW (train.compile = step) keeps a copy of the gradients it is given, as
    RecordingAdamW does."""
    update = step.compiled_opt

    def recording(lr, finite):
        update.grads = [
            None if p.grad is None else p.grad.clone()
            for g in step.opt.param_groups
            for p in g["params"]
        ]
        update(lr, finite)

    step.compiled_opt = recording
    step.opt.grads_from = update


def _run(step, device: str = "cpu"):
    """Three dropping steps, then two dense ones (stage 2), each at its own learning rate; what
    each step returned, was given and left in the weights."""
    if step.compiled_opt is not None:
        _record_grads(step)
    out = []
    for i in range(5):
        mb = {k: v.to(device) for k, v in mlm_batch(V, B, T, seed=i).items()}
        r = step([mb], 1e-3 * (i + 1), step.plan.at(i, T) if i < 3 else DropStep.dense(i, T))
        out.append(
            (
                {k: v.detach().clone() for k, v in r.items()},
                getattr(step.opt, "grads_from", step.opt).grads,
                {k: v.clone() for k, v in step.plan.selector.state_dict().items()},
                [p.detach().clone() for p in step.model.parameters()],
            )
        )
    return out


def _assert_same(a, b, atol: float, rtol: float):
    for (ra, ga, sa, pa), (rb, gb, sb, pb) in zip(a, b):
        for k in ("loss", "acc", "grad_norm"):
            torch.testing.assert_close(ra[k], rb[k], atol=atol, rtol=rtol)
        for x, y in zip(ga, gb):
            assert (x is None) == (y is None)
            if x is not None:
                torch.testing.assert_close(x, y, atol=atol, rtol=rtol)
        # the weights at 1e-5 (1% of one step's change at these learning rates): where a second
        # moment is near zero AdamW's update amplifies the last bits by which torch's fused kernel
        # and the functional AdamW differ
        for x, y in zip(pa, pb):
            torch.testing.assert_close(x, y, atol=max(atol, 1e-5), rtol=max(rtol, 1e-4))
        assert sa.keys() == sb.keys()
        for k in sa:
            torch.testing.assert_close(sa[k], sb[k], atol=atol, rtol=rtol)


def _check(family: str, mode: str, backend: str, atol: float, rtol: float):
    torch._dynamo.reset()
    eager = _run(_step(family, "off", None)[0])
    counter = CompileCounterWithBackend(backend)
    step = _step(family, mode, counter)[0]
    compiled = _run(step)
    _assert_same(compiled, eager, atol, rtol)
    # one graph for the dropping steps, one for the dense ones (and one for AdamW's update under
    # step); a further step of each at another learning rate: no recompile
    graphs = 2 + (mode in ("step", "graphs"))
    assert counter.frame_count == graphs, counter.frame_count
    for i, dropping in ((5, True), (6, False)):
        step(
            [mlm_batch(V, B, T, seed=i)],
            1e-4 * i,
            step.plan.at(i, T) if dropping else DropStep.dense(i, T),
        )
    assert counter.frame_count == graphs, counter.frame_count


def test_compiled_step_equals_eager_aot():
    _check("bert", "step", "aot_eager", atol=1e-6, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(
    "family,mode", [("modernbert", "step"), ("bert", "forward"), ("modernbert", "forward")]
)
def test_compiled_step_equals_eager_aot_slow(family, mode):
    _check(family, mode, "aot_eager", atol=1e-6, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_compiled_step_equals_eager_inductor(family):
    _check(family, "step", "inductor", atol=1e-5, rtol=1e-4)


def test_modes():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert [resolve_mode(v, cpu) for v in (True, False, "auto", "step")] == [
        "step",
        "off",
        "off",
        "step",
    ]
    assert resolve_mode("auto", cuda) == "step" and resolve_mode("graphs", cuda) == "graphs"
    # CUDA graphs on a CPU: refused in one line (not minutes of compiling the plain step)
    with pytest.raises(ConfigError) as e:
        resolve_mode("graphs", cpu)
    assert str(e.value) == (
        "train.compile: 'graphs' captures CUDA graphs, which a cpu device does not have; use "
        "'step' (compiled) or 'off' on cpu"
    )
    with pytest.raises(ConfigError, match="train.compile: expected true, false or one of"):
        load_config("tiny", ['train.compile="fast"'])


def _plan(drop: DropConfig, steps: int | None = 20) -> DropPlan:
    return DropPlan.for_model(drop, tiny_config("bert", V), T, SPECIAL_IDS, total_steps=steps)


def test_compiled_shapes_are_the_kinds_of_step_the_drop_plan_takes():
    every_step_drops = _plan(DropConfig(method="cumulative"))
    assert compiled_shapes(every_step_drops, [T]) == 1
    assert compiled_shapes(every_step_drops, [8, 16, 32]) == 3  # a length warm-up: one per length
    assert compiled_shapes(_plan(DropConfig(method="cumulative", stage2_fraction=0.1)), [T]) == 2
    assert compiled_shapes(_plan(DropConfig(method="cumulative", dense_start_share=0.1)), [T]) == 2
    # a time budget: the phases follow the progress, a dense kind is counted
    assert compiled_shapes(_plan(DropConfig(method="cumulative"), steps=0), [T]) == 2
    assert compiled_shapes(_plan(DropConfig()), [8, T]) == 2  # dense: one kind per length
    # random-LTD: kept counts 16, 24, 32 (= T) + dense
    assert compiled_shapes(_plan(DropConfig(method="random_ltd", ltd_step=8)), [T]) == 1 + 3


@pytest.mark.parametrize("mode", ["step", "graphs"])
def test_a_fused_adamw_on_cpu_stays_eager_an_unfused_one_is_compiled(mode):
    """On CPU ATen's fused AdamW kernel is the faster update (benchmarks/compiled_cpu.py): the
    compiled step keeps it and its device-side skip flag; any other AdamW is compiled."""
    torch._dynamo.reset()
    step, model, _ = _step("bert", mode, "aot_eager")
    assert isinstance(step.compiled_opt, CompiledAdamW)  # RecordingAdamW: not fused
    fused = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, fused=True)
    eager_update = MLMStep(
        model, step.plan, fused, step.grad_clip, None, use_attention_mask=False, compile=mode,
        compile_backend="aot_eager",
    )  # fmt: skip
    assert eager_update.compiled_opt is None
    before = [p.detach().clone() for p in model.parameters()]
    out = eager_update([mlm_batch(V, B, T, seed=0)], 1e-3, step.plan.at(0, T))
    updated = [(a, p) for a, p in zip(before, model.parameters()) if p in fused.state]
    assert bool(out["finite"]) and len(updated) > len(before) // 2
    for a, p in updated:  # one eager fused update of every parameter the step reached
        assert float(fused.state[p]["step"]) == 1.0 and not torch.equal(a, p)


def _adamw_run(compiled: bool, backend=None):
    """Six AdamW steps of a small model at six learning rates, the fourth with an infinite
    gradient (skipped: torch's fused AdamW takes the flag, the compiled update selects the old
    values)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3))
    opt = torch.optim.AdamW(param_groups(model, 0.01), lr=1e-3, fused=True)
    update = CompiledAdamW(opt, "step", backend) if compiled else None
    for i in range(6):
        x = torch.randn(4, 8, generator=torch.Generator().manual_seed(i))
        model(x * (float("inf") if i == 3 else 1.0)).square().sum().backward()
        finite = torch.isfinite(torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0))
        lr = 1e-3 * (i + 1)
        if update is not None:
            update(lr, finite)
        else:
            opt.param_groups[0]["lr"] = opt.param_groups[1]["lr"] = lr
            opt.found_inf = (~finite).to(torch.float32)
            opt.step()
        opt.zero_grad(set_to_none=True)
    return model, opt


def test_compiled_adamw_equals_fused_adamw_and_skips_nonfinite_steps():
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    (me, oe), (mc, oc) = _adamw_run(False), _adamw_run(True, counter)
    assert counter.frame_count == 1  # one graph whatever the learning rate and the skipped step
    for pe, pc in zip(me.parameters(), mc.parameters()):
        torch.testing.assert_close(pc, pe, atol=1e-6, rtol=1e-5)
        for k in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(oc.state[pc][k], oe.state[pe][k], atol=1e-7, rtol=1e-5)
        assert float(oc.state[pc]["step"]) == 5.0  # the infinite step left the count alone
