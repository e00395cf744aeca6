"""BERT with token dropping (Hou et al., "Token Dropping for Efficient BERT Pretraining", ACL 2022).

The network is exactly ``transformers.BertForMaskedLM`` (post-LN, learned absolute positions,
token types, erf-GELU, LayerNorm eps 1e-12, tied decoder + its own bias); ``tokendrop.hf`` maps
every parameter 1:1 onto the Hugging Face key names.  Departures, all numerically neutral:

* Q and K/V are separate projections (``q``: d->d, ``kv``: d->2d) so a half layer can project only
  the kept rows as queries but all rows as keys/values.  HF's separate key/value weights are
  concatenated on import and split on export.
* Attention is ``F.scaled_dot_product_attention`` (flash / memory-efficient kernels on GPU) through
  :func:`tokendrop.attention.attend` (per-document masks: FlexAttention on CUDA, §2.9 of docs/design.md).
* The MLM head runs only on the gathered prediction slots (B, P), not on all T positions.
* The encoder always has a pooler (no NSP is trained; it is exported so that
  ``BertForSequenceClassification`` finds it).

Token dropping (docs/design.md §2.2) happens only in training mode and only when the caller passes
``keep_idx`` (or ``drop_active=True`` for the ``avg`` variant): layers ``[start, end)`` are "half"
layers.  Separation gathers the kept rows; the first half layer uses them as queries and all T
rows as keys/values; the merge scatters the kept rows back, dropped rows keeping the state they
had when entering the span.  ``pass``: every half layer sees kept rows (current) plus dropped rows
(frozen at span entry) as keys/values.  ``avg``: 2:1 average pooling instead of selection and an
upsample-and-add at the merge (Funnel-Transformer style).  ``layer_rearranged``: ``end = L``.

Shapes: B batch, T sequence, M kept rows, P prediction slots, d hidden, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import MaskCache, attend, use_flex
from .config import ConfigError, DropConfig, ModelConfig


# ----------------------------------------------------------------------------------------------
# gather / scatter (index-based, as MosaicBERT's bert_padding.py)


def flat_index(keep_idx: Tensor, seq_len: int) -> Tensor:
    """(B, M) positions -> (B*M,) row indices into a (B*T, ...) flattened tensor."""
    offsets = torch.arange(keep_idx.shape[0], device=keep_idx.device).unsqueeze(1) * seq_len
    return (keep_idx + offsets).reshape(-1)


def gather_rows(x: Tensor, keep_idx: Tensor) -> Tensor:
    """x (B, T, ...) , keep_idx (B, M) -> (B, M, ...): x[b, keep_idx[b, j]]."""
    b, t = x.shape[:2]
    rows = x.reshape(b * t, *x.shape[2:]).index_select(0, flat_index(keep_idx, t))
    return rows.reshape(b, keep_idx.shape[1], *x.shape[2:])


def scatter_rows(base: Tensor, rows: Tensor, keep_idx: Tensor) -> Tensor:
    """Out-of-place merge: a copy of base (B, T, ...) with base[b, keep_idx[b, j]] = rows[b, j].

    Gradient w.r.t. ``base`` is zero on the overwritten rows; w.r.t. ``rows`` it is gathered.
    """
    b, t = base.shape[:2]
    flat = base.reshape(b * t, *base.shape[2:])
    src = rows.reshape(-1, *rows.shape[2:])
    return flat.index_copy(0, flat_index(keep_idx, t), src).reshape(base.shape)


def _pairs(t: Tensor) -> Tensor:
    """(B, T, ...) -> (B, ceil(T/2), 2, ...): rows (2i, 2i+1); an odd last row paired with itself."""
    if t.shape[1] % 2:
        t = torch.cat([t, t[:, -1:]], dim=1)
    return t.reshape(t.shape[0], -1, 2, *t.shape[2:])


def avg_pool_rows(x: Tensor, valid: Tensor | None = None) -> Tensor:
    """(B, T, d) -> (B, ceil(T/2), d): mean of rows (2i, 2i+1); an odd last row stays as is.

    ``valid`` (B, T) 1/0 (padding): the mean of a pair's *valid* rows -- a (real, [PAD]) pair pools
    to its real row alone, exactly as that row would pool at the end of an unpadded odd-length row,
    so padding never enters a real row (docs/design.md §2.2); a pair of two [PAD] rows is their mean."""
    pairs = _pairs(x)  # (B, T', 2, d)
    mean = pairs.mean(dim=2)
    if valid is None:
        return mean
    v = _pairs(valid).to(torch.bool)  # (B, T', 2)
    one = torch.where(v[:, :, :1], pairs[:, :, 0], pairs[:, :, 1])  # the pair's valid row (when one is)
    return torch.where((v[:, :, 0] == v[:, :, 1])[:, :, None], mean, one)


def avg_pool_mask(mask: Tensor) -> Tensor:
    """(B, T) 1/0 attention mask -> (B, ceil(T/2)): a pooled row is valid if either of its rows is
    (max pooling: with :func:`avg_pool_rows`'s validity weights such a row is a real row's state;
    docs/design.md §2.2)."""
    return _pairs(mask).amax(dim=2)


def first_valid_row(t: Tensor, valid: Tensor | None) -> Tensor:
    """(B or 1, T) per-row values -> (B or 1, ceil(T/2)): each pair's first row's value, or its
    second's when only that one is valid (``valid`` (B, T) 1/0 or None)."""
    if valid is None:
        return t[:, ::2]
    v = _pairs(valid).to(torch.bool)
    p = _pairs(t.expand(valid.shape[0], -1))
    return torch.where(v[:, :, 0] | ~v[:, :, 1], p[:, :, 0], p[:, :, 1])


