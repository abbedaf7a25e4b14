"""Plain-torch references: the oracle every launch and every test is judged against.

They run on the CPU or the GPU at any dimensions, in fp32 with the bf16 roundings of
SGLang 0.5.23's standard path placed where that path rounds (per ISA where it differs).
"""
