"""Datasets of the reproduction: images (vision.py), token data (tokenizers.py, token_shards.py, text_sources.py) and neural ODE data (neural_ode.py)."""