def upsample_rows(x: Tensor, seq_len: int) -> Tensor:
    """(B, ceil(T/2), d) -> (B, T, d): each row repeated twice."""
    return x.repeat_interleave(2, dim=1)[:, :seq_len]


# ----------------------------------------------------------------------------------------------
# modules


class Embeddings(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=cfg.pad_token_id)
        self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
        self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
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
        self.norm = nn.LayerNorm(d, eps=cfg.layer_norm_eps)
        self.attn_dropout = cfg.attention_dropout
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: Tensor, kv_in: Tensor, attn_bias: Tensor | None) -> Tensor:
        # x: (B, n, d) query rows; kv_in: (B, N, d) key/value rows; attn_bias: (B, 1, 1, N) or None
        b, n, d = x.shape
        h = self.num_heads
        q = self.q(x).view(b, n, h, d // h).transpose(1, 2)  # (B, h, n, dh)
        k, v = self.kv(kv_in).view(b, -1, 2, h, d // h).permute(2, 0, 3, 1, 4)  # 2 x (B, h, N, dh)
        y = attend(q, k, v, attn_bias, self.attn_dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(b, n, d)
        return self.norm(x + self.dropout(self.o(y)))


class FeedForward(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.up = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size)
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x + self.dropout(self.down(F.gelu(self.up(x)))))


class Layer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attn = Attention(cfg)
        self.ffn = FeedForward(cfg)

    def forward(self, x: Tensor, kv_in: Tensor | None = None, attn_bias: Tensor | None = None) -> Tensor:
        return self.ffn(self.attn(x, x if kv_in is None else kv_in, attn_bias))


def document_ids(input_ids: Tensor, sep_id: int, pad_id: int) -> Tensor:
    """(B, T) packed rows -> (B, T) document index within each row; padding gets -1.

    Prepared rows concatenate documents with exactly one [SEP] between consecutive ones and special
    ids never occur inside documents (tokendrop.data.prepare), so a row's documents are the runs
    ending at each [SEP]: the [SEP] belongs to the document it closes (a row's leading [CLS] to its
    first document)."""
    is_sep = (input_ids == sep_id).to(torch.long)
    doc = torch.cumsum(is_sep, dim=1) - is_sep
    return doc.masked_fill(input_ids == pad_id, -1)


@dataclass
class Rows:
    """What travels with a set of rows through dropping: key validity (B, n) 1/0, document ids
    (B, n), rotary positions (B or 1, n) and ``at``, the row's index in the packed row (B or 1, n;
    ascending, what sliding windows and :class:`tokendrop.attention.Band` measure); None where
    unused.  ``gather`` / ``pooled`` follow :func:`gather_rows` / :func:`avg_pool_rows`."""

    valid: Tensor | None = None
    doc: Tensor | None = None
    pos: Tensor | None = None
    at: Tensor | None = None

    def gather(self, keep_idx: Tensor) -> "Rows":
        b = keep_idx.shape[0]

        def g(t: Tensor | None) -> Tensor | None:
            return None if t is None else gather_rows(t.expand(b, -1), keep_idx)

        return Rows(g(self.valid), g(self.doc), g(self.pos), g(self.at))

    def pooled(self) -> "Rows":
        """avg variant (:func:`avg_pool_rows`): a pooled row is valid if either of its rows is; its
        document, position and index are its first valid row's (its first row's when none is)."""
        def first(t: Tensor | None) -> Tensor | None:
            return None if t is None else first_valid_row(t, self.valid)

        return Rows(None if self.valid is None else avg_pool_mask(self.valid), first(self.doc), first(self.pos),
                    first(self.at))


@dataclass(frozen=True)
class DropSpan:
    """The resolved dropping layout the encoder follows when dropping is active."""

    start: int
    end: int
    variant: str  # drop | pass | avg | layer_rearranged
    per_layer: bool = False  # random_ltd: keep_idx (S, B, M), a subset of its own per half layer

    @classmethod
    def from_config(cls, drop: DropConfig, num_layers: int) -> "DropSpan":
        drop.validate(num_layers)
        start, end = drop.span(num_layers)
        return cls(start, end, drop.variant, drop.per_layer)


def run_layers(layers, x: Tensor, rows: Rows, span: DropSpan | None, keep_idx: Tensor | None, call) -> Tensor:
    """The layer schedule of docs/design.md §2.2, shared by both families.

    ``call(layer, h, kv_in, q_rows, k_rows) -> h``: run one layer on query rows ``h`` (described by
    ``q_rows``) with keys/values ``kv_in`` (None = ``h`` itself; described by ``k_rows``).
    x: (B, T, d); keep_idx: (B, M) ascending positions (drop/pass/layer_rearranged), or (S, B, M)
    with ``span.per_layer`` (random_ltd: half layer j runs on its own kept rows keep_idx[j] only, as
    queries and keys/values, and scatters them back; the other rows pass it unchanged; None: the
    schedule is at full length, a dense pass)."""
    if span is None or (span.per_layer and keep_idx is None):
        for layer in layers:
            x = call(layer, x, None, rows, rows)
        return x
    for layer in layers[: span.start]:
        x = call(layer, x, None, rows, rows)
    x_in = x  # (B, T, d) span-entry states; dropped rows leave the span with these
    half = layers[span.start : span.end]
    if span.per_layer:
        assert keep_idx is not None and keep_idx.dim() == 3 and keep_idx.shape[0] == len(half), \
            "random_ltd: keep_idx (S, B, M), one (B, M) per half layer"
        for layer, keep in zip(half, keep_idx):
            kept = rows.gather(keep)
            x = scatter_rows(x, call(layer, gather_rows(x, keep), None, kept, kept), keep)
    elif span.variant == "avg":
        h = avg_pool_rows(x_in, rows.valid)  # (B, T', d), T' = ceil(T/2); padding never pooled into a real row
        pooled = rows.pooled()
        h = call(half[0], h, x_in, pooled, rows)
        for layer in half[1:]:
            h = call(layer, h, None, pooled, pooled)
        x = upsample_rows(h, x_in.shape[1]) + x_in
    else:
        assert keep_idx is not None, "keep_idx is required for the drop/pass/layer_rearranged variants"
        h = gather_rows(x_in, keep_idx)  # (B, M, d)
        kept = rows.gather(keep_idx)
        h = call(half[0], h, x_in, kept, rows)  # first half layer: all T rows as keys/values
        for layer in half[1:]:
            if span.variant == "pass":  # K/V: kept rows now + dropped rows frozen at entry
                h = call(layer, h, scatter_rows(x_in, h, keep_idx), kept, rows)
            else:
                h = call(layer, h, None, kept, kept)
        x = scatter_rows(x_in, h, keep_idx)  # (B, T, d), order preserved
    for layer in layers[span.end :]:
        x = call(layer, x, None, rows, rows)
    return x


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg.num_layers)])

    def forward(
        self,
        x: Tensor,
        attention_mask: Tensor | None = None,
        span: DropSpan | None = None,
        keep_idx: Tensor | None = None,
        doc_ids: Tensor | None = None,
    ) -> Tensor:
        # x: (B, T, d); attention_mask: (B, T) or None; keep_idx: (B, M) ascending positions;
        # doc_ids: (B, T) per-document attention (document_ids) or None
        masks = MaskCache(x.dtype, flex=use_flex(self.cfg.attention_backend, x.device,
                                                 self.cfg.attention_dropout if self.training else 0.0))
        return run_layers(self.layers, x, Rows(attention_mask, doc_ids), span, keep_idx,
                          lambda layer, h, kv, q, k: layer(h, kv_in=kv, attn_bias=masks(q, k)))


