"""Datasets of the reproduction: their sources, and loaders of ``(inputs, targets)`` batches.

- :mod:`common.data.vision`: image classification for the ResNets (CIFAR-10/100, ImageNet-100, a
  user's ``.npz``, scikit-learn's digits, synthetic patterns) and a tensor-resident loader;
- token data for the decoders: :mod:`common.data.text_sources` (documents from a source, the
  identity of a token set), :mod:`common.data.token_preparation` (the documents prepared into token
  shards, resumably), :mod:`common.data.tokenizers` and :mod:`common.data.token_shards` (the shard
  format on disk, its batch loaders);
- :mod:`common.data.neural_ode`: Cohen et al.'s (2021) synthetic neural-ODE regression for the fully
  connected ResNets.
"""
