"""Passes of the CUDA target only (GPU.md): what the other targets never see."""
