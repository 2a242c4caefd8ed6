"""The operator layer (docs/ops.md): ops on whole arrays, traced into graphs, fused and
lowered to generated ``@kernel`` source that compiles, caches and runs like any kernel.

The pipeline, one module per step: ``declare`` (each op's shape/dtype rule and element
code) → ``tensor`` (tracing: ops on abstract tensors record nodes of ``ir``) →
``passes`` (canonicalise → fuse → lower, each dumpable) with ``fuse`` and ``codegen``
→ ``plan`` (the launches and buffers of one traced signature) → ``module`` (the
``@graph.module`` / ``@graph.kernel`` objects and eager calls). The public names live in
``tessera.op`` and ``tessera.graph``.
"""
