"""Models whose residual streams the probe reads: CIFAR/ImageNet-100 ResNets, GPT-style decoders."""
