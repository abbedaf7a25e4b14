"""Our spec through SGLang 0.5.23's own install_monokernel_forward on a Kimi-K3 that
SGLang built (tiny config, CPU, launches as their references): the forward is replaced,
served decode and verify steps reach our step and others SGLang's forward, the step's
logits agree with the whole-step reference, and the TP-agreement and refusal paths
raise as SGLang intends."""

from __future__ import annotations

import functools
import types

import msgspec
import pytest
import torch

from support import sglang_triton_cpu as helpers
from support.sglang_cpu import build_model, fake_device, publish, server_args

ARCH = "KimiK3ForConditionalGeneration"

from sgl_k3_mono.forward.build import build  # noqa: E402
from sgl_k3_mono.spec import SPEC  # noqa: E402

# The tiny model is not Kimi-K3's size (the resolution-time checks refuse it); install
# runs only the after-load checks and build. The launches run as their references.
REF_SPEC = msgspec.structs.replace(
    SPEC, config_disable_reasons=None, requires=msgspec.structs.replace(SPEC.requires, hf_config={}),
    build=functools.partial(build, impl="reference"))
BUILT = {}


def _recording_build(model, hf_config, ctx):
    BUILT["obj"] = build(model, hf_config, ctx, impl="reference")
    BUILT["ctx"] = ctx
    return BUILT["obj"]


REC_SPEC = msgspec.structs.replace(REF_SPEC, build=_recording_build)


@pytest.fixture(scope="module")
def model(tiny_config_dir):
    m = build_model(tiny_config_dir)
    with torch.no_grad():
        helpers.randomize(m)
    return m


@pytest.fixture
def installed(model, tiny_config_dir, private_registry, monkeypatch):
    """Register REC_SPEC, publish the server as --enable-amd-monokernel on sm_90, and hand
    back a function that runs SGLang's install (its device probes patched per call)."""
    from sglang.kernels.plugin_kernels.amd.spec import register
    from sglang.srt.kernel_plugins.amd import binding

    register(backend="amd", architecture=ARCH, path=f"{__name__}:REC_SPEC")
    monkeypatch.setattr(binding, "device_isa", lambda: "sm_90")
    # the runner's attention backend, which the first routed step checks (no runner here)
    monkeypatch.setattr(binding, "get_attn_backend",
                        lambda: types.SimpleNamespace(decode_attention_backend_str="fa3"))
    publish(server_args(tiny_config_dir, enable_amd_monokernel=True, attention_backend="fa3"))
    original = model.forward
    BUILT.clear()

    def install(hooks=None):
        with pytest.MonkeyPatch.context() as mp:  # torch.cuda faked only for the install call
            fake_device(mp, isa="sm_90", compute_units=132)
            hooks = [] if hooks is None else hooks
            binding.install_monokernel_forward(model=model, hf_config=model.config, capture_tail_hooks=hooks)
        return BUILT.get("obj")

    yield install
    model.forward = original
    model.__dict__.pop("_monokernel_unread_metadata", None)
    publish(server_args(tiny_config_dir))


def _verify_server(monkeypatch, tokens: int, algorithm: str = "NEXTN") -> None:
    """SGLang's published speculative config, as binding and our build read it."""
    from sglang.srt import runtime_context
    from sglang.srt.kernel_plugins.amd import binding

    spec = types.SimpleNamespace(speculative_algorithm=algorithm, speculative_num_draft_tokens=tokens)
    monkeypatch.setattr(binding, "get_spec", lambda: spec)
    monkeypatch.setattr(runtime_context, "get_spec", lambda: spec)


# ---- fake pools and batches: SGLang's structures as the step reads them ------------------

