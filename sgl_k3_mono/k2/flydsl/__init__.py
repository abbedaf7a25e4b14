"""K2's FlyDSL device code for gfx950 (compile-checked on the CPU; never executed)."""
