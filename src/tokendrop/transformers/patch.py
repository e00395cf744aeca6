"""``apply_token_dropping`` / ``remove_token_dropping``: patch a transformers BERT or ModernBERT
instance in place (its ``forward`` and its encoder layers' ``forward``, on the instance, never the
class), as liger-kernel's ``apply_liger_kernel_to_*`` and PEFT do.

In training mode a patched MLM model selects the kept positions (:class:`TokenDroppingState`), runs
the encoder with tokendrop's schedule on transformers' own layer modules
(:mod:`tokendrop.transformers.encoders`), computes the MLM loss as the unpatched model does (on the
labelled positions only with ``sparse_prediction``), and updates the importance vector from that
forward's per-token loss.  In eval mode -- and whenever dropping is off (stage 2, random-LTD at full
length, the state disabled) -- it is the unpatched forward.  No parameter, buffer or submodule is
added, so ``state_dict`` / ``save_pretrained`` write exactly the unpatched model's tensors.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokendrop.dropping.consistency import ClsTaps, consistency_term
from tokendrop.models.families import FAMILIES
from tokendrop.models.family import FamilySpec
from tokendrop.transformers.encoders import LAYOUTS, LayerForward
from tokendrop.transformers.options import (
    DROP_OPTIONS,
    OPTIONS,
    SUPPORTED_NAMES,
    TokenDroppingError,
    check_total_steps,
    drop_config,
    unknown_option_error,
)
from tokendrop.transformers.state import TokenDroppingState, resolve_pinned, resolve_special_ids

STATE_ATTR = "_token_dropping"  # the model's __dict__ entry holding its TokenDroppingState
MIN_TRANSFORMERS = (5, 0)
_NOT_IN_A_DROPPING_FORWARD = (
    "output_attentions",
    "output_hidden_states",
    "encoder_hidden_states",
    "encoder_attention_mask",
    "past_key_values",
    "cache",
)


def _classify(model: Any) -> tuple[FamilySpec, bool]:
    """-> (family, is_mlm) of a supported transformers model (a family with an ``integration``);
    one-line error otherwise."""
    import transformers

    version = tuple(int(p) for p in transformers.__version__.split(".")[:2] if p.isdigit())
    if version < MIN_TRANSFORMERS:
        raise TokenDroppingError(
            f"apply_token_dropping: needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))}, "
            f"this is {transformers.__version__}"
        )
    for spec in FAMILIES.values():
        if spec.integration is None:
            continue
        if isinstance(model, getattr(transformers, spec.integration.mlm_class)):
            return spec, True
        if isinstance(model, getattr(transformers, spec.integration.bare_class)):
            return spec, False
    raise TokenDroppingError(
        f"apply_token_dropping: {type(model).__name__} is not supported; supported: "
        f"{', '.join(SUPPORTED_NAMES)}"
    )


def _base(model: nn.Module, family: FamilySpec, mlm: bool) -> nn.Module:
    return getattr(model, family.integration.base) if mlm else model


def _layers(base: nn.Module, family: FamilySpec) -> nn.ModuleList:
    return base.get_submodule(family.integration.layers)


def _check_config(config: Any, family: FamilySpec) -> None:
    for flag in family.integration.refused_flags:
        if getattr(config, flag, False):
            raise TokenDroppingError(
                f"apply_token_dropping: config.{flag} is true; token dropping needs a "
                "bidirectional encoder without cross-attention"
            )
    kind = getattr(config, "position_embedding_type", "absolute")
    if family.integration.absolute_positions and kind not in (None, "absolute"):
        raise TokenDroppingError(
            f"apply_token_dropping: position_embedding_type {kind!r} is not supported "
            "(absolute positions only)"
        )


def state_of(model: Any) -> TokenDroppingState:
    """The TokenDroppingState of a patched model (also through DDP/FSDP1's ``.module`` and
    ``torch.compile``'s ``._orig_mod``)."""
    seen = model
    for _ in range(8):
        st = getattr(seen, "__dict__", {}).get(STATE_ATTR)
        if st is not None:
            return st
        inner = getattr(seen, "_orig_mod", None) or getattr(seen, "module", None)
        if inner is None:
            break
        seen = inner
    raise TokenDroppingError(
        f"{type(model).__name__} is not patched: call apply_token_dropping(model, ...) first"
    )


_SIGNATURES: dict[type, inspect.Signature] = {}


def _signature(cls: type) -> inspect.Signature:
    """The class forward's signature (self included), looked up once per class."""
    if cls not in _SIGNATURES:
        _SIGNATURES[cls] = inspect.signature(cls.forward)
    return _SIGNATURES[cls]


def _output(result, return_dict: bool | None):
    return result.to_tuple() if return_dict is False else result


class ModelForward:
    """The patched model's instance ``forward`` (module docstring).  Its signature is the class
    forward's (Trainer reads it to keep dataset columns and to pass loss kwargs)."""

    def __init__(self, model: nn.Module, family: FamilySpec, mlm: bool, previous: Any):
        self.model = model
        self.family = family
        self.mlm = mlm
        self.previous = previous
        self.active = True

    @property
    def __signature__(self) -> inspect.Signature:
        sig = _signature(type(self.model))
        return sig.replace(parameters=list(sig.parameters.values())[1:])

    def original(self, *args, **kwargs):
        if self.previous is not None:
            return self.previous(*args, **kwargs)
        return type(self.model).forward(self.model, *args, **kwargs)

    def __call__(self, *args, **kwargs):
        model = self.model
        st = model.__dict__.get(STATE_ATTR)
        if st is not None and model.training:
            st.layer_work = 1.0  # until a selection drops rows
        if not self.active or st is None or not model.training or not st.dropping_now():
            return self.original(*args, **kwargs)
        a = _signature(type(model)).bind(model, *args, **kwargs).arguments
        extra = dict(a.pop("kwargs", {}))
        a.pop("self", None)
        for k in _NOT_IN_A_DROPPING_FORWARD:
            if any(v is not None and v is not False for v in (a.get(k), extra.get(k))):
                raise TokenDroppingError(
                    f"token dropping: {k} is not available in a training forward that drops "
                    "tokens (the half layers see fewer rows); run it in eval mode"
                )
        if isinstance(a.get("attention_mask"), dict):
            raise TokenDroppingError(
                "token dropping: attention_mask must be the 2D padding mask, not a per-layer dict"
            )
        input_ids = a.get("input_ids")
        if input_ids is None and st.drop.variant_row.selects:
            raise TokenDroppingError(
                "token dropping selects positions by token id: pass input_ids (not inputs_embeds)"
            )
        labels = a.get("labels")
        active, keep = st.select(input_ids, labels) if input_ids is not None else (True, None)
        if not active:  # random-LTD at full length: the dense model
            st.layer_work = 1.0
            return self.original(*args, **kwargs)
        if input_ids is not None:  # what transformers' 6 N D estimate of this forward overcounts
            st.count_saved_flops(model, input_ids.numel())
        return_dict = extra.pop("return_dict", None)
        if not self.mlm:
            return _output(self._bare(st, keep, a), return_dict)
        return _output(self._mlm(st, keep, a, labels, extra), return_dict)

    # -- encoders -------------------------------------------------------------------------------

    def _encode(self, st: TokenDroppingState, keep: Tensor | None, a: dict[str, Any]) -> Tensor:
        base = _base(self.model, self.family, self.mlm)
        names = ("input_ids", "attention_mask", "position_ids", "inputs_embeds")
        kw = {k: a.get(k) for k in names + (("token_type_ids",) if self.family.token_types else ())}
        encode, _ = LAYOUTS[self.family.integration.layout]
        return encode(base, st.span, keep, **kw)

    def _bare(self, st: TokenDroppingState, keep: Tensor | None, a: dict[str, Any]):
        from transformers.modeling_outputs import (
            BaseModelOutput,
            BaseModelOutputWithPoolingAndCrossAttentions,
        )

        h = self._encode(st, keep, a)
        if self.family.integration.pooler:
            pooled = self.model.pooler(h) if self.model.pooler is not None else None
            return BaseModelOutputWithPoolingAndCrossAttentions(
                last_hidden_state=h, pooler_output=pooled
            )
        return BaseModelOutput(last_hidden_state=h)

    # -- the MLM model --------------------------------------------------------------------------

    def _head(self, h: Tensor) -> Tensor:
        for name in self.family.integration.head:
            h = getattr(self.model, name)(h)
        return h

    def _loss(self, logits: Tensor, labels: Tensor, extra: dict[str, Any]) -> Tensor:
        """The unpatched model's MLM loss (BERT: mean cross-entropy over labelled positions;
        ModernBERT: its ``loss_function``, which honours ``num_items_in_batch``)."""
        m = self.model
        v = m.config.vocab_size
        if not self.family.integration.model_loss:
            return F.cross_entropy(logits.view(-1, v), labels.view(-1))
        return m.loss_function(logits, labels, vocab_size=v, **extra)

    def _mlm(
        self,
        st: TokenDroppingState,
        keep: Tensor | None,
        a: dict[str, Any],
        labels: Tensor | None,
        extra: dict[str, Any],
    ):
        from transformers.modeling_outputs import MaskedLMOutput

        sctd = labels is not None and st.consistency_now()
        taps = ClsTaps(_layers(_base(self.model, self.family, True), self.family)) if sctd else None
        try:
            if taps is not None:
                with taps.record() as dropped:
                    h = self._encode(st, keep, a)
            else:
                h = self._encode(st, keep, a)
            sparse = labels is not None and (
                st.sparse_prediction or getattr(self.model, "sparse_prediction", False)
            )
            # the head on the labelled positions only (as ModernBERT's sparse_prediction)
            if sparse:
                flat = labels.reshape(-1)
                sel = flat != -100
                h = h.reshape(flat.shape[0], -1)[sel]
                labels = flat[sel]
            logits = self._head(h)
            loss = None
            if labels is not None:
                loss = self._loss(logits, labels, extra)
                with torch.no_grad():  # the per-token loss of this forward -> the importance vector
                    nll = F.cross_entropy(
                        logits.detach().float().reshape(-1, logits.shape[-1]),
                        labels.reshape(-1),
                        reduction="none",
                        ignore_index=-100,
                    )
                st.update(labels.reshape(-1), nll)
                if taps is not None:
                    loss = loss + st.drop.consistency_weight * self._consistency(
                        taps, dropped, a, labels, extra
                    )
        finally:
            if taps is not None:
                taps.remove()
        return MaskedLMOutput(loss=loss, logits=logits)

    def _consistency(
        self,
        taps: ClsTaps,
        dropped: list[Tensor],
        a: dict[str, Any],
        labels: Tensor,
        extra: dict[str, Any],
    ) -> Tensor:
        """ScTD (docs/design.md §2.11): the dense encoder pass of the same batch (training mode,
        gradients flowing, no head), the [CLS] KL of the last two layers, normalised as the loss
        is."""
        base = _base(self.model, self.family, True)
        kw = {
            k: a.get(k)
            for k in ("attention_mask", "position_ids", "inputs_embeds")
            if a.get(k) is not None
        }
        if self.family.token_types and a.get("token_type_ids") is not None:
            kw["token_type_ids"] = a["token_type_ids"]
        with taps.record() as dense:
            base(a.get("input_ids"), **kw)
        n = extra.get("num_items_in_batch") if self.family.integration.model_loss else None
        if n is None:
            n = (labels != -100).sum()
        return consistency_term(dropped, dense) / n


def apply_token_dropping(model: nn.Module, **options: Any) -> nn.Module:
    """Patch ``model`` (transformers' BertForMaskedLM, BertModel, ModernBertForMaskedLM or
    ModernBertModel) in place for token dropping in training mode; returns it.

    Options: tokendrop's ``[drop]`` fields (``method`` -- default ``cumulative``, the paper's --,
    ``variant``, ``rate``, ``start``, ``end``, ``beta``, ``init_score``, ``half_random_frac``,
    ``keep_mlm_targets``, ``pinned_tokens``, ``stage2_fraction``, ``ltd_*``, ``consistency_*``;
    docs/configuration.md) and ``tokenizer`` (its [CLS]/[SEP]/[MASK]/[PAD] ids are always kept /
    dropped first), ``special_ids`` (the same as a dict), ``counts`` (per-id corpus counts, method
    ``frequency``), ``seed`` (the selector's generator), ``total_steps`` (the run's length, for
    random-LTD's ramp and ``stage2_fraction``; TokenDroppingCallback sets it), ``sparse_prediction``
    (default True: the MLM head runs on the labelled positions only in a training forward, whose
    logits are then (labelled positions, V)).  docs/transformers.md has the details."""
    family, mlm = _classify(model)
    for name in options:
        if name not in OPTIONS:
            raise unknown_option_error(name)
    base = _base(model, family, mlm)
    for m in (model, base):
        if STATE_ATTR in m.__dict__:
            raise TokenDroppingError(
                f"apply_token_dropping: this {type(model).__name__} is already patched; call "
                "remove_token_dropping(model) first to patch it with other options"
            )
    _check_config(model.config, family)
    layers = _layers(base, family)
    if any(isinstance(layer.__dict__.get("forward"), LayerForward) for layer in layers):
        raise TokenDroppingError(
            f"apply_token_dropping: this {type(model).__name__} is already patched (its encoder "
            "layers are, through the model that holds it); remove_token_dropping that model first"
        )
    drop = drop_config({k: v for k, v in options.items() if k in DROP_OPTIONS}, len(layers))
    sparse = options.get("sparse_prediction", True)
    if not isinstance(sparse, bool):
        raise TokenDroppingError(
            f"apply_token_dropping: sparse_prediction must be True or False, got {sparse!r}"
        )
    seed = options.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TokenDroppingError(f"apply_token_dropping: seed must be an integer, got {seed!r}")
    cfg = model.config
    tokenizer = options.get("tokenizer")
    special = resolve_special_ids(drop, cfg, tokenizer, options.get("special_ids"), cfg.vocab_size)
    state = TokenDroppingState(
        drop,
        family.name,
        len(layers),
        cfg.vocab_size,
        cfg.max_position_embeddings,
        special,
        resolve_pinned(drop, tokenizer),
        options.get("counts"),
        seed,
        check_total_steps(options.get("total_steps")),
        sparse,
    )
    _, runner = LAYOUTS[family.integration.layout]
    for layer in layers:
        layer.__dict__["forward"] = LayerForward(layer, runner, layer.__dict__.get("forward"))
    model.__dict__["forward"] = ModelForward(model, family, mlm, model.__dict__.get("forward"))
    model.__dict__[STATE_ATTR] = state
    return model


def remove_token_dropping(model: nn.Module) -> nn.Module:
    """Undo :func:`apply_token_dropping` in place (the model is the unpatched one again; its weights
    are untouched); returns it.  Where another library has wrapped the patched forward since (e.g.
    accelerate's mixed precision), that wrapper stays and calls the unpatched forward."""
    family, mlm = _classify(model)
    if STATE_ATTR not in model.__dict__:
        raise TokenDroppingError(
            f"remove_token_dropping: this {type(model).__name__} is not patched"
        )
    fwd = _find(model.__dict__, ModelForward)
    if fwd is not None:
        fwd.active = False
        if model.__dict__.get("forward") is fwd:
            if fwd.previous is None:
                del model.__dict__["forward"]
            else:
                model.__dict__["forward"] = fwd.previous
    for layer in _layers(_base(model, family, mlm), family):
        lf = layer.__dict__.get("forward")
        if isinstance(lf, LayerForward):
            if lf.previous is None:
                del layer.__dict__["forward"]
            else:
                layer.__dict__["forward"] = lf.previous
    del model.__dict__[STATE_ATTR]
    return model


def _find(d: dict, kind: type):
    """Our forward object in a module's __dict__: ``forward`` itself or accelerate's kept
    original."""
    for key in ("forward", "_original_forward"):
        v = d.get(key)
        if isinstance(v, kind):
            return v
    return None


__all__ = ["ModelForward", "apply_token_dropping", "remove_token_dropping", "state_of"]
