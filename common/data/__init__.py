"""Datasets of the reproduction: image classification (vision.py) and, later, token streams."""
