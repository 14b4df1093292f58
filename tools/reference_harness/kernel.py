"""Pure-torch CPU stand-ins for DeepSeek's tilelang inference/kernel.py (semantics C2-C12 of the
ds41 golden's fixture.reference.shim_semantic_choices; SCHEMA §8, §10.3, §10.4)."""
import torch

# C1/C9: torch 1.13 has no float8_e4m3fn / float8_e8m0fnu / float4_e2m1fn_x2. They become ALIASES of
# three real dtypes that model.py and engram.py never use otherwise, so that model.py's Linear and
# ParallelEngramEmbedding constructors and linear()'s dtype dispatch run unmodified:
#   float8_e4m3fn    -> float16    (holding e4m3 values; all exact)
#   float8_e8m0fnu   -> float64    (holding power-of-two scale values)
#   float4_e2m1fn_x2 -> complex128 (real part = packed byte 0..255, low nibble = even element)
DTYPE_ALIASES = (("float8_e4m3fn", torch.float16), ("float8_e8m0fnu", torch.float64),
                 ("float4_e2m1fn_x2", torch.complex128))
ALIASED = []
for _name, _real in DTYPE_ALIASES:
    if not hasattr(torch, _name):
        setattr(torch, _name, _real)
        ALIASED.append(_name)
assert len(ALIASED) in (0, 3), "partial fp8/fp4 dtype support: not handled"

_F8_MAX = 448.0


def _rne_grid(v64: torch.Tensor, min_step: float, mant_bits: int, maxval: float) -> torch.Tensor:
    """Round float64 values to a minifloat grid: step 2^(floor(log2|v|) - mant_bits), at least
    min_step (subnormals), round half to even, saturate at +-maxval. Sign (and -0) kept."""
    a = v64.abs()
    _, e = torch.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    step = torch.pow(2.0, (e - 1 - mant_bits).to(torch.float64))
    step = torch.clamp(step, min=min_step)
    q = torch.round(a / step) * step  # torch.round: half to even; division by 2^k exact
    q = torch.clamp(q, max=maxval)
    return torch.copysign(q, v64)


