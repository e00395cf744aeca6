"""The one encoder forward every family plugs into: embeddings, the layers through the dropping
engine (:func:`tokendrop.dropping.engine.run_layers`, docs/design.md §2.2), the final norm.

A family's bare encoder is an :class:`EncoderModel`; its ``__init__`` calls
``super().__init__(cfg, drop)`` and then sets its parts:

* ``embeddings``: called as ``(input_ids, token_type_ids) -> (B, T, d)`` (a family without token
  types ignores them);
* ``layers``: an ``nn.ModuleList`` (or a property returning the one registered elsewhere, where the
  parameter names need it), each layer called as ``layer(h, kv_in=, attn_bias=)`` -- plus
  ``rope_q=``, ``rope_k=`` (cos, sin of the query and key rows) in a family with rotary positions --
  and carrying ``window``: how far it attends in original positions (None: the whole row);
* ``final_norm``: a module, or None (post-LN BERT has none);
* ``rotary``: a :class:`tokendrop.models.rotary.Rotary` for rotary positions (None: the positions
  are the embeddings' own), and ``rotary_local``, the base of the windowed layers (None: the same).

The forward builds the per-forward context once: the masks (a
:class:`tokendrop.models.attention.MaskCache`: padding, documents, windows), the rows' document ids
and, with rotary positions, their positions (restarting in every document) and original indices,
and each rows' cos/sin, cached per (rows, base).

Shapes: B batch, T sequence, M kept rows, d hidden.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from tokendrop.config import ModelConfig
from tokendrop.dropping.config import DropConfig
from tokendrop.dropping.engine import DropSpan, Rows, run_layers
from tokendrop.models.attention import MaskCache, use_flex
from tokendrop.models.rotary import Rotary, RowRopes, document_positions


def encoder_span(cfg: ModelConfig, drop: DropConfig | None) -> DropSpan | None:
    """Every family's encoder starts here: ``cfg`` validated (its vocabulary resolved), and the
    dropping span (None when ``drop`` is off)."""
    cfg.validate()
    if not isinstance(cfg.vocab_size, int):
        raise ValueError("model.vocab_size: must be resolved (> 0) before the model is built")
    return DropSpan.from_config(drop, cfg.num_layers) if drop is not None and drop.enabled else None


class EncoderModel(nn.Module):
    """A family's bare encoder: its parts (module docstring) run by the one forward.  ``span`` is
    the dropping layout used when dropping is on."""

    layers: nn.ModuleList

    def __init__(self, cfg: ModelConfig, drop: DropConfig | None = None):
        super().__init__()
        self.span = encoder_span(cfg, drop)
        self.config = cfg
        self.final_norm: nn.Module | None = None
        self.rotary: Rotary | None = None
        self.rotary_local: Rotary | None = None

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        token_type_ids: Tensor | None = None,
        keep_idx: Tensor | None = None,
        drop_active: bool = False,
        doc_ids: Tensor | None = None,
    ) -> Tensor:
        """-> final hidden states (B, T, d).  Dropping only when training and requested
        (``keep_idx`` (B, M) ascending positions, or ``drop_active`` for a pooling variant);
        ``doc_ids`` (B, T) (:func:`tokendrop.models.masked_lm.document_ids`): each token attends
        only within its own document, and rotary positions restart in every document."""
        cfg = self.config
        x = self.embeddings(input_ids, token_type_ids)
        t = input_ids.shape[1]
        masks = MaskCache(
            x.dtype,
            flex=use_flex(
                cfg.attention_backend, x.device, cfg.attention_dropout if self.training else 0.0
            ),
            extent=t,
        )
        rows = Rows(attention_mask, masks.documents(doc_ids))
        call = self._layer_call if self.rotary is None else self._rotary_call()
        if self.rotary is not None:
            rows.at = torch.arange(t, device=input_ids.device)[None]  # (1, T) index in the row
            rows.pos = rows.at if doc_ids is None else document_positions(doc_ids)

        def run(layer: nn.Module, h: Tensor, kv: Tensor | None, q: Rows, k: Rows) -> Tensor:
            return call(layer, h, kv, q, k, masks(q, k, layer.window))

        active = self.training and self.span is not None and (keep_idx is not None or drop_active)
        x = run_layers(
            self.layers, x, rows, self.span if active else None, keep_idx if active else None, run
        )
        return x if self.final_norm is None else self.final_norm(x)

    @staticmethod
    def _layer_call(layer: nn.Module, h: Tensor, kv: Tensor | None, q, k, bias) -> Tensor:
        return layer(h, kv_in=kv, attn_bias=bias)

    def _rotary_call(self):
        """The layer call of a forward with rotary positions: each rows' cos/sin of a base computed
        once, in the parameters' dtype (not autocast's)."""
        dtype = next(self.embeddings.parameters()).dtype
        local = self.rotary if self.rotary_local is None else self.rotary_local
        ropes = RowRopes(lambda r, windowed: (local if windowed else self.rotary)(r.pos, dtype))

        def call(layer: nn.Module, h: Tensor, kv: Tensor | None, q: Rows, k: Rows, bias) -> Tensor:
            windowed = layer.window is not None
            return layer(
                h, kv_in=kv, attn_bias=bias, rope_q=ropes(q, windowed), rope_k=ropes(k, windowed)
            )

        return call


__all__ = ["EncoderModel", "encoder_span"]