class Pools:
    """KDA state pools keyed by the attention layer_id, shaped as SGLang's MambaPool holds them."""

    def __init__(self, model, slots: int, verify_tokens: int = 0):
        lm = model.language_model.model
        self.caches = {}
        for layer in lm.layers:
            attn = layer.self_attn
            if not hasattr(attn, "fused_qkvg_proj"):
                continue
            p, h, d = attn.local_num_heads * attn.head_dim, attn.local_num_heads, attn.head_dim
            g = torch.Generator().manual_seed(attn.attn.layer_id)
            conv = (0.1 * torch.randn(slots, 3, 3 * p, generator=g)).bfloat16()
            ssm = 0.01 * torch.randn(slots, h, d, d, generator=g)
            ns = types.SimpleNamespace(conv=[conv], temporal=ssm, replayssm_d=None, replayssm_rawv=None)
            if verify_tokens:
                ns.intermediate_ssm = torch.zeros(slots + 1, verify_tokens, h, d, d)
                ns.intermediate_conv_window = [torch.zeros(slots + 1, verify_tokens, 3, 3 * p, dtype=torch.bfloat16)]
            self.caches[attn.attn.layer_id] = ns

    def mamba2_layer_cache(self, layer_id):
        return self.caches[layer_id]


def batch(mode, bs: int, rows: int, *, pools=None, slots=None):
    from sglang.srt.layers.logits_processor import LogitsMetadata

    fb = LogitsMetadata(forward_mode=mode)  # what the logits processor reads of a ForwardBatch
    fb.batch_size, fb.input_ids = bs, torch.zeros(rows, dtype=torch.long)
    if pools is not None:
        lin = types.SimpleNamespace(req_to_token_pool=pools, accept_lens_pool=None,
                                    forward_metadata=types.SimpleNamespace(mamba_cache_indices=slots))
        fb.attn_backend = types.SimpleNamespace(linear_attn_backend=lin)
    return fb


def reference_mla_hooks(caches: dict, *, reference_dense: bool = False):
    """SglangHooks with the MLA core replaced by the reference's (SGLang's needs a GPU
    attention backend); everything else is SGLang's, layer 0's FFN side too unless
    `reference_dense`.

    Steps compared with the reference over several steps take the reference's layer 0:
    SGLang's CPU bf16 GEMMs round by the CPU's vector unit (AVX2 and AVX-512 machines
    differ), and one ulp at layer 0 flips a top-k choice of the tiny random model a step
    later. `test_sglangs_layer_0_agrees_with_the_reference_within_bf16_rounding` holds
    SGLang's own layer 0 to the reference instead."""
    from sgl_k3_mono.forward.sglang_hooks import SglangHooks
    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.reference.mla import MLAWeights, latent_row, mla_decode
    from sgl_k3_mono.reference.step import DenseLayer, dense_side

    class Hooks(SglangHooks):
        def dense(self, layer, attn_out, bank, nvb, prefix):
            if not reference_dense:
                return super().dense(layer, attn_out, bank, nvb, prefix)
            p, add = dense_side(DenseLayer.from_sglang(self.layers[layer]), attn_out, bank, nvb, prefix,
                                K3Dims.from_config(self.lm.config), tp=1, isa=self.isa)
            return p.bfloat16(), add.bfloat16()

        def mla(self, layer, h):
            w = MLAWeights.from_sglang(self.layers[layer].self_attn, self.eps)
            _, row = latent_row(w, h.float())
            c = caches.setdefault(layer, {})
            slots = self._slots.tolist()
            if self.mode == "verify":  # one request: token t attends to the cache up to itself
                (s,) = slots
                outs = []
                for t in range(h.shape[0]):
                    c[s] = torch.cat([c.get(s, row[:0]), row[t : t + 1]])
                    outs.append(mla_decode(w, h[t : t + 1].float(), [c[s]]))
                return torch.cat(outs).bfloat16()
            for j, s in enumerate(slots):
                c[s] = torch.cat([c.get(s, row[:0]), row[j : j + 1]])
            return mla_decode(w, h.float(), [c[s] for s in slots]).bfloat16()

        def kda_state(self, layer):
            st = super().kda_state(layer)
            self._slots = st.slots
            return st

    return Hooks


