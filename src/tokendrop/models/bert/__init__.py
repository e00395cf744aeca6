"""The bert family (post-LN BERT): its model (``model.py``), its transformers adapter (``hf.py``),
its ``[model]`` schema and presets (``family.toml``) and its row, ``FAMILY``, registered in
``tokendrop.models.families``."""

from tokendrop.models.bert import hf, model
from tokendrop.models.family import FamilySpec, HFIntegration

FAMILY = FamilySpec(
    name="bert",
    classes=model.CLASSES,
    hf_model_type="bert",
    hf_architectures=hf.ARCHITECTURES,
    config_from_hf=hf.bert_config_from_hf,
    hf_config=hf.hf_config_dict,
    hf_config_defaults={},
    to_hf=hf.to_hf,
    from_hf=hf.state_from_hf,
    check_hf_tensors=hf.check_bert_tensors,
    load_weights=hf.load_bert_weights,
    hf_sparse_prediction=False,
    token_types=True,
    # published BERTs learn 512 positions; one built from scratch (bench) learns
    # max_position_embeddings
    max_seq_len=8192,
    extends_positions=False,
    hf_head_fields=("classifier_dropout",),  # ours is hidden_dropout_prob
    pretrain_frozen=("bert.pooler",),  # no NSP: the pooler is not trained
    integration=HFIntegration(
        mlm_class="BertForMaskedLM",
        bare_class="BertModel",
        base="bert",
        layers="encoder.layer",
        head=("cls",),
        layout="bert",
        pooler=True,
        model_loss=False,
        refused_flags=("is_decoder", "add_cross_attention"),
        absolute_positions=True,
    ),
)
