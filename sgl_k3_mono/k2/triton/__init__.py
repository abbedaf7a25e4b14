"""K2's device code for NVIDIA Hopper (sm_90), in Triton."""