# ---- tests -----------------------------------------------------------------------------

def test_install_builds_and_routes_decode_steps(model, installed):
    from sglang.kernels.plugin_kernels.amd.spec import ShapeKey
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    original = model.forward
    calls = []
    model.forward = functools.wraps(original)(lambda *a, **k: calls.append("standard") or "standard")
    built = installed()
    assert built is not None and model.forward is not original
    ctx = BUILT["ctx"]
    assert ctx.isa == "sm_90" and ctx.deadline_s > 0
    served, _ = model._monokernel_unread_metadata
    assert served == {ShapeKey("decode", w, 1) for w in ctx.widths}
    assert set(built.plans) == {("decode", w, 1) for w in ctx.widths}
    # the step's buffers are small next to the weights and were logged at build
    assert 0 < built.allocated_bytes == sum(b.nbytes() for b in built.buffers.values())
    print(f"step buffers {built.allocated_bytes} B for widths {ctx.widths}; weights {built.weight_bytes} B "
          f"({100 * built.allocated_bytes / built.weight_bytes:.2f} %)")

    routed = []
    built.forward = lambda plan, *a, **k: routed.append(plan.key) or "mono"
    w = max(ctx.widths)
    assert model.forward(torch.zeros(w, dtype=torch.long), None, batch(ForwardMode.DECODE, w, w)) == "mono"
    assert model.forward(torch.zeros(9, dtype=torch.long), None, batch(ForwardMode.DECODE, 9, 9)) == "standard"
    assert model.forward(torch.zeros(7, dtype=torch.long), None, batch(ForwardMode.EXTEND, 2, 7)) == "standard"
    assert routed == [ShapeKey("decode", w, 1)] and calls == ["standard", "standard"]


def test_decode_step_through_sglangs_install_matches_the_reference_step(model, installed):
    """Three decode steps of 4 requests through model.forward (SGLang's wrapper): SGLang's
    embedding, layer 0, logits processor; K1/K2 as references; logits against the
    whole-step reference on the same (randomized) weights."""
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.numerics import measure
    from sgl_k3_mono.reference.step import DecodeState, ModelWeights, decode_step

    built = installed()
    assert 4 in BUILT["ctx"].widths
    caches = {}
    built.hooks_factory = reference_mla_hooks(caches, reference_dense=True)
    dims = K3Dims.from_config(model.config)
    pools = Pools(model, slots=6)
    ref_state = DecodeState.fresh(dims, 1, 6)
    for i in dims.kda_layers:  # the reference starts from the same (nonzero) states
        c = pools.caches[model.language_model.model.layers[i].self_attn.attn.layer_id]
        ref_state.kda[i][0] = type(ref_state.kda[i][0])(c.conv[0].clone(), c.temporal.clone())
    weights = ModelWeights.from_sglang(model, dims)
    slots = torch.tensor([5, 0, 3, 1])
    g = torch.Generator().manual_seed(2)
    for step in range(3):
        ids = torch.randint(0, dims.vocab, (4,), generator=g)
        fb = batch(ForwardMode.DECODE, 4, 4, pools=pools, slots=slots.int())
        fb.input_ids = ids
        out = model.forward(ids, torch.zeros(4, dtype=torch.long), fb)
        assert isinstance(out, LogitsProcessorOutput)
        ref = decode_step(weights, ref_state, ids, slots, tp=1, isa="sm_90")
        m = measure(out.next_token_logits.float(), ref)
        print(f"step {step}: {m}")
        assert m["cosine"] > 0.999 and torch.equal(out.next_token_logits.argmax(-1), ref.argmax(-1)), m
    for i in dims.kda_layers:
        c = pools.caches[model.language_model.model.layers[i].self_attn.attn.layer_id]
        assert measure(c.temporal, ref_state.kda[i][0].ssm)["cosine"] > 0.999
        assert (c.temporal[[2, 4]] == ref_state.kda[i][0].ssm[[2, 4]]).all()  # slots no row uses: untouched