class Pooler(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, x: Tensor) -> Tensor:
        return torch.tanh(self.dense(x[:, 0]))  # (B, d) from [CLS]


def encoder_span(cfg: ModelConfig, drop: DropConfig | None) -> DropSpan | None:
    """Both families' encoders start here: ``cfg`` validated (its vocabulary resolved), and the
    dropping span (None when ``drop`` is off)."""
    cfg.validate()
    if cfg.vocab_size <= 0:
        raise ValueError("model.vocab_size: must be resolved (> 0) before the model is built")
    return DropSpan.from_config(drop, cfg.num_layers) if drop is not None and drop.enabled else None


class BertModel(nn.Module):
    """Embeddings + encoder + pooler.  ``span`` is the dropping layout used when dropping is on."""

    def __init__(self, cfg: ModelConfig, drop: DropConfig | None = None):
        super().__init__()
        self.span = encoder_span(cfg, drop)
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = Pooler(cfg)

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        keep_idx: Tensor | None = None,
        drop_active: bool = False,
        doc_ids: Tensor | None = None,
    ) -> Tensor:
        """-> final hidden states (B, T, d).  Dropping only when training and requested; ``doc_ids``
        (B, T) (:func:`document_ids`): each token attends only within its own document."""
        x = self.embeddings(input_ids, token_type_ids)
        active = self.training and self.span is not None and (keep_idx is not None or drop_active)
        return self.encoder(x, attention_mask, self.span if active else None, keep_idx if active else None, doc_ids)


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
        self.norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.word_embeddings = [word_embeddings]  # a list: tied, not a second registered copy

    def forward(self, h: Tensor) -> Tensor:
        h = self.norm(F.gelu(self.dense(h)))
        return F.linear(h, self.word_embeddings[0].weight, self.bias)  # (..., V)


