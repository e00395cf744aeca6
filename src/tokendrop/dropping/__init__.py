"""tokendrop.dropping: the token-dropping method (docs/design.md §2), shared by both encoder
families, the trainer and the ``transformers`` integration.

Modules, bottom to top (each imports only those above it in this list, plus ``tokendrop.errors``;
nothing here imports ``config``, ``models``, ``train`` or ``data``):

* ``methods``     -- the ``[drop]`` section (``DropConfig``) and its two registries: ``METHODS``
  (a ``SelectionMethod`` row per ``drop.method``: its facts, its selection, its kept-count rule --
  random-LTD's ramp among them) and ``VARIANTS`` (a ``DropVariant`` row per ``drop.variant``:
  pooling, frozen keys/values, where it merges, its span and kept count); the per-step rules of a
  config (``kept_rows``; the phases -- a dense start, a random start, stage 2 -- ``dropping_at`` /
  ``random_at`` / ``learns_at``; ScTD's ``consistency_at``).  Imports no torch at module level (a
  config parses without it).
* ``engine``      -- which rows each layer sees: ``DropSpan`` and ``run_layers``, the layer schedule
  both families' encoders run (gather, pool, scatter).
* ``importance``  -- ``TokenSelector``: the importance vector and the random generator; selection
  through the method's row and the cumulative-loss update (all-reduced across ranks).
* ``consistency`` -- ScTD's [CLS] KL term and the taps that record it.
* ``flops``       -- the analytic FLOPs of a step for either family (read from the model config's
  schema row), and device peaks for MFU.
* ``plan``        -- ``DropPlan``: the method behind one object, built once per run; a training step
  asks it whether it drops, how many rows it keeps, which ones, when ScTD runs, the importance
  update after the optimizer step and the step's FLOPs.

This package's ``__init__`` imports nothing, so ``import tokendrop.dropping.methods`` stays light.
"""