def test_verify_step_of_one_request_is_routed_and_writes_the_scratch(model, installed, monkeypatch):
    from sglang.kernels.plugin_kernels.amd.spec import ShapeKey
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    _verify_server(monkeypatch, tokens=8)
    built = installed()
    served, _ = model._monokernel_unread_metadata
    assert served == {ShapeKey("target_verify", 1, 8)} and set(built.plans) == {("target_verify", 1, 8)}
    built.hooks_factory = reference_mla_hooks({})
    pools = Pools(model, slots=3, verify_tokens=8)
    committed = {k: c.temporal.clone() for k, c in pools.caches.items()}
    ids = torch.arange(8) + 5
    fb = batch(ForwardMode.TARGET_VERIFY, 1, 8, pools=pools, slots=torch.tensor([2, -1, -1], dtype=torch.int32))
    fb.input_ids = ids
    out = model.forward(ids, torch.arange(8), fb)
    assert out.next_token_logits.shape == (8, model.config.text_config.vocab_size)
    assert torch.isfinite(out.next_token_logits).all()
    for k, c in pools.caches.items():
        assert torch.equal(c.temporal, committed[k])  # the committed state is SGLang's to update
        assert c.intermediate_ssm[0].abs().sum() > 0  # request 0's per-token states, row 0
        assert (c.intermediate_ssm[1:] == 0).all()


def test_verify_of_two_requests_is_refused_with_the_reason(model, installed, monkeypatch):
    from sgl_k3_mono.forward.build import StepRefused

    _verify_server(monkeypatch, tokens=4)
    original = model.forward
    with pytest.raises(StepRefused, match=r"verify steps of \[2\] requests .* one request a step"):
        installed()
    assert model.forward == original


def _draft_reads(model, monkeypatch, layers):
    """What SGLang's runner does for a DSpark draft before capturing graphs (undone after the test)."""
    lm = model.language_model
    monkeypatch.setattr(lm, "capture_aux_hidden_states", lm.capture_aux_hidden_states)
    monkeypatch.setattr(lm.model, "dspark_layers_to_capture", lm.model.dspark_layers_to_capture)
    model.set_dspark_layers_to_capture(layers)


def test_decode_step_hands_a_dspark_draft_the_stream_after_its_layers(model, installed, monkeypatch):
    """Every tiny-model layer captured (after layer 0: the pending dense add; 1: before a
    block write; 2: before the MLA layer; 3: the output-side read), named out of order:
    SGLang's packer gets them in layer order, in the batch's buffer, equal to the reference
    step's captures; the logits still match the reference."""
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.numerics import measure
    from sgl_k3_mono.reference.step import DecodeState, ModelWeights, decode_step

    built = installed()
    layers = [3, 0, 2, 1]
    _draft_reads(model, monkeypatch, layers)
    built.hooks_factory = reference_mla_hooks({}, reference_dense=True)
    dims = K3Dims.from_config(model.config)
    pools = Pools(model, slots=4)
    ref_state = DecodeState.fresh(dims, 1, 4)
    for i in dims.kda_layers:
        c = pools.caches[model.language_model.model.layers[i].self_attn.attn.layer_id]
        ref_state.kda[i][0] = type(ref_state.kda[i][0])(c.conv[0].clone(), c.temporal.clone())
    weights = ModelWeights.from_sglang(model, dims)
    slots, h = torch.tensor([2, 0, 3, 1]), dims.hidden
    g = torch.Generator().manual_seed(5)
    for step in range(2):
        ids = torch.randint(0, dims.vocab, (4,), generator=g)
        fb = batch(ForwardMode.DECODE, 4, 4, pools=pools, slots=slots.int())
        fb.input_ids, fb.capture_hidden_mode = ids, CaptureHiddenMode.FULL
        fb.aux_hidden_states_buffer = torch.full((4, len(layers) * h), float("nan"), dtype=torch.bfloat16)
        out = model.forward(ids, torch.zeros(4, dtype=torch.long), fb)
        aux = {i: None for i in layers}
        ref = decode_step(weights, ref_state, ids, slots, tp=1, isa="sm_90", aux=aux)
        assert out.hidden_states.data_ptr() == fb.aux_hidden_states_buffer.data_ptr()
        assert torch.isfinite(out.hidden_states.float()).all()
        for j, i in enumerate(sorted(layers)):
            m = measure(out.hidden_states[:, j * h : (j + 1) * h].float(), aux[i].float())
            print(f"step {step} layer {i}: {m}")
            assert m["cosine"] > 0.999, (i, m)
        assert torch.equal(out.next_token_logits.argmax(-1), ref.argmax(-1))


