"""The CUDA instructions Tessera's register tiles use, as data (one module per family):
``mma_sync`` (tensor-core fragments), ``ldmatrix`` (warp matrix loads from shared memory)
and ``banks`` (the shared-memory bank model that decides whether an access is conflict
free). NumPy-only and importable without numba-cuda or a GPU; the tests check them
against NumPy models written from the PTX ISA (tests/test_isa_models.py).
"""
