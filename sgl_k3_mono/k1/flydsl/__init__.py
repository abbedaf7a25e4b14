"""K1 for gfx950 in FlyDSL (compile-checked on the CPU, never executed on a gfx950 GPU)."""