def test_dspark_verify_is_served_and_fills_the_draft_buffer(model, installed, monkeypatch):
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode

    _verify_server(monkeypatch, tokens=8, algorithm="DSPARK")
    built = installed()
    assert set(built.plans) == {("target_verify", 1, 8)}
    _draft_reads(model, monkeypatch, [1, 3])
    built.hooks_factory = reference_mla_hooks({})
    pools = Pools(model, slots=3, verify_tokens=8)
    ids = torch.arange(8) + 5
    fb = batch(ForwardMode.TARGET_VERIFY, 1, 8, pools=pools, slots=torch.tensor([2, -1, -1], dtype=torch.int32))
    fb.input_ids, fb.capture_hidden_mode = ids, CaptureHiddenMode.FULL
    fb.aux_hidden_states_buffer = torch.full((8, 2 * model.config.text_config.hidden_size), float("nan"),
                                             dtype=torch.bfloat16)
    out = model.forward(ids, torch.arange(8), fb)
    assert out.hidden_states is fb.aux_hidden_states_buffer or \
        out.hidden_states.data_ptr() == fb.aux_hidden_states_buffer.data_ptr()
    assert torch.isfinite(fb.aux_hidden_states_buffer.float()).all()


def test_a_draft_that_names_a_layer_past_the_model_is_an_error(model, installed, monkeypatch):
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    built = installed()
    _draft_reads(model, monkeypatch, [1, 9])
    built.hooks_factory = reference_mla_hooks({})
    fb = batch(ForwardMode.DECODE, 2, 2, pools=Pools(model, slots=2), slots=torch.tensor([0, 1], dtype=torch.int32))
    fb.aux_hidden_states_buffer = None
    with pytest.raises(ValueError, match=r"output of layers \[9\]; the model has layers 0..3"):
        model.forward(torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long), fb)


def test_ranks_that_route_different_keys_stop_the_install(model, installed, monkeypatch):
    from sglang.srt.kernel_plugins.amd import binding

    def gather(obj):  # a second rank: the same lookups and reasons, other served keys
        return [obj, frozenset() if isinstance(obj, frozenset) else obj]

    monkeypatch.setattr(binding, "_gather_tp", gather)
    with pytest.raises(RuntimeError, match="the ranks route different graph keys"):
        installed()
    assert "obj" not in BUILT  # refused before build


def test_another_ranks_model_reason_stops_the_install_before_build(model, installed, monkeypatch):
    from sglang.srt.kernel_plugins.amd import binding

    def gather(obj):
        other = ["layer 2: seen on rank 1 only"] if isinstance(obj, list) else obj
        return [obj, other]

    monkeypatch.setattr(binding, "_gather_tp", gather)
    with pytest.raises(ValueError, match="rank 1: layer 2: seen on rank 1 only"):
        installed()
    assert "obj" not in BUILT


def test_a_step_refusal_stops_the_install(model, installed, monkeypatch):
    from sgl_k3_mono.forward.build import StepRefused
    from sgl_k3_mono.forward.layers import StepModel

    monkeypatch.setattr(StepModel, "reasons", lambda self: ["layer 2: a reason only this test has"])
    with pytest.raises(StepRefused, match="layer 2: a reason only this test has"):
        installed()


