"""Argus Inductor: a PyTorch compiler backend with proven tile kernels."""
__version__ = "0.1.0"
