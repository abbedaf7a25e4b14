"""K1 phase 2 (kda) for gfx950: the Triton K1's _phase_kda, item for item.

Items (row, head, V-slice) in decode, (head, V-slice) in verify, round-robin over the
grid. Per item:
  1. f = bf16(f_a @ f_b[head]^T) and the decay exp(g) of every token, into LDS
     (thread j = tid % D, tokens of its parity tid // D);
  2. the delta rule on the item's V rows, BV rows a pass: a row is 8 lanes of one
     wave, 16 K columns a lane (geometry.kda_lane), the row's fp32 state in registers;
     q and k (conv + SiLU, bf16, L2 norm) computed by each row's lanes for their own
     columns, the norms summed across the 8 lanes;
  3. the last item of a (row, head) to finish (an agent-scope atomic counter, no grid
     barrier) does the gated output norm and moves the q/k conv windows.
Roundings are the Triton kernel's: conv output bf16, f bf16, o (pre-norm) bf16, out
bf16, the state fp32. The state pools are addressed with 64-bit element offsets."""

from __future__ import annotations

import flydsl.expr as fx
from flydsl.expr import range_constexpr

from sgl_k3_mono.k1.flydsl.geometry import COLS_PER_LANE, LANES_PER_ROW, THREADS
from sgl_k3_mono.k2.flydsl.block import block_sums, exp, sigmoid
from sgl_k3_mono.k2.flydsl.tile import load16
from sgl_k3_mono.runtime.flydsl_sync import ACQ, ACQREL, AGENT, REL, RELAXED, _device

HALF = COLS_PER_LANE // 2


def _ld(ptr, n):
    if n == 1:
        return fx.Float32(fx.generic_load(ptr, dtype=fx.BFloat16))
    return fx.generic_load(ptr, dtype=fx.BFloat16, count=n).to(fx.Float32)


def _tap(win_p, s_cr, proj_p, t0, s, ch, NPROJ: int, KW: int, n: int):
    """n values at channel ch of conv position s: window row s (s < KW - 1) or token
    x_{s - KW + 1}. A static s (decode) reads one source; a traced s reads both at
    in-range rows and keeps one."""
    if isinstance(s, int):
        if s < KW - 1:
            return _ld(win_p + (s * s_cr + ch), n)
        return _ld(proj_p + ((t0 + (s - (KW - 1))) * NPROJ + ch), n)
    from_win = s < KW - 1
    w = _ld(win_p + (from_win.select(s, 0) * s_cr + ch), n)
    x = _ld(proj_p + ((t0 + from_win.select(0, s - (KW - 1))) * NPROJ + ch), n)
    picked = from_win.select(w, x)
    return fx.Float32(picked) if n == 1 else picked


def _silu_bf16(acc):
    return (acc / (1.0 + exp(-acc))).to(fx.BFloat16).to(fx.Float32)


def _conv_cols(win_p, s_cr, proj_p, t0, u, ch0, cw_p, s_cw, NPROJ: int, KW: int):
    taps = [[_tap(win_p, s_cr, proj_p, t0, u + i, ch0 + h * HALF, NPROJ, KW, HALF) for h in range_constexpr(2)]
            for i in range_constexpr(KW)]
    out = []
    for h in range_constexpr(2):
        vals = []
        for c in range_constexpr(HALF):
            w = fx.generic_load(cw_p + ((ch0 + h * HALF + c) * s_cw), dtype=fx.Float32, count=KW)
            acc = taps[0][h][c] * w[0]
            for i in range_constexpr(1, KW):
                acc = acc + taps[i][h][c] * w[i]
            vals.append(acc)
        out.append(_silu_bf16(fx.Vector.from_elements(vals, fx.Float32)))
    return out


def _conv_one(win_p, s_cr, proj_p, t0, u, ch, cw_p, s_cw, NPROJ: int, KW: int):
    acc = fx.Float32(0.0)
    for i in range_constexpr(KW):
        t = _tap(win_p, s_cr, proj_p, t0, u + i, ch, NPROJ, KW, 1) * fx.Float32(fx.ptr_load(cw_p + (ch * s_cw + i)))
        acc = t if i == 0 else acc + t
    return _silu_bf16(acc)