def e4m3(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> nearest float8_e4m3fn value (as fp32), RNE, subnormal step 2^-9, saturating."""
    return _rne_grid(x.double(), 2.0 ** -9, 3, _F8_MAX).float()


def e2m1(x: torch.Tensor) -> torch.Tensor:
    """fp32 -> nearest e2m1 value (as fp32), ties to even code, clamped to +-6."""
    return _rne_grid(x.double().clamp(-6.0, 6.0), 0.5, 1, 6.0).float()


def fast_round_scale(amax: torch.Tensor, inv: float) -> torch.Tensor:
    """2^ceil(log2(fp32(amax * fp32(inv)))) from the exponent bits (+1 if mantissa non-zero)."""
    v = (amax.float() * torch.tensor(inv, dtype=torch.float32)).float()
    bits = v.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    exp = exp + (mant != 0).to(torch.int32)
    return torch.ldexp(torch.ones_like(v), (exp - 127).to(torch.float32)).float()


def act_quant(x, block_size=128, scale_fmt=None, scale_dtype=None, inplace=False):
    assert x.dtype == torch.bfloat16
    shape = x.shape
    xf = x.float().unflatten(-1, (-1, block_size))
    amax = xf.abs().amax(-1, keepdim=True).clamp_min(1e-4)
    if scale_fmt is not None:
        s = fast_round_scale(amax, 1.0 / 448.0)
    else:
        s = amax * torch.tensor(1.0 / 448.0, dtype=torch.float32)
    q = e4m3(torch.clamp(xf / s, -_F8_MAX, _F8_MAX))
    if inplace:
        x.copy_((q * s).flatten(-2).reshape(shape).to(x.dtype))
        return x
    # C10: q on the e4m3 grid as dtype float8_e4m3fn, s (a power of two with scale_fmt) as scale_dtype
    return (q.flatten(-2).reshape(shape).to(torch.float8_e4m3fn),
            s.squeeze(-1).to(scale_dtype if scale_dtype is not None else torch.float32))


def fp4_act_quant(x, block_size=32, inplace=False, scale_dtype=torch.float8_e8m0fnu):
    assert x.dtype == torch.bfloat16
    shape = x.shape
    xf = x.float().unflatten(-1, (-1, block_size))
    if scale_dtype == torch.float8_e4m3fn:
        amax = xf.abs().amax(-1, keepdim=True).clamp_min(6.0 * 2.0 ** -9)
        s = e4m3((amax / 6.0).float())
    else:
        amax = xf.abs().amax(-1, keepdim=True).clamp_min(6.0 * 2.0 ** -126)
        s = fast_round_scale(amax, 1.0 / 6.0)
    q = e2m1(torch.clamp((xf / s).float(), -6.0, 6.0))
    if inplace:
        x.copy_((q * s).flatten(-2).reshape(shape).to(x.dtype))
        return x
    return q.flatten(-2).reshape(shape), s.squeeze(-1)


def _blocked_gemm(a, a_s, w, w_s):
    """a [M,K] fp32 codes, a_s [M,K/32] fp32 pow2, w [N,K] fp32 codes, w_s [N,K/32] fp32 pow2 ->
    [M,N] fp32: per K block of 32 (increasing), P = sum of exact products in increasing k (fp32, no
    FMA), acc = acc + (P * a_s) * w_s (SCHEMA §10.4, C11/C12)."""
    M, K = a.shape
    N = w.shape[0]
    assert K % 32 == 0 and w.shape[1] == K
    acc = torch.zeros(M, N, dtype=torch.float32)
    for kb in range(K // 32):
        P = torch.zeros(M, N, dtype=torch.float32)
        for k in range(32 * kb, 32 * kb + 32):
            P = P + a[:, k:k + 1] * w[:, k].unsqueeze(0)
        s = a_s[:, kb:kb + 1]
        t = w_s[:, kb].unsqueeze(0)
        part = (P * s) * t
        assert torch.equal(part, P * (s * t)), "fp8/fp4 GEMM scale product under/overflows"
        acc = acc + part
    return acc


def fp8_gemm(a, a_s, b, b_s, scale_dtype=None, block_size=32):
    """C11: A [..., K] e4m3 codes with a_s [..., K/32]; B [N, K] e4m3 codes with b_s [ceil(N/32), K/32]."""
    assert block_size == 32
    K = a.size(-1)
    N = b.size(0)
    a2 = a.reshape(-1, K).float()
    as2 = a_s.reshape(-1, K // 32).float()
    w = b.float()
    ws = b_s.float().repeat_interleave(32, dim=0)[:N]
    y = _blocked_gemm(a2, as2, w, ws)
    return y.to(torch.get_default_dtype()).view(*a.shape[:-1], N)


_E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float32)


def unpack_fp4(b):
    """[N, K/2] packed fp4 (C9: real part = byte, low nibble = even k) -> [N, K] fp32 e2m1 values, -0 kept."""
    by = b.real.to(torch.int64) if b.is_complex() else b.to(torch.int64) & 0xFF
    nib = torch.stack([by & 15, by >> 4], dim=-1).flatten(-2)
    mag = _E2M1[nib & 7]
    return torch.where(nib >= 8, -mag, mag)


def fp4_gemm(a, a_s, b, b_s, scale_dtype=None, act_block_size=32):
    """C12: A [..., K] e4m3 codes with a_s [..., K/act_block_size]; B [N, K/2] packed e2m1 with b_s [N, K/32]."""
    K = a.size(-1)
    N = b.size(0)
    assert act_block_size % 32 == 0
    r = act_block_size // 32
    a2 = a.reshape(-1, K).float()
    as2 = a_s.reshape(-1, K // act_block_size).float().repeat_interleave(r, dim=1)
    w = unpack_fp4(b)
    ws = b_s.float()
    y = _blocked_gemm(a2, as2, w, ws)
    return y.to(torch.get_default_dtype()).view(*a.shape[:-1], N)


def sparse_attn(q, kv, attn_sink, topk_idxs, softmax_scale, block=64):
    """q [b,m,h,d] bf16, kv [b,n,d] bf16, attn_sink [h] f32, topk_idxs [b,m,k] int32 -> [b,m,h,d] bf16."""
    b, m, h, d = q.shape
    k = topk_idxs.size(-1)
    out = torch.empty(b, m, h, d, dtype=torch.float32)
    scale = torch.tensor(softmax_scale, dtype=torch.float32)
    sink = attn_sink.float()
    for bi in range(b):
        kvf = kv[bi].float()
        for mi in range(m):
            idx = topk_idxs[bi, mi].long()
            qf = q[bi, mi].float()  # [h, d]
            mx = torch.full((h,), -1e30, dtype=torch.float32)
            den = torch.zeros(h, dtype=torch.float32)
            acc = torch.zeros(h, d, dtype=torch.float32)
            for s0 in range(0, k, block):
                bidx = idx[s0:s0 + block]
                valid = bidx >= 0
                rows = kvf[bidx.clamp_min(0)] * valid.unsqueeze(-1).float()  # [kb, d], -1 rows zeroed
                sc = (qf @ rows.T) * scale  # [h, kb] fp32
                sc = sc.masked_fill(~valid.unsqueeze(0), -torch.inf)
                new_mx = torch.maximum(mx, sc.amax(-1))
                alpha = torch.exp(mx - new_mx)
                p = torch.exp(sc - new_mx.unsqueeze(-1))
                den = den * alpha + p.sum(-1)
                acc = acc * alpha.unsqueeze(-1) + p.to(torch.bfloat16).float() @ rows
                mx = new_mx
            den = den + torch.exp(sink - mx)
            out[bi, mi] = acc / den.unsqueeze(-1)
    return out.to(torch.bfloat16)


def hc_split_sinkhorn(mixes, hc_scale, hc_base, hc_mult=4, sinkhorn_iters=20, eps=1e-6):
    """mixes [b,s,(2+hc)*hc] fp32 -> pre [b,s,hc], post [b,s,hc], comb [b,s,hc,hc], all fp32."""
    hc = hc_mult
    m = mixes.float()
    sc = hc_scale.float()
    bs = hc_base.float()
    pre = torch.sigmoid(m[..., :hc] * sc[0] + bs[:hc]) + eps
    post = 2 * torch.sigmoid(m[..., hc:2 * hc] * sc[1] + bs[hc:2 * hc])
    c = (m[..., 2 * hc:] * sc[2] + bs[2 * hc:]).unflatten(-1, (hc, hc))
    c = torch.exp(c - c.amax(-1, keepdim=True))
    c = c / c.sum(-1, keepdim=True) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(sinkhorn_iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    return pre, post, c
