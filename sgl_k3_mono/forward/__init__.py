"""The monokernel step forward: build (build.py), one plan and buffers per served width
(plan.py), the step itself (step.py) over hooks (hooks.py) that SGLang (sglang_hooks.py)
or a model harness without SGLang (harness.py) provide."""