def test_an_unbuilt_key_is_an_error_not_a_fallback(model, installed):
    from sglang.kernels.plugin_kernels.amd.spec import Plan, ShapeKey

    built = installed()
    with pytest.raises(ValueError, match="which was not built"):
        built.forward(Plan(key=ShapeKey("decode", 9, 1)), torch.zeros(9, dtype=torch.long), None, None)


def test_mla_hook_returns_sglangs_gated_output_and_restores_o_proj(model):
    """SglangHooks.mla on the tiny model's MLA layer, with the attention core stood in for
    (it needs a GPU backend): the layer's own _run_self_attn path is kept up to the core,
    which hands o_proj its output as SGLang's does. The hook must return x * sigmoid(g_proj(h))
    from the module's own gate input, and leave o_proj as it was."""
    from sgl_k3_mono.forward.sglang_hooks import SglangHooks

    dl = model.language_model.model.layers[3]
    attn = dl.self_attn
    g = torch.Generator().manual_seed(3)
    h = torch.randn(2, 256, generator=g).bfloat16()
    x = torch.randn(2, attn.num_local_heads * attn.v_head_dim, generator=g).bfloat16()

    def core(hidden_states, positions, forward_batch, zero_allocator):  # what the module does around its core
        attn._gate_hidden_states = hidden_states
        out, _ = attn.o_proj(x)
        return out

    inner = attn.o_proj.forward
    dl._run_self_attn = core
    try:
        hooks = SglangHooks(model, None, torch.zeros(2, dtype=torch.long), torch.zeros(2, dtype=torch.long),
                            mode="decode", eps=1e-5, isa="sm_90")
        got = hooks.mla(3, h)
    finally:
        del dl._run_self_attn
    want = (x * torch.sigmoid(attn.g_proj(h)[0])).bfloat16()
    assert torch.equal(got, want)
    assert attn.o_proj.forward is inner and attn._gate_hidden_states is None


def test_sglangs_layer_0_agrees_with_the_reference_within_bf16_rounding(model):
    """The step's layer-0 hook runs SGLang's own o_proj, all-reduce and dense MLP (bf16
    GEMMs whose rounding depends on the CPU's vector unit): the stream and the pending add
    it returns agree with the reference's fp32-accumulated layer 0 to a few bf16 roundings,
    on random inputs and a bank with rows."""
    from sgl_k3_mono.dims import K3Dims
    from sgl_k3_mono.forward.sglang_hooks import SglangHooks
    from sgl_k3_mono.numerics import measure
    from sgl_k3_mono.reference.step import DenseLayer, dense_side

    dims = K3Dims.from_config(model.config)
    lm = model.language_model
    attn = lm.model.layers[0].self_attn
    g = torch.Generator().manual_seed(7)
    m, h = 5, dims.hidden
    attn_out = torch.randn(m, attn.o_proj.weight.shape[1], generator=g).bfloat16()
    bank = torch.randn(m, dims.bank_rows(), h, generator=g).bfloat16()
    prefix = torch.randn(m, h, generator=g).bfloat16()
    hooks = SglangHooks(model, None, torch.zeros(m, dtype=torch.long), torch.zeros(m, dtype=torch.long),
                        mode="decode", eps=dims.rms_eps, isa="sm_90")
    for nvb, p_in in ((1, prefix), (1, None)):
        p, add = hooks.dense(0, attn_out, bank, nvb, p_in)
        rp, radd = dense_side(DenseLayer.from_sglang(lm.model.layers[0]), attn_out, bank, nvb, p_in, dims, tp=1,
                              isa="sm_90")
        for name, x, ref in (("stream", p, rp), ("pending add", add, radd)):
            met = measure(x.float(), ref.float())
            print(f"nvb {nvb} prefix {p_in is not None} {name}: {met}")
            assert met["cosine"] > 0.9999 and met["max_abs"] <= 2 ** -6 * ref.abs().max().item(), (name, met)
