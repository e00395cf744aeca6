"""The modernbert family (pre-LN without biases, GeGLU, rotary positions, alternating global /
sliding-window attention): its model (``model.py``), its transformers adapter (``hf.py``), its
``[model]`` schema and presets (``family.toml``) and its row, ``FAMILY``, registered in
``tokendrop.models.families``."""

from tokendrop.models.family import FamilySpec, HFIntegration
from tokendrop.models.modernbert import hf, model

FAMILY = FamilySpec(
    name="modernbert",
    classes=model.CLASSES,
    hf_model_type="modernbert",
    hf_architectures=hf.ARCHITECTURES,
    config_from_hf=hf.modern_config_from_hf,
    hf_config=hf.modern_hf_config_dict,
    # else transformers' defaults (50281) name ids outside a smaller vocabulary
    hf_config_defaults={"bos_token_id": None, "cls_token_id": None},
    to_hf=hf.to_hf_modern,
    from_hf=hf.modern_state_from_hf,
    check_hf_tensors=hf.check_modern_tensors,
    load_weights=hf.load_modern_weights,
    hf_sparse_prediction=True,
    token_types=False,
    max_seq_len=8192,  # rotary positions (ModernBERT's max_position_embeddings)
    extends_positions=True,
    integration=HFIntegration(
        mlm_class="ModernBertForMaskedLM",
        bare_class="ModernBertModel",
        base="model",
        layers="layers",
        head=("head", "decoder"),
        layout="modernbert",
        pooler=False,
        model_loss=True,
    ),
)
