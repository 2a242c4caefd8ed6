"""The CUDA instructions Tessera's register tiles use, as data (one module per family):
``mma_sync`` (tensor-core fragments), ``ldmatrix`` (warp matrix loads from shared memory)
and ``banks`` (the shared-memory bank model that decides whether an access is conflict
free); for Hopper (sm_90a, GPU.md §4; modelled and tested, not yet emitted): ``wgmma``
(shapes, matrix descriptors, the 32/64/128-byte swizzles), ``tma`` (tensor maps and a box
load's result) and ``mbarrier`` (phases and the staging ring's protocol, played to the end
under random schedules; tests/test_isa_hopper.py). NumPy-only and importable without
numba-cuda or a GPU; the tests check them against NumPy models written from the PTX ISA
(tests/test_isa_models.py), and assemble the Hopper texts with ptxas
(tests/test_isa_hopper_ptx.py).
"""