class MaskedLM(nn.Module):
    """Both families' MLM models share this forward and loss.  A subclass sets ``encoder`` (a
    property: the family's encoder, called as ``(input_ids, attention_mask, token_type_ids, keep_idx,
    drop_active, doc_ids) -> (B, T, d)``), ``encoder_layers`` (its layers, in order),
    ``document_attention`` and ``config``, and implements :meth:`head_logits`."""

    task = "mlm"

    def head_logits(self, h: Tensor) -> Tensor:
        """(..., d) hidden states -> (..., V) logits."""
        raise NotImplementedError

    def head_parameters(self) -> list[nn.Parameter]:
        """The MLM head's own parameters (the decoder weight is the tied word embedding: not
        included); what ``continued.head_warmup`` trains."""
        raise NotImplementedError

    def hidden(
        self,
        input_ids: Tensor,
        mlm_positions: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        keep_idx: Tensor | None = None,
        drop_active: bool = False,
    ) -> Tensor:
        """The encoder's last hidden states (B, P, d) at ``mlm_positions`` (B, P), or (B, T, d)
        when it is None.  With ``model.document_attention`` on, tokens attend only within their
        document of the packed row."""
        cfg = self.config
        doc = document_ids(input_ids, cfg.sep_token_id, cfg.pad_token_id) if self.document_attention else None
        h = self.encoder(input_ids, attention_mask, token_type_ids, keep_idx, drop_active, doc)
        if mlm_positions is not None:
            h = torch.gather(h, 1, mlm_positions.unsqueeze(-1).expand(-1, -1, h.shape[-1]))  # (B, P, d)
        return h

    def forward(
        self,
        input_ids: Tensor,
        mlm_positions: Tensor | None = None,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        keep_idx: Tensor | None = None,
        drop_active: bool = False,
    ) -> Tensor:
        """-> logits (B, P, V) at ``mlm_positions`` (B, P), or (B, T, V) when it is None (see
        :meth:`hidden`)."""
        return self.head_logits(self.hidden(input_ids, mlm_positions, attention_mask, token_type_ids, keep_idx,
                                            drop_active))

    def mlm_nll(self, logits: Tensor, labels: Tensor) -> Tensor:
        """Per-slot negative log-likelihood (B, P), computed in fp32 (in float64 for a float64 model)."""
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none").view(labels.shape)


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
    def encoder_layers(self) -> nn.ModuleList:
        return self.bert.encoder.layers

    @property
    def encoder(self) -> BertModel:
        return self.bert

    def head_logits(self, h: Tensor) -> Tensor:
        return self.mlm(h)

    def head_parameters(self) -> list[nn.Parameter]:
        return [self.mlm.dense.weight, self.mlm.dense.bias, self.mlm.norm.weight, self.mlm.norm.bias, self.mlm.bias]


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

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None) -> Tensor:
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
        self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        h = self.bert(input_ids, attention_mask, token_type_ids)
        start, end = self.qa_outputs(h).unbind(-1)
        return start, end  # (B, T) each


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def check_document_attention(cfg: ModelConfig) -> bool:
    """Whether an MLM model of ``cfg`` uses per-document attention; it needs the [SEP] id."""
    if not cfg.uses_document_attention:
        return False
    if cfg.sep_token_id < 0:
        raise ConfigError("model.sep_token_id: document attention (model.document_attention = "
                          f"{cfg.document_attention!r}, family {cfg.family!r}) needs the [SEP] id that separates "
                          "documents in packed rows; set model.sep_token_id (pretraining takes it from the prepared "
                          "data) or model.document_attention = \"off\"")
    return True


# task -> this family's class (``tokendrop.families.FAMILIES`` registers it)
CLASSES: dict[str, type[nn.Module]] = {"mlm": BertForMaskedLM, "classification": BertForSequenceClassification,
                                      "qa": BertForQuestionAnswering}

__all__ = [
    "CLASSES",
    "BertModel",
    "BertForMaskedLM",
    "BertForSequenceClassification",
    "BertForQuestionAnswering",
    "DropSpan",
    "Rows",
    "document_ids",
    "gather_rows",
    "scatter_rows",
    "avg_pool_rows",
    "upsample_rows",
    "num_parameters",
]
