"""What each instruction family does, for the ISA table's records to carry: semantics, memory extents, timing.

`dma` (LOAD, GATHER, STORE), `matrix` (MATMUL) and `vector` (the vector engine) hold the rules;
control and configuration instructions use `isa.behaviour`'s `no_effect`, `no_extents` and `ONE_CYCLE`.
"""
