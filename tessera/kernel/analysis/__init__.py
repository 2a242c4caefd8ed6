"""Analyses over the kernel IR, shared by every backend."""
