"""Datasets of the reproduction: their sources, and loaders of ``(inputs, targets)`` batches.

- :mod:`common.data.vision`: image classification for the ResNets (CIFAR-10/100, ImageNet-100, a
  user's ``.npz``, scikit-learn's digits, synthetic patterns) and a tensor-resident loader;
- :mod:`common.data.text`: token data for the decoders (documents from a source, tokenizers, token
  shards on disk, their batch loaders);
- :mod:`common.data.neural_ode`: Cohen et al.'s (2021) synthetic neural-ODE regression for the fully
  connected ResNets.
"""
