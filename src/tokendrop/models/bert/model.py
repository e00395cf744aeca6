"""BERT with token dropping (Hou et al., "Token Dropping for Efficient BERT Pretraining", ACL 2022).

The network is exactly ``transformers.BertForMaskedLM`` (post-LN, learned absolute positions,
token types, erf-GELU, LayerNorm eps 1e-12, tied decoder + its own bias); ``tokendrop.models.hf``
maps every parameter 1:1 onto the Hugging Face key names.  Departures, all numerically neutral:

* Q and K/V are separate projections (``q``: d->d, ``kv``: d->2d) so a half layer can project only
  the kept rows as queries but all rows as keys/values.  HF's separate key/value weights are
  concatenated on import and split on export.
* Attention is ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on GPU) through
  :func:`tokendrop.models.attention.attend` (per-document masks: FlexAttention on CUDA, §2.9 of
  docs/design.md).
* The MLM head runs only on the gathered prediction slots (B, P), not on all T positions.
* The encoder always has a pooler (no NSP is trained; it is exported so that
  ``BertForSequenceClassification`` finds it).

Token dropping (docs/design.md §2.2) happens only in training mode and only when the caller passes
``keep_idx`` (or ``drop_active=True`` for the ``avg`` variant): the shared encoder forward
(:class:`tokendrop.models.encoder.EncoderModel`) hands the layers to
:func:`tokendrop.dropping.engine.run_layers`, which decides which rows each layer sees.

Shapes: B batch, T sequence, M kept rows, P prediction slots, d hidden, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tokendrop.config import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.models.attention import attend
from tokendrop.models.encoder import EncoderModel
from tokendrop.models.masked_lm import MaskedLM, check_document_attention
from tokendrop.models.norm import LayerNorm


class Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(
            cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id
        )
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, input_ids: Tensor, token_type_ids: Tensor | None) -> Tensor:
        t = input_ids.shape[1]
        x = self.word_embeddings(input_ids) + self.position_embeddings.weight[:t]
        if token_type_ids is None:
            x = x + self.token_type_embeddings.weight[0]
        else:
            x = x + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.norm(x))  # (B, T, d)


class Attention(nn.Module):
    """Multi-head self-attention + output projection + residual + post-LayerNorm."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        d = cfg.hidden_size
        self.num_heads = cfg.num_heads
        self.q = nn.Linear(d, d)
        self.kv = nn.Linear(d, 2 * d)
        self.o = nn.Linear(d, d)
        self.norm = LayerNorm(d, eps=cfg.layer_norm_eps)
        self.attn_dropout = cfg.attention_dropout
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: Tensor, kv_in: Tensor | None, attn_bias: Tensor | None) -> Tensor:
        # x: (B, n, d) query rows; kv_in: (B, N, d) key/value rows, None = x; attn_bias: a MaskCache
        # mask
        b, n, d = x.shape
        h = self.num_heads
        # one projection: q and kv weights concatenated (3 launches less per layer)
        if kv_in is None:
            w = torch.cat([self.q.weight, self.kv.weight])
            bias = torch.cat([self.q.bias, self.kv.bias])
            # 3 x (B, h, n, dh)
            q, k, v = F.linear(x, w, bias).view(b, n, 3, h, d // h).permute(2, 0, 3, 1, 4)
        else:
            q = self.q(x).view(b, n, h, d // h).transpose(1, 2)  # (B, h, n, dh)
            # 2 x (B, h, N, dh)
            k, v = self.kv(kv_in).view(b, -1, 2, h, d // h).permute(2, 0, 3, 1, 4)
        y = attend(q, k, v, attn_bias, self.attn_dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(b, n, d)
        return self.norm(x + self.dropout(self.o(y)))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.norm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x + self.dropout(self.down(F.gelu(self.up(x)))))


class Layer(nn.Module):
    window = None  # every layer attends over the whole row

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = Attention(cfg)
        self.ffn = FeedForward(cfg)

    def forward(
        self, x: Tensor, kv_in: Tensor | None = None, attn_bias: Tensor | None = None
    ) -> Tensor:
        return self.ffn(self.attn(x, kv_in, attn_bias))


class Encoder(nn.Module):
    """The layers, as ``encoder.layers`` (BERT's parameter names); :class:`BertModel` runs them."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_layers)])


class Pooler(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.dense(x[:, 0]))  # (B, d) from [CLS]


class BertModel(EncoderModel):
    """Embeddings + encoder + pooler, run by the shared forward
    (:class:`tokendrop.models.encoder.EncoderModel`): no final norm (post-LN), positions learned in
    the embeddings; the pooler is the classifier's."""

    def __init__(self, cfg: ModelConfig, drop: DropConfig | None = None):
        super().__init__(cfg, drop)
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = Pooler(cfg)

    @property
    def layers(self) -> nn.ModuleList:
        return self.encoder.layers


def init_weights(module: nn.Module, std: float) -> None:
    """BERT's initialisation: N(0, std) weights, zero biases, unit LayerNorm."""
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


class MLMHead(nn.Module):
    """dense + GELU + LayerNorm, then the decoder tied to the word embeddings plus its own bias."""

    def __init__(self, cfg: ModelConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.norm = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.word_embeddings = [word_embeddings]  # a list: tied, not a second registered copy

    def forward(self, h: Tensor) -> Tensor:
        h = self.norm(F.gelu(self.dense(h)))
        return F.linear(h, self.word_embeddings[0].weight, self.bias)  # (..., V)


class BertForMaskedLM(MaskedLM):
    """BERT + MLM head evaluated on the prediction slots only."""

    def __init__(self, cfg: ModelConfig, drop: DropConfig | None = None):
        super().__init__()
        self.bert = BertModel(cfg, drop)
        self.mlm = MLMHead(cfg, self.bert.embeddings.word_embeddings)
        self.document_attention = check_document_attention(cfg)
        init_weights(self, cfg.initializer_range)

    @property
    def config(self) -> ModelConfig:
        return self.bert.config

    @property
    def encoder(self) -> BertModel:
        return self.bert

    def head_logits(self, h: Tensor) -> Tensor:
        return self.mlm(h)

    def head_parameters(self) -> list[nn.Parameter]:
        return [
            self.mlm.dense.weight,
            self.mlm.dense.bias,
            self.mlm.norm.weight,
            self.mlm.norm.bias,
            self.mlm.bias,
        ]


class BertForSequenceClassification(nn.Module):
    """Pooler ([CLS], tanh) + dropout + linear classifier, as ``transformers``."""

    task = "classification"

    def __init__(self, cfg: ModelConfig, num_labels: int = 2):
        super().__init__()
        self.bert = BertModel(cfg)
        self.dropout = nn.Dropout(cfg.hidden_dropout)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)
        self.num_labels = num_labels
        init_weights(self, cfg.initializer_range)

    @property
    def config(self) -> ModelConfig:
        return self.bert.config

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> Tensor:
        h = self.bert(input_ids, attention_mask, token_type_ids)
        return self.classifier(self.dropout(self.bert.pooler(h)))  # (B, num_labels)


class BertForQuestionAnswering(nn.Module):
    """Span QA: a linear layer to start/end logits on every position, as ``transformers``."""

    task = "qa"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.bert = BertModel(cfg)
        self.qa_outputs = nn.Linear(cfg.hidden_size, 2)
        init_weights(self, cfg.initializer_range)

    @property
    def config(self) -> ModelConfig:
        return self.bert.config

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
    ) -> tuple[Tensor, Tensor]:
        h = self.bert(input_ids, attention_mask, token_type_ids)
        start, end = self.qa_outputs(h).unbind(-1)
        return start, end  # (B, T) each


# task -> this family's class (``tokendrop.models.families.FAMILIES`` registers it)
CLASSES: dict[str, type[nn.Module]] = {
    "mlm": BertForMaskedLM,
    "classification": BertForSequenceClassification,
    "qa": BertForQuestionAnswering,
}

__all__ = [
    "CLASSES",
    "BertModel",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertForQuestionAnswering",
]