def _write_window(dst_p, s_dst, win_p, s_cr, proj_p, t0, u, ch, NPROJ: int, KW: int):
    """The conv window after token u into dst (row r = position u + r + 1), one channel;
    in place (u == 0) row r reads row r + 1 before row r + 1 is written."""
    for r in range_constexpr(KW - 1):
        v = _tap(win_p, s_cr, proj_p, t0, u + (r + 1), ch, NPROJ, KW, 1)
        fx.generic_store(dst_p + (r * s_dst + ch), fx.BFloat16(v))


def _grp(x):
    for off in (1, 2, 4):
        x = x + fx.gpu.shuffle_xor(x, off, 64)
    return x


def _dot2(a, b):
    return (a[0] * b[0]).reduce("add") + (a[1] * b[1]).reduce("add")


def _gate(a, x, HAS_LB: bool, LB: float):
    if HAS_LB:
        return LB * sigmoid(a * x)
    return -a * (x <= 20.0).select(fx.math.log(1.0 + exp(x)), x)


@_device
def _decay_to_lds(dec, proj_p, fb_r, dtb_p, alog_p, head, t0, T, s_fb: int, P: int, D: int, NPROJ: int,
                  HAS_LB: bool, LB: float):
    tid = fx.thread_idx.x
    j = tid % D
    fx.gpu.barrier()  # the previous item's passes have read dec
    a = exp(fx.Float32(fx.ptr_load(alog_p + head)))
    x_bias = fx.Float32(fx.ptr_load(dtb_p + (head * D + j)))
    fb_row = (head * D + j) * s_fb * 2
    for u in range(tid // D, T, THREADS // D):
        acc = fx.Vector.filled(8, 0.0, fx.Float32)
        for k in range_constexpr(D // 8):
            fa = _ld(proj_p + ((t0 + u) * NPROJ + 4 * P + k * 8), 8)
            fb = load16(fb_r, fb_row + k * 16).bitcast(fx.BFloat16).to(fx.Float32)
            acc = acc + fa * fb
        f = fx.Float32(fx.BFloat16(acc.reduce("add")))
        fx.generic_store(dec.ptr + (u * D + j), exp(_gate(a, f + x_bias, HAS_LB, LB)))
    fx.gpu.barrier()


def _item(item, M, HL: int, NV: int, VERIFY: bool):
    vs = item % NV
    head = (item // NV) % HL
    if VERIFY:
        return fx.Int32(0), head, vs, fx.Int32(0), M
    row = item // (HL * NV)
    return row, head, vs, row, 1


class PtrTable:
    """Pointers the KDA phase uses now and then, kept in LDS (one copy a wave) and read
    back where used: as kernel arguments they sat in SGPRs across the phase and the
    verify token loop spilled SGPRs."""

    def __init__(self, words, ptrs: dict):
        self.types = {n: p.type for n, p in ptrs.items()}
        self.index = {n: i for i, n in enumerate(ptrs)}
        self.at = words.ptr + (fx.thread_idx.x // 64) * len(ptrs)
        for n, p in ptrs.items():
            fx.generic_store(self.at + self.index[n], fx.Int64(fx.ptrtoint(p)))

    def get(self, name):
        return fx.inttoptr(self.types[name], fx.Int64(fx.ptr_load(self.at + self.index[name])))


def _tab_get(tab, name):
    """tab.get(name), spelled so FlyDSL's rewrite does not take the table for loop state."""
    return tab.get(name)


class _Item:
    def __init__(self, tab, **kw):
        self.__dict__.update(kw)
        self._tab = tab

    def __getattr__(self, name):
        if name.endswith("_p") and name[:-2] in self.__dict__["_tab"].index:
            return self.__dict__["_tab"].get(name[:-2])
        raise AttributeError(name)


@_device
def _token(it, u, vr, chv, d0, S0, S1, active, lead):
    D, P, NPROJ, KW = it.D, it.P, it.NPROJ, it.KW
    q = _conv_cols(it.win_p, it.s_cr, it.proj_p, it.t0, u, it.head * D + d0, it.cw_p, it.s_cw, NPROJ, KW)
    k = _conv_cols(it.win_p, it.s_cr, it.proj_p, it.t0, u, P + it.head * D + d0, it.cw_p, it.s_cw, NPROJ, KW)
    v = _conv_one(it.win_p, it.s_cr, it.proj_p, it.t0, u, chv, it.cw_p, it.s_cw, NPROJ, KW)
    qn = fx.Float32(float(D) ** -0.5) / fx.math.sqrt(_grp(_dot2(q, q)) + 1e-6)
    kn = 1.0 / fx.math.sqrt(_grp(_dot2(k, k)) + 1e-6)
    q0 = q[0] * qn
    q1 = q[1] * qn
    k0 = k[0] * kn
    k1 = k[1] * kn
    dec0 = fx.generic_load(it.dec.ptr + (u * D + d0), dtype=fx.Float32, count=HALF)
    dec1 = fx.generic_load(it.dec.ptr + (u * D + d0 + HALF), dtype=fx.Float32, count=HALF)
    beta = sigmoid(_ld(it.proj_p + ((it.t0 + u) * NPROJ + 4 * P + D + it.head), 1))
    S0 = S0 * dec0
    S1 = S1 * dec1
    v_new = beta * (v - _grp((S0 * k0).reduce("add") + (S1 * k1).reduce("add")))
    S0 = S0 + v_new * k0
    S1 = S1 + v_new * k1
    o = _grp((S0 * q0).reduce("add") + (S1 * q1).reduce("add"))
    if lead:
        (it.opre_p + ((it.t0 + u) * P + it.head * D + vr)).store(fx.BFloat16(o))
    if it.VERIFY:
        if active:
            at = it.vssm_p + (fx.Int64(it.vindex) * it.s_vsr + fx.Int64(u * it.s_vst + it.head * it.s_vsh
                                                                       + vr * it.s_vsv + d0))
            fx.generic_store(at, S0)
            fx.generic_store(at + HALF, S1)
        if lead:
            _write_window(it.vconv_p + (it.vindex * it.s_vcr + u * it.s_vct), it.s_vcw, it.win_p, it.s_cr,
                          it.proj_p, it.t0, u, chv, NPROJ, KW)
    return S0, S1


@_device
def _tokens(it, vr, chv, d0, S0, S1, active, lead):
    for u in range(it.T):
        S0, S1 = _token(it, u, vr, chv, d0, S0, S1, active, lead)
    return S0, S1


@_device
def _decode_store(it, s_base, vr, chv, S0, S1, active, lead):
    if active:
        fx.generic_store(s_base, S0)
        fx.generic_store(s_base + HALF, S1)
    if lead:
        _write_window(it.win_p, it.s_cr, it.win_p, it.s_cr, it.proj_p, it.t0, 0, chv, it.NPROJ, it.KW)


def _pass(it, c, rp, d0, active, lead):
    vr = it.vs * (it.D // it.NV) + c * it.BV + active.select(rp, 0)
    s_base = it.ssm_p + (fx.Int64(it.slot) * it.s_ss + fx.Int64(it.head * it.s_sh + vr * it.s_sv + d0))
    S0 = fx.generic_load(s_base, dtype=fx.Float32, count=HALF)
    S1 = fx.generic_load(s_base + HALF, dtype=fx.Float32, count=HALF)
    chv = 2 * it.P + it.head * it.D + vr
    if it.VERIFY:
        _tokens(it, vr, chv, d0, S0, S1, active, lead)
    else:
        S0, S1 = _token(it, 0, vr, chv, d0, S0, S1, active, lead)
        _decode_store(it, s_base, vr, chv, S0, S1, active, lead)


@_device
def _finish(row, head, t0, T, win_p, proj_p, opre_p, cnt_p, out_p, onw_p, vconv_p, vindex, aux, flag,
            s_cr: int, s_vcr: int, s_vct: int, s_vcw: int, s_om: int, HL: int, D: int, KW: int, NV: int,
            VERIFY: bool):
    tid = fx.thread_idx.x
    P = HL * D
    NPROJ = 4 * P + D + HL
    last = tid >= 0
    fx.memory_fence(syncscope=AGENT, ordering=REL)
    fx.gpu.barrier()
    if NV > 1:
        if tid == 0:
            done = fx.atomic_add(cnt_p + (row * HL + head), fx.Int32(1), syncscope=AGENT, ordering=ACQREL)
            fx.generic_store(flag.ptr, done)
        fx.gpu.barrier()
        last = fx.Int32(fx.ptr_load(flag.ptr)) == NV - 1
        fx.gpu.barrier()
    if last:
        fx.memory_fence(syncscope=AGENT, ordering=ACQ)
        if NV > 1:
            if tid == 0:
                fx.atomic_xchg(cnt_p + (row * HL + head), fx.Int32(0), syncscope=AGENT, ordering=RELAXED)
        j = tid % D
        w_on = fx.Float32(fx.ptr_load(onw_p + j))
        ch = (tid // D) * P + head * D + j
        for u in range(T):
            o = _ld(opre_p + ((t0 + u) * P + head * D + j), 1)
            gate = _ld(proj_p + ((t0 + u) * NPROJ + 3 * P + head * D + j), 1)
            ss = block_sums([(tid < D).select(o * o, fx.Float32(0.0))], aux)[0]
            y = o / fx.math.sqrt(ss / float(D) + 1e-5) * w_on * sigmoid(gate)
            if tid < D:
                (out_p + ((t0 + u) * s_om + head * D + j)).store(fx.BFloat16(y))
            if VERIFY:
                _write_window(vconv_p + (vindex * s_vcr + u * s_vct), s_vcw, win_p, s_cr, proj_p, t0, u, ch,
                              NPROJ, KW)
        if not VERIFY:
            fx.gpu.barrier()
            _write_window(win_p, s_cr, win_p, s_cr, proj_p, t0, 0, ch, NPROJ, KW)


@_device
def _live_item(it):
    tid = fx.thread_idx.x
    rp = tid // LANES_PER_ROW
    part = tid % LANES_PER_ROW
    d0 = part * COLS_PER_LANE
    active = rp < it.BV
    lead = active & (part == 0)
    _decay_to_lds(it.dec, it.proj_p, it.fb_r, it.dtb_p, it.alog_p, it.head, it.t0, it.T, it.s_fb, it.P, it.D,
                  it.NPROJ, it.HAS_LB, it.LB)
    for c in range_constexpr((it.D // it.NV) // it.BV):
        _pass(it, c, rp, d0, active, lead)
    _finish(it.row, it.head, it.t0, it.T, it.win_p, it.proj_p, it.opre_p, it.cnt_p, it.out_p, it.onw_p,
            it.vconv_p, it.vindex, it.aux, it.flag, it.s_cr, it.s_vcr, it.s_vct, it.s_vcw, it.s_om, it.HL, it.D,
            it.KW, it.NV, it.VERIFY)


@_device
def _padded_item(out_p, head, vs, t0, T, s_om: int, D: int):
    tid = fx.thread_idx.x
    if vs == 0:
        if tid < D:
            for u in range(T):
                (out_p + ((t0 + u) * s_om + head * D + tid)).store(fx.BFloat16(0.0))


@_device
def kda_phase(M, pad_slot, vindex, ptr_words, ptrs, proj_p, fb_r, slots_p, conv_p, ssm_p, dec, aux, flag,
              s_fb: int, s_cw: int, s_cs: int, s_cr: int, s_ss: int, s_sh: int, s_sv: int,
              s_vcr: int, s_vct: int, s_vcw: int, s_vsr: int, s_vst: int, s_vsh: int, s_vsv: int, s_om: int,
              HL: int, D: int, KW: int, NV: int, BV: int, VERIFY: bool, HAS_LB: bool, LB: float):
    bid = fx.block_idx.x
    nblk = fx.grid_dim.x
    P = HL * D
    tab = PtrTable(ptr_words, ptrs)
    n_items = HL * NV if VERIFY else M * HL * NV
    for item in range(bid, n_items, nblk):
        row, head, vs, t0, T = _item(item, M, HL, NV, VERIFY)
        slot = fx.Int32(fx.ptr_load(slots_p + row))
        if (slot < 0) | (slot == pad_slot):
            _padded_item(_tab_get(tab, "out"), head, vs, t0, T, s_om, D)
        else:
            _live_item(_Item(tab, row=row, head=head, vs=vs, t0=t0, T=T, slot=slot, vindex=vindex,
                             win_p=conv_p + fx.Int64(slot) * s_cs, proj_p=proj_p, fb_r=fb_r, ssm_p=ssm_p,
                             dec=dec, aux=aux, flag=flag,
                             s_fb=s_fb, s_cw=s_cw, s_cr=s_cr, s_ss=s_ss, s_sh=s_sh, s_sv=s_sv, s_vcr=s_vcr,
                             s_vct=s_vct, s_vcw=s_vcw, s_vsr=s_vsr, s_vst=s_vst, s_vsh=s_vsh, s_vsv=s_vsv,
                             s_om=s_om, HL=HL, D=D, P=P, NPROJ=4 * P + D + HL, KW=KW, NV=NV, BV=BV,
                             VERIFY=VERIFY, HAS_LB=HAS_LB, LB=LB))
