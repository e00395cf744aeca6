"""A ModernBERT-architecture encoder with token dropping (``model.family = "modernbert"``).

The network is exactly ``transformers.ModernBertForMaskedLM`` (answerdotai/ModernBERT):
pre-LayerNorm layers without biases (LayerNorm biases per ``model.norm_bias``), the first layer's
attention norm an identity, a fused ``Wqkv`` projection, rotary positions with one base for the
global layers and another for the sliding-window layers, GeGLU feed-forward (``Wi``: d -> 2 *
intermediate, GELU on the first half times the second), a final norm, and the MLM head (dense,
GELU, norm) whose decoder is tied to the token embeddings and has its own bias.  Parameter names
are Hugging Face's (``model.layers.3.attn.Wqkv.weight``), so ``tokendrop.models.modernbert.hf``
maps a state dict 1:1 (only the tied ``decoder.weight`` is implicit).

The forward signature and outputs are :class:`tokendrop.models.bert.model.BertForMaskedLM`'s
(``token_type_ids`` is accepted and ignored), and dropping follows the same schedule
(:func:`tokendrop.dropping.engine.run_layers`, docs/design.md §2.2) with positions respected:

* a kept row keeps its original rotary position: positions (and the document ids) are gathered with
  the rows, and the cos/sin are computed from the gathered positions;
* sliding-window layers inside the span measure the window in original positions, so a kept token
  sees exactly the kept keys it would see densely within ``local_attention // 2`` positions;
* the first half layer uses all T rows as keys/values; the merge scatters the kept rows back before
  layer ``end``.

Per-document attention (``model.document_attention``, on by default for this family, MLM only):
every token attends only within its own document of the packed row
(:func:`tokendrop.models.masked_lm.document_ids`), and rotary positions restart at 0 in every
document, as ModernBERT's unpadded training does (cu_seqlens); the task models (classification, QA)
attend over the whole (padded) input as ``transformers`` does.  Attention runs through
:func:`tokendrop.models.attention.attend` with the masks of a
:class:`tokendrop.models.attention.MaskCache` (none for global layers without padding or documents;
sliding windows as bands, or FlexAttention block masks on CUDA: docs/design.md §2.9)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokendrop.config import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.models.attention import attend
from tokendrop.models.encoder import EncoderModel
from tokendrop.models.masked_lm import MaskedLM, check_document_attention
from tokendrop.models.norm import LayerNorm
from tokendrop.models.rotary import Rotary, apply_rotary

__all__ = [
    "CLASSES",
    "ModernBertModel",
    "ModernBertForMaskedLM",
    "ModernBertForSequenceClassification",
    "ModernBertForQuestionAnswering",
]


class ModernEmbeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok_embeddings = nn.Embedding(
            cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id
        )
        self.norm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=cfg.norm_bias)
        self.drop = nn.Dropout(cfg.hidden_dropout)

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,  # noqa: ARG002 - ModernBERT has no token types
    ) -> Tensor:
        return self.drop(self.norm(self.tok_embeddings(input_ids)))


class ModernAttention(nn.Module):
    """Fused Wqkv (no bias), rotary positions, SDPA, Wo (no bias).  Queries and keys/values may be
    different rows (a half layer's kept rows vs all rows): the weight is sliced, not duplicated."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.hidden_size
        self.num_heads = cfg.num_heads
        self.Wqkv = nn.Linear(d, 3 * d, bias=False)
        self.Wo = nn.Linear(d, d, bias=False)
        self.dropout_p = cfg.attention_dropout
        self.out_drop = nn.Dropout(cfg.attention_dropout)

    def forward(
        self,
        x: Tensor,
        kv_in: Tensor | None,
        bias: Tensor | None,
        rope_q: tuple[Tensor, Tensor],
        rope_k: tuple[Tensor, Tensor],
    ) -> Tensor:
        # x: (B, n, d) normed query rows; kv_in: (B, N, d) normed key/value rows or None (= x)
        b, n, d = x.shape
        h = self.num_heads
        if kv_in is None:
            # 3 x (B, h, n, dh)
            q, k, v = self.Wqkv(x).view(b, n, 3, h, d // h).permute(2, 0, 3, 1, 4)
        else:
            w = self.Wqkv.weight
            q = F.linear(x, w[:d]).view(b, n, h, d // h).transpose(1, 2)
            k, v = F.linear(kv_in, w[d:]).view(b, -1, 2, h, d // h).permute(2, 0, 3, 1, 4)
        q = apply_rotary(q, *rope_q)
        k = apply_rotary(k, *rope_k)
        y = attend(q, k, v, bias, self.dropout_p if self.training else 0.0)
        return self.out_drop(self.Wo(y.transpose(1, 2).reshape(b, n, d)))


class ModernMLP(nn.Module):
    """GeGLU: Wi d -> 2 * intermediate, GELU(first half) * second half, Wo (no biases)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.Wi = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.drop = nn.Dropout(cfg.hidden_dropout)
        self.Wo = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        a, gate = self.Wi(x).chunk(2, dim=-1)
        return self.Wo(self.drop(F.gelu(a) * gate))


class ModernLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, index: int, layer_type: str):
        super().__init__()
        d = cfg.hidden_size
        self.attn_norm = (
            nn.Identity()
            if index == 0
            else LayerNorm(d, eps=cfg.layer_norm_eps, bias=cfg.norm_bias)
        )
        self.attn = ModernAttention(cfg)
        self.mlp_norm = LayerNorm(d, eps=cfg.layer_norm_eps, bias=cfg.norm_bias)
        self.mlp = ModernMLP(cfg)
        self.sliding = layer_type == "sliding_attention"
        # how far it attends, in original positions (None: the whole row)
        self.window = cfg.local_attention // 2 if self.sliding else None

    def forward(
        self, x: Tensor, kv_in: Tensor | None, attn_bias: Tensor | None, rope_q, rope_k
    ) -> Tensor:
        kv = None if kv_in is None else self.attn_norm(kv_in)
        x = x + self.attn(self.attn_norm(x), kv, attn_bias, rope_q, rope_k)
        return x + self.mlp(self.mlp_norm(x))


class ModernBertModel(EncoderModel):
    """Embeddings + layers + final norm, run by the shared forward
    (:class:`tokendrop.models.encoder.EncoderModel`); rotary positions of one base for the global
    layers and another for the sliding-window ones."""

    def __init__(self, cfg: ModelConfig, drop: DropConfig | None = None):
        super().__init__(cfg, drop)
        self.embeddings = ModernEmbeddings(cfg)
        types = cfg.resolved_layer_types()
        self.layers = nn.ModuleList([ModernLayer(cfg, i, t) for i, t in enumerate(types)])
        self.final_norm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=cfg.norm_bias)
        dh = cfg.hidden_size // cfg.num_heads
        self.rotary = Rotary(dh, cfg.global_rope_theta)
        self.rotary_local = Rotary(dh, cfg.local_rope_theta)


def init_modern_weights(module: nn.Module, cfg: ModelConfig) -> None:
    """ModernBERT's initialisation: truncated normal (cutoff 2 std); std = initializer_range for
    inputs (Wqkv, Wi, embeddings), / sqrt(2 L) for outputs (Wo, head dense); norms 1/0; biases 0."""
    std_in = cfg.initializer_range
    std_out = cfg.initializer_range / math.sqrt(2.0 * cfg.num_layers)

    def tn(w: Tensor, std: float) -> None:
        nn.init.trunc_normal_(w, mean=0.0, std=std, a=-2 * std, b=2 * std)

    for name, m in module.named_modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            tn(m.weight, std_in)
        elif isinstance(m, nn.Linear):
            leaf = name.rsplit(".", 1)[-1]
            tn(m.weight, std_out if leaf in ("Wo", "dense") else std_in)
            if m.bias is not None:
                nn.init.zeros_(m.bias)


class PredictionHead(nn.Module):
    """dense (no bias) + GELU + norm, as transformers' ModernBertPredictionHead."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.norm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps, bias=cfg.norm_bias)

    def forward(self, h: Tensor) -> Tensor:
        return self.norm(F.gelu(self.dense(h)))


class TiedDecoder(nn.Module):
    """The decoder: the token embeddings (tied, not a second registered copy) plus its own bias."""

    def __init__(self, cfg: ModelConfig, embeddings: nn.Embedding):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.embeddings = [embeddings]

    @property
    def weight(self) -> Tensor:
        return self.embeddings[0].weight

    def forward(self, h: Tensor) -> Tensor:
        return F.linear(h, self.embeddings[0].weight, self.bias)


class ModernBertForMaskedLM(MaskedLM):
    """ModernBERT + MLM head on the prediction slots only; forward and loss of
    ``tokendrop.models.masked_lm.MaskedLM``."""

    def __init__(self, cfg: ModelConfig, drop: DropConfig | None = None):
        super().__init__()
        self.model = ModernBertModel(cfg, drop)
        self.head = PredictionHead(cfg)
        self.decoder = TiedDecoder(cfg, self.model.embeddings.tok_embeddings)
        self.document_attention = check_document_attention(cfg)
        init_modern_weights(self, cfg)

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    @property
    def encoder(self) -> ModernBertModel:
        """The encoder (``BertForMaskedLM.bert``'s counterpart)."""
        return self.model

    def head_logits(self, h: Tensor) -> Tensor:
        return self.decoder(self.head(h))

    def head_parameters(self) -> list[nn.Parameter]:
        return [*self.head.parameters(), self.decoder.bias]


class _ModernTaskModel(nn.Module):
    """The task models' shared part, as ``transformers``: encoder, then head (dense + GELU + norm)
    -> dropout -> classifier (d -> ``n_out``), the classifier initialised
    truncated-normal(d^-1/2)."""

    def __init__(self, cfg: ModelConfig, n_out: int):
        super().__init__()
        self.model = ModernBertModel(cfg)
        self.head = PredictionHead(cfg)
        self.drop = nn.Dropout(cfg.hidden_dropout)
        self.classifier = nn.Linear(cfg.hidden_size, n_out)
        init_modern_weights(self, cfg)
        nn.init.trunc_normal_(
            self.classifier.weight,
            std=cfg.hidden_size**-0.5,
            a=-2 * cfg.hidden_size**-0.5,
            b=2 * cfg.hidden_size**-0.5,
        )

    @property
    def config(self) -> ModelConfig:
        return self.model.config

    def scores(self, h: Tensor) -> Tensor:
        """(..., d) hidden states -> (..., n_out)."""
        return self.classifier(self.drop(self.head(h)))


class ModernBertForSequenceClassification(_ModernTaskModel):
    """Pooled hidden state -> head -> dropout -> classifier; pooled = the [CLS] state
    (``model.classifier_pooling = "cls"``) or the mean over the non-padding tokens ("mean"), as
    transformers' ModernBertForSequenceClassification."""

    task = "classification"

    def __init__(self, cfg: ModelConfig, num_labels: int = 2):
        super().__init__(cfg, num_labels)
        self.num_labels = num_labels

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        h = self.model(input_ids, attention_mask, token_type_ids)  # (B, T, d)
        if self.config.classifier_pooling == "mean":
            m = torch.ones_like(input_ids) if attention_mask is None else attention_mask
            m = m.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(dim=1) / m.sum(dim=1)
        else:
            pooled = h[:, 0]
        return self.scores(pooled)  # (B, num_labels)


class ModernBertForQuestionAnswering(_ModernTaskModel):
    """Span QA: head -> dropout -> classifier (d -> 2) on every position."""

    task = "qa"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, 2)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        h = self.model(input_ids, attention_mask, token_type_ids)
        start, end = self.scores(h).unbind(-1)
        return start, end  # (B, T) each


# task -> this family's class (``tokendrop.models.families.FAMILIES`` registers it)
CLASSES: dict[str, type[nn.Module]] = {
    "mlm": ModernBertForMaskedLM,
    "classification": ModernBertForSequenceClassification,
    "qa": ModernBertForQuestionAnswering,
}
