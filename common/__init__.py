"""Shared code of the depth-sufficiency reproduction (arXiv 2608.14664).

Numbered scripts at the repository root are thin command lines over this package;
everything a submitit job pickles lives here.
"""
