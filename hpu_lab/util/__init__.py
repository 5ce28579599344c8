"""Helpers every stage may use, importing nothing of hpu_lab: the user's source line behind an op,
OpenMP's wait policy, the background warm-up of torch's lazy imports.
"""
