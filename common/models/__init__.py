"""Models whose residual streams the probe reads: CIFAR/ImageNet-100 ResNets, Cohen et al.'s fully
connected ResNets, GPT-style decoders, and any Hugging Face causal LM through an adapter."""
