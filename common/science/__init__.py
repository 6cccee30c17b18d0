"""The science: the paper's quantities as functions of tensors and modules (torch, numpy, scipy; nothing else of ours).

- :mod:`common.science.probe`: ``AG_l`` and ``AGmax`` at every candidate (Sec. 3), with the growth values and App. G's
  contributions; :mod:`common.science.activations`: its pass over a frozen model (``z_l``, ``G_l = dL/dz_l``);
  :mod:`common.science.gram`: the tangent-space Gram statistics (``Psi^T Psi``, ``Psi^T G``; App. H.1's regression);
- :mod:`common.science.projection` and :mod:`common.science.tangent`: the growth value ``V_S,l``, the projection of
  the activation gradient onto a zero-output block's tangent space (Theorem 1), per block family;
- :mod:`common.science.growth`: zero-output (function-preserving) insertion and the gradient-matched one (App. E);
- :mod:`common.science.saturation`: App. G's interval for ``Gamma = max_l ||C_l||`` and its verdict;
- :mod:`common.science.terminal_value`: ``V_b`` of an existing branch (09's stop rule);
- :mod:`common.science.scaling`: Cohen et al.'s weight-scaling diagnostics (power-law fits);
- :mod:`common.science.precision`: TF32/HF32 off where float64 runs (a leaf every layer may use).

A new probe family goes in :mod:`common.science.tangent` (its tangent features) beside the others. The float64
identities these modules satisfy are the tests of ``tests/science/``.
"""
