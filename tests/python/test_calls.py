"""flashcl's Python calls against a float64 numpy reference of FlashAttention-2's semantics,
on the default device (POCL in CI): fresh random inputs each run (FLASHCL_TEST_SEED repeats
one), the hard cases of the C suites, and errors."""
import math
import os

import numpy as np
import pytest

import flashcl

SEED = int(os.environ.get("FLASHCL_TEST_SEED", np.random.SeedSequence().entropy % 2**32))
print(f"FLASHCL_TEST_SEED={SEED}")


@pytest.fixture
def rng(request):
    return np.random.default_rng([SEED, sum(map(ord, request.node.name))])


def reference(q, k, v, scale=None, causal=False, window=(-1, -1), softcap=0.0, slopes=None,
              sinks=None, bias=None):
    """out (Lq, H, Dv) and lse (H, Lq) of one sequence in float64: q (Lq, H, D), k and v
    (Lk, Hk, D); bias (Lq, Lk), an additive mask shared by the heads (-inf hides a key)."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    lq, heads, dim = q.shape
    lk, group = k.shape[0], heads // k.shape[1]
    scale = 1 / math.sqrt(dim) if scale is None else scale
    out = np.zeros((lq, heads, v.shape[2]))
    lse = np.full((heads, lq), -np.inf)
    if lq == 0 or (lk == 0 and sinks is None):
        return out, lse
    pos = np.arange(lq)[:, None] + lk - lq  # the query's place among the keys
    j = np.arange(lk)[None, :]
    visible = np.ones((lq, lk), dtype=bool)
    if causal:
        visible &= j <= pos
    if window[0] >= 0:
        visible &= j >= pos - window[0]
    if window[1] >= 0:
        visible &= j <= pos + window[1]
    for h in range(heads):
        s = scale * q[:, h] @ k[:, h // group].T
        if softcap:
            s = softcap * np.tanh(s / softcap)
        if slopes is not None:
            s -= slopes[h] * np.abs(pos - j)
        s = np.where(visible, s, -np.inf)
        if bias is not None:
            s = s + bias
        if sinks is not None:
            s = np.concatenate([s, np.full((lq, 1), float(sinks[h]))], axis=1)
        m = s.max(axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0.0)
        e = np.exp(s - m)
        total = e.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(total[:, None] > 0, e / total[:, None], 0.0)
            lse[h] = np.log(total) + m[:, 0]
        out[:, h] = p[:, :lk] @ v[:, h // group]
    return out, lse


def assert_close(got, want, dtype, what):
    got = np.asarray(got, dtype=np.float64)
    if dtype == np.float32:
        atol, nmse_max = 5e-5, 1e-8
    else:  # half storage: f16 rounding of q, k, v, p and the output
        atol, nmse_max = 4e-3, 1e-5
    err = np.abs(got - want)
    assert np.all((err <= atol) | (np.isinf(want) & (got == want))), \
        f"{what}: max |err| {np.nanmax(err)}"
    finite = np.isfinite(want)
    nmse = np.sum((got - want)[finite] ** 2) / max(np.sum(want[finite] ** 2), 1e-300)
    assert nmse <= nmse_max, f"{what}: NMSE {nmse}"


def assert_lse(got, want):
    both_inf = np.isinf(want) & (got == want)
    with np.errstate(invalid="ignore"):
        near = np.abs(got - want) <= 1e-5 * np.maximum(1, np.abs(want))
    assert np.all(both_inf | near), f"lse {got} want {want}"


def tensors(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("case", [
    dict(b=2, lq=7, lk=19, h=4, hk=2, d=64, causal=True),
    dict(b=1, lq=33, lk=33, h=3, hk=3, d=40, causal=False),
    dict(b=3, lq=1, lk=130, h=8, hk=1, d=128, causal=True),           # MQA decoding
    dict(b=1, lq=20, lk=9, h=2, hk=1, d=32, causal=True),             # rows that see no key
    dict(b=2, lq=16, lk=48, h=4, hk=2, d=64, window=(8, 0), causal=True),
    dict(b=1, lq=12, lk=30, h=2, hk=2, d=64, window=(3, 2), softcap=5.0, causal=False),
    dict(b=2, lq=5, lk=23, h=4, hk=4, d=64, alibi=True, causal=True),
    dict(b=1, lq=9, lk=17, h=4, hk=2, d=64, sinks=True, causal=True),
])
def test_flash_attn_func(rng, dtype, case):
    b, lq, lk, h, hk, d = (case[x] for x in ("b", "lq", "lk", "h", "hk", "d"))
    q, k, v = tensors(rng, (b, lq, h, d), dtype), tensors(rng, (b, lk, hk, d), dtype), \
        tensors(rng, (b, lk, hk, d), dtype)
    slopes = rng.uniform(0.05, 0.5, h).astype(np.float32) if case.get("alibi") else None
    sinks = rng.standard_normal(h).astype(np.float32) if case.get("sinks") else None
    window = case.get("window", (-1, -1))
    softcap = case.get("softcap", 0.0)
    q0 = q.copy()
    out, lse, none = flashcl.flash_attn_func(q, k, v, causal=case["causal"], window_size=window,
                                             softcap=softcap, alibi_slopes=slopes,
                                             return_attn_probs=True, sinks=sinks)
    assert none is None and out.dtype == dtype and lse.dtype == np.float32
    assert out.shape == (b, lq, h, d) and lse.shape == (b, h, lq)
    assert np.array_equal(q, q0)
    for i in range(b):
        want, want_lse = reference(q[i], k[i], v[i], causal=case["causal"], window=window,
                                   softcap=softcap, slopes=slopes, sinks=sinks)
        assert_close(out[i], want, dtype, f"sequence {i}")
        assert_lse(lse[i], want_lse)


def test_views_and_scale(rng):
    """q, k and v as slices of one fused tensor (read in place), a given softmax_scale."""
    qkv = tensors(rng, (2, 11, 3, 6, 64), np.float32)  # (batch, len, q/k/v, heads, dim)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    out = flashcl.flash_attn_func(q, k, v, softmax_scale=0.3, causal=True)
    for i in range(2):
        assert_close(out[i], reference(q[i], k[i], v[i], scale=0.3, causal=True)[0], np.float32,
                     f"sequence {i}")


def test_bfloat16(rng):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    q, k, v = (tensors(rng, s, np.float32).astype(bf16) for s in ((1, 8, 2, 64),) * 3)
    out = flashcl.flash_attn_func(q, k, v)
    want = reference(q[0].astype(np.float32), k[0].astype(np.float32), v[0].astype(np.float32))[0]
    assert out.dtype == bf16
    assert np.max(np.abs(out[0].astype(np.float64) - want)) <= 4e-3 + 1e-2 * np.max(np.abs(want))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_flash_attn_varlen_func(rng, dtype):
    lens_q, lens_k = [3, 0, 9, 1], [5, 0, 12, 7]  # an empty sequence
    cu_q, cu_k = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    h, hk, d = 4, 2, 64
    q = tensors(rng, (cu_q[-1], h, d), dtype)
    k, v = tensors(rng, (cu_k[-1], hk, d), dtype), tensors(rng, (cu_k[-1], hk, d), dtype)
    out, lse, _ = flashcl.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k),
                                                  causal=True, return_attn_probs=True)
    assert out.shape == (cu_q[-1], h, d) and lse.shape == (h, cu_q[-1])
    for i in range(4):
        sq, sk = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        want, want_lse = reference(q[sq], k[sk], v[sk], causal=True)
        assert_close(out[sq], want, dtype, f"sequence {i}")
        assert_lse(lse[:, sq], want_lse)


@pytest.mark.parametrize("page", [1, 16, 17])
def test_paged_cache(rng, page):
    """A paged K/V cache with shuffled pages (block_table), sequences of unequal lengths."""
    lens_q, lens_k = [1, 4, 2], [40, 9, 33]
    h, hk, d = 8, 2, 64
    pages_per = -(-max(lens_k) // page)
    num_pages = 3 * pages_per + 2
    table = rng.permutation(num_pages)[:3 * pages_per].reshape(3, pages_per).astype(np.int32)
    k_cache, v_cache = (tensors(rng, (num_pages, page, hk, d), np.float32) for _ in range(2))
    cu_q, cu_k = np.cumsum([0] + lens_q), np.cumsum([0] + lens_k)
    q = tensors(rng, (cu_q[-1], h, d), np.float32)
    out = flashcl.flash_attn_varlen_func(q, k_cache, v_cache, cu_q, cu_k, max(lens_q),
                                         max(lens_k), causal=True, block_table=table)
    for i in range(3):
        keys = np.concatenate([np.arange(page) + p * page for p in table[i]])[:lens_k[i]]
        kk = k_cache.reshape(-1, hk, d)[keys]
        vv = v_cache.reshape(-1, hk, d)[keys]
        sq = slice(cu_q[i], cu_q[i + 1])
        assert_close(out[sq], reference(q[sq], kk, vv, causal=True)[0], np.float32,
                     f"sequence {i}")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_softmax(rng, dtype):
    x = (tensors(rng, (3, 5, 77), np.float32) * 4).astype(dtype)
    x[0, 0] = -np.inf                       # a row of all -inf: 0, lse -inf
    x[1, 2, 5] = np.nan                     # a NaN: its row only
    mask = np.where(rng.random(77) < 0.2, -np.inf, 0).astype(np.float32)
    out, lse = flashcl.softmax(x, scale=0.5, mask=mask, return_lse=True)
    s = 0.5 * x.astype(np.float64) + mask
    with np.errstate(invalid="ignore"):
        m = np.max(s, axis=-1, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(m), m, 0))
        want = e / e.sum(axis=-1, keepdims=True)
    want[0, 0] = 0
    got = out.astype(np.float64)
    assert np.all(np.isnan(got[1, 2])) and not np.any(np.isnan(np.delete(got[1], 2, axis=0)))
    assert np.all(got[0, 0] == 0) and lse[0, 0] == -np.inf
    ok = ~np.isnan(want)
    tol = 1e-6 + 1e-5 * np.abs(want) if dtype == np.float32 else 1e-7 + 1e-3 * np.abs(want)
    assert np.all(np.abs(got - want)[ok] <= tol[ok])
    log_out = flashcl.softmax(x[2], scale=0.5, mask=mask, log=True)
    seen = want[2] > 0
    assert np.allclose(log_out.astype(np.float64)[seen], np.log(want[2][seen]),
                       atol=1e-5 if dtype == np.float32 else 1e-2)
    assert np.all(log_out[~seen] == -np.inf)


def test_empty(rng):
    """No queries or no keys: empty outputs, or 0 with lse -inf (the sink with sinks)."""
    q, k = tensors(rng, (2, 0, 4, 64), np.float32), tensors(rng, (2, 5, 2, 64), np.float32)
    out, lse, _ = flashcl.flash_attn_func(q, k, k, return_attn_probs=True)
    assert out.shape == (2, 0, 4, 64) and lse.shape == (2, 4, 0)
    q = tensors(rng, (2, 3, 4, 64), np.float32)
    sinks = rng.standard_normal(4).astype(np.float32)
    out, lse, _ = flashcl.flash_attn_func(q, k[:, :0], k[:, :0], return_attn_probs=True,
                                          sinks=sinks)
    assert np.all(out == 0) and np.all(lse == sinks[None, :, None])
    out = flashcl.flash_attn_varlen_func(q[0], k[0], k[0], [0, 3], [0, 0], 3, 0)
    assert out.shape == (3, 4, 64) and np.all(out == 0)


def test_errors(rng):
    q = tensors(rng, (1, 4, 2, 64), np.float32)
    k = tensors(rng, (1, 4, 3, 64), np.float32)  # 3 kv heads do not divide 2 query heads
    with pytest.raises(ValueError, match="heads"):
        flashcl.flash_attn_func(q, k, k)
    with pytest.raises(ValueError, match="dropout_p"):
        flashcl.flash_attn_func(q, q, q, dropout_p=0.1)
    with pytest.raises(ValueError, match="4 dimensions"):
        flashcl.flash_attn_func(q[0], q[0], q[0])
    with pytest.raises(TypeError, match="float64"):
        flashcl.flash_attn_func(q.astype(np.float64), q, q)
    with pytest.raises(ValueError, match="cu_seqlens"):
        flashcl.flash_attn_varlen_func(q[0], q[0], q[0], [0, 5], [0, 4], 4, 4)  # past total_q
    with pytest.raises(flashcl.Error):
        flashcl.Context(device="no such device")


def test_threads(rng):
    """The default context from several threads at once."""
    from concurrent.futures import ThreadPoolExecutor
    q = tensors(rng, (1, 9, 2, 64), np.float32)
    want = reference(q[0], q[0], q[0], causal=True)[0]
    with ThreadPoolExecutor(4) as pool:
        for out in pool.map(lambda _: flashcl.flash_attn_func(q, q, q, causal=True), range(8)):
            assert_close(out[0], want, np.float32, "a thread's call")


@pytest.mark.parametrize("paged", [0, 16, 1])
def test_flash_attn_with_kvcache(rng, paged):
    """New tokens appended into the cache in place at cache_seqlens (contiguous rows picked by
    cache_batch_idx, or shuffled pages), then attention over the cache: the cache against the
    expected one exactly, the output against the reference."""
    batch, h, hk, d, new, cap = 3, 8, 2, 64, 2, 48
    lens = np.array([5, 0, 31], dtype=np.int32)
    q = tensors(rng, (batch, new, h, d), np.float32)
    k_new, v_new = tensors(rng, (batch, new, hk, d), np.float32), tensors(rng, (batch, new, hk, d), np.float32)
    if paged:
        pages_per = cap // paged
        table = rng.permutation(batch * pages_per + 3)[:batch * pages_per].reshape(batch, pages_per)
        table = table.astype(np.int32)
        k_cache = tensors(rng, (batch * pages_per + 3, paged, hk, d), np.float32)
        idx = None
    else:
        table = None
        k_cache = tensors(rng, (batch + 2, cap, hk, d), np.float32)
        idx = np.array([4, 0, 2], dtype=np.int32)
    v_cache = tensors(rng, k_cache.shape, np.float32)
    k_flat, v_flat = k_cache.copy(), v_cache.copy()  # the expected caches, appended by hand

    def rows_of(b):  # flat (page or row, slot) of each of sequence b's positions
        pos = np.arange(cap)
        return (table[b, pos // paged], pos % paged) if paged else (np.full(cap, idx[b]), pos)

    for b in range(batch):
        page, slot = rows_of(b)
        sel = slice(lens[b], lens[b] + new)
        k_flat[page[sel], slot[sel]], v_flat[page[sel], slot[sel]] = k_new[b], v_new[b]
    out, lse = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new,
                                               cache_seqlens=lens, cache_batch_idx=idx,
                                               block_table=table, causal=True,
                                               return_softmax_lse=True)
    assert np.array_equal(k_cache, k_flat) and np.array_equal(v_cache, v_flat)
    for b in range(batch):
        page, slot = rows_of(b)
        n = lens[b] + new
        want, want_lse = reference(q[b], k_flat[page[:n], slot[:n]], v_flat[page[:n], slot[:n]],
                                   causal=True)
        assert_close(out[b], want, np.float32, f"sequence {b}")
        assert_lse(lse[b], want_lse)


@pytest.mark.parametrize("window", [(-1, -1), (5, 0)])
def test_kvcache_leftpad(rng, window):
    """cache_leftpad (left-padded batches): keys from row cache_leftpad[b] (the rows before are
    NaN and must not be read), positions counted from it, new tokens at cache_seqlens[b]."""
    batch, h, hk, d, new, cap = 3, 4, 2, 64, 2, 40
    lens, pads = np.array([10, 4, 31], np.int32), np.array([3, 4, 0], np.int32)
    q = tensors(rng, (batch, new, h, d), np.float32)
    k_new, v_new = tensors(rng, (batch, new, hk, d), np.float32), tensors(rng, (batch, new, hk, d), np.float32)
    k_cache, v_cache = tensors(rng, (batch, cap, hk, d), np.float32), tensors(rng, (batch, cap, hk, d), np.float32)
    for b in range(batch):
        k_cache[b, :pads[b]] = v_cache[b, :pads[b]] = np.nan
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    out = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens,
                                          cache_leftpad=pads, causal=True, window_size=window,
                                          alibi_slopes=slopes)
    for b in range(batch):
        keys = slice(pads[b], lens[b] + new)
        assert np.array_equal(k_cache[b, lens[b]:lens[b] + new], k_new[b])
        want = reference(q[b], k_cache[b, keys], v_cache[b, keys], causal=True, window=window,
                         slopes=slopes)[0]
        assert_close(out[b], want, np.float32, f"sequence {b}")


def test_kvcache_errors(rng):
    """Nothing is written where the call is refused."""
    q = tensors(rng, (1, 1, 2, 64), np.float32)
    k_cache = tensors(rng, (1, 8, 2, 64), np.float32)
    k_new = tensors(rng, (1, 3, 2, 64), np.float32)
    before = k_cache.copy()
    with pytest.raises(ValueError, match="exceed"):
        flashcl.flash_attn_with_kvcache(q, k_cache, k_cache, k_new, k_new, cache_seqlens=6)
    with pytest.raises(ValueError, match="rotary"):
        flashcl.flash_attn_with_kvcache(q, k_cache, k_cache, rotary_cos=q, rotary_sin=q)
    with pytest.raises(ValueError, match=r"cache_leftpad\[0\] \(5\) must be between 0 and "
                                         r"cache_seqlens\[0\] \(4\)"):
        flashcl.flash_attn_with_kvcache(q, k_cache, k_cache, k_new, k_new, cache_seqlens=4,
                                        cache_leftpad=[5])
    with pytest.raises(ValueError, match="contiguous cache"):
        flashcl.flash_attn_with_kvcache(q, k_cache, k_cache, k_new, k_new, cache_seqlens=4,
                                        cache_leftpad=[1], cache_batch_idx=[0])
    assert np.array_equal(k_cache, before)
    out = flashcl.flash_attn_with_kvcache(q, k_cache, k_cache, cache_seqlens=4, num_splits=2)
    assert_close(out[0], reference(q[0], before[0, :4], before[0, :4])[0], np.float32, "4 keys")


@pytest.fixture(scope="module")
def queue():
    """A PyOpenCL queue on the device the tests use (FLASHCL_DEVICE's name, else POCL's)."""
    cl = pytest.importorskip("pyopencl")
    want = os.environ.get("FLASHCL_DEVICE", "").lower()
    devices = [d for p in cl.get_platforms() for d in p.get_devices()]
    pick = [d for d in devices if want and want in d.name.lower()] or \
        [d for d in devices if "Portable" in d.platform.name] or devices
    return cl.CommandQueue(cl.Context([pick[0]]))


def test_pyopencl_arrays(rng, queue):
    """The calls on PyOpenCL arrays: the arrays' buffers read in place (q a slice at an offset
    in its buffer), enqueued on their queue, device arrays back; the same as the host calls."""
    import pyopencl.array as cla
    qq = tensors(rng, (3, 10, 4, 64), np.float32)
    k, v = tensors(rng, (2, 21, 2, 64), np.float32), tensors(rng, (2, 21, 2, 64), np.float32)
    q_dev = cla.to_device(queue, qq)[1:]  # offset in its buffer
    assert q_dev.offset > 0
    out, lse, _ = flashcl.flash_attn_func(q_dev, cla.to_device(queue, k), cla.to_device(queue, v),
                                          causal=True, return_attn_probs=True)
    assert isinstance(out, cla.Array) and out.queue is queue
    want, want_lse, _ = flashcl.flash_attn_func(qq[1:], k, v, causal=True, return_attn_probs=True)
    assert np.array_equal(out.get(), want) and np.array_equal(lse.get(), want_lse)
    # packed sequences, and a paged cache
    cu_q, cu_k = np.array([0, 4, 10], np.int32), np.array([0, 21, 42], np.int32)
    qp = qq[1:].reshape(-1, 4, 64)[:10]
    kp, vp = k.reshape(-1, 2, 64), v.reshape(-1, 2, 64)
    got = flashcl.flash_attn_varlen_func(cla.to_device(queue, qp), cla.to_device(queue, kp),
                                         cla.to_device(queue, vp), cu_q, cu_k, 6, 21, causal=True)
    assert np.array_equal(got.get(), flashcl.flash_attn_varlen_func(qp, kp, vp, cu_q, cu_k, 6, 21,
                                                                    causal=True))
    x = tensors(rng, (5, 300), np.float16)
    assert np.array_equal(flashcl.softmax(cla.to_device(queue, x), scale=0.5).get(),
                          flashcl.softmax(x, scale=0.5))
    with pytest.raises(TypeError, match="PyOpenCL"):
        flashcl.flash_attn_func(q_dev, k, v)


def test_masks(rng):
    """Additive (float32, and float16 as ggml's) and boolean masks broadcast over heads
    (transformers' 4-D masks), with a padded key and a fully masked row."""
    q, k = tensors(rng, (2, 6, 4, 64), np.float32), tensors(rng, (2, 9, 2, 64), np.float32)
    allowed = rng.random((2, 1, 6, 9)) < 0.7
    allowed[0, 0, 3] = False  # a row that sees no key: 0
    additive = np.where(allowed, rng.standard_normal(allowed.shape), -np.inf).astype(np.float16)
    for mask in (allowed, additive, additive.astype(np.float32)):
        out = flashcl.flash_attn_func(q, k, k, mask=mask)
        for b in range(2):
            bias = np.where(allowed[b, 0], additive[b, 0] if mask.dtype != bool else 0, -np.inf)
            assert_close(out[b], reference(q[b], k[b], k[b], bias=bias)[0], np.float32,
                         f"sequence {b}")
    with pytest.raises(ValueError, match="broadcast"):
        flashcl.flash_attn_func(q, k, k, mask=allowed[:, :, :5])


def test_devices(rng):
    """flashcl.devices() lists the loader's devices; each "P:D" opens a context that computes."""
    found = flashcl.devices()
    assert found and all(set(d) == {"device", "platform", "name", "type"} for d in found)
    q = tensors(rng, (1, 3, 2, 32), np.float32)
    want = reference(q[0], q[0], q[0])[0]
    for d in found:
        if d["type"] == "cpu" and "Portable" in d["platform"]:
            ctx = flashcl.Context(device=d["device"])
            assert_close(flashcl.flash_attn_func(q, q, q, context=ctx)[0], want, np.float32,
                         d["device"])
            ctx.close()
    try:
        import pyopencl as cl
    except ImportError:
        return
    names = [dev.name.strip() for p in cl.get_platforms() for dev in p.get_devices()]
    assert sorted(names) == sorted(d["name"] for d in found)


def test_probe():
    """flashcl.probe(): the device's fcl_device_info, read through the mirrored struct (each
    bucket's head dims and the device's name land where flashcl.h puts them)."""
    info = flashcl.probe(os.environ.get("FLASHCL_DEVICE"))
    names = [d["name"] for d in flashcl.devices()]
    assert info["name"].strip() in [n.strip() for n in names]
    assert [t["max_head_dim"] for t in info["attention_tiles"]] == [64, 128, 256, 576]
    assert info["compute_units"] >= 1 and info["max_work_group_size"] >= 1
    assert info["tuning"] and info["opencl_c_version"].startswith("OpenCL C")
    with pytest.raises(flashcl.Error):
        flashcl.probe("no such device")


def test_attention_merge(rng):
    """Attention over keys split three ways (one part empty: lse -inf) merged by
    attention_merge equals attention over all of them (float64 reference)."""
    q, k, v = (tensors(rng, (2, 5, 4, 64), np.float32) if i == 0 else
               tensors(rng, (2, 23, 2, 64), np.float32) for i in range(3))
    outs, lses = [], []
    for keys in (slice(0, 7), slice(7, 7), slice(7, 23)):
        out, lse, _ = flashcl.flash_attn_func(q, k[:, keys], v[:, keys], return_attn_probs=True)
        outs.append(out)
        lses.append(np.ascontiguousarray(lse.transpose(0, 2, 1)))  # as out's rows
    out, lse = flashcl.attention_merge(outs, lses)
    for b in range(2):
        want, want_lse = reference(q[b], k[b], v[b])
        assert_close(out[b], want, np.float32, f"sequence {b}")
        assert_lse(lse[b].T, want_lse)
    with pytest.raises(ValueError, match="every out must have shape"):
        flashcl.attention_merge(outs, lses[:2] + [lses[2][:1]])
    with pytest.raises(TypeError, match="float32"):
        flashcl.attention_merge([o.astype(np.float16) for o in outs], lses)


def test_attention_merge_pyopencl(rng, queue):
    """The same merge of PyOpenCL arrays, on their queue: equal to the numpy merge."""
    import pyopencl.array as cla
    outs = [tensors(rng, (3, 6, 32), np.float32) for _ in range(2)]
    lses = [tensors(rng, (3, 6), np.float32) for _ in range(2)]
    lses[1][0, 0] = -np.inf
    out, lse = flashcl.attention_merge([cla.to_device(queue, a) for a in outs],
                                       [cla.to_device(queue, a) for a in lses])
    want, want_lse = flashcl.attention_merge(outs, lses)
    assert isinstance(out, cla.Array) and out.queue is queue
    assert np.array_equal(out.get(), want) and np.array_equal(lse.get(), want_lse)


def decode_cache(cache, fmt, scales):
    """A q8_0 or int8 cache's values in float64, as the contract decodes them."""
    if fmt == "q8_0":
        blocks = cache.reshape(cache.shape[:3] + (-1, 34))
        d = blocks[..., :2].copy().view(np.float16).astype(np.float64)
        return (d * blocks[..., 2:].view(np.int8)).reshape(cache.shape[:3] + (-1,))
    return cache.view(np.int8) * scales.astype(np.float64)[..., None]


@pytest.mark.parametrize("fmt", ["q8_0", "int8"])
def test_kvcache_quantized(rng, fmt):
    """A quantized cache (random bytes; int8 with a scale a row): new tokens encoded into it in
    place (within half a step of their values), attention against the float64 reference over
    the decoded cache."""
    batch, h, hk, d, new, cap = 2, 4, 2, 64, 2, 24
    lens, idx = np.array([7, 15], np.int32), np.array([2, 0], np.int32)
    row = d // 32 * 34 if fmt == "q8_0" else d
    k_cache, v_cache = (rng.integers(0, 256, (batch + 1, cap, hk, row), dtype=np.uint8)
                        for _ in range(2))
    scales = [None, None]
    for i, c in enumerate((k_cache, v_cache)):
        if fmt == "q8_0":  # block factors of 1/256 to 1/16
            blocks = c.reshape(batch + 1, cap, hk, -1, 34)
            d16 = rng.uniform(1 / 256, 1 / 16, blocks.shape[:4] + (1,)).astype(np.float16)
            blocks[..., :2] = d16.view(np.uint8)
        else:
            scales[i] = rng.uniform(0.005, 0.02, (batch + 1, cap, hk)).astype(np.float32)
    q = tensors(rng, (batch, new, h, d), np.float32)
    k_new, v_new = (tensors(rng, (batch, new, hk, d), np.float32) for _ in range(2))
    out = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens,
                                          cache_batch_idx=idx, causal=True, cache_format=fmt,
                                          k_scale=scales[0], v_scale=scales[1])
    kd, vd = decode_cache(k_cache, fmt, scales[0]), decode_cache(v_cache, fmt, scales[1])
    for b in range(batch):
        n = lens[b] + new
        for got, x in ((kd[idx[b], lens[b]:n], k_new[b]), (vd[idx[b], lens[b]:n], v_new[b])):
            step = np.abs(x).max(axis=-1, keepdims=True) / 127
            assert np.all(np.abs(got - x) <= 0.6 * step), f"{fmt} sequence {b}: encoded rows"
        want = reference(q[b], kd[idx[b], :n], vd[idx[b], :n], causal=True)[0]
        assert_close(out[b], want, np.float32, f"{fmt} sequence {b}")
    with pytest.raises(ValueError, match="cache_format must be one of"):
        flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, cache_format="q9")
    with pytest.raises(ValueError, match="uint8 rows of"):
        flashcl.flash_attn_with_kvcache(q[..., :32], k_cache, v_cache, cache_format=fmt)
    with pytest.raises(ValueError, match="come with a cache_format"):
        flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, k_scale=1.0)


@pytest.mark.parametrize("fmt", [None, "q8_0", "int8"])
def test_kvcache_pyopencl(rng, queue, fmt):
    """flash_attn_with_kvcache on PyOpenCL caches (float32, q8_0 paged, int8 with a scale a
    row): the new tokens written into the caller's device caches (fcl_kv_write on their
    queue) and the output, both equal to the numpy call's on the same inputs."""
    import pyopencl.array as cla
    batch, h, hk, d, new = 2, 4, 2, 64, 3
    lens = np.array([5, 11], np.int32)
    row = {None: d, "q8_0": d // 32 * 34, "int8": d}[fmt]
    if fmt is None:
        k_cache, v_cache = (tensors(rng, (batch, 20, hk, d), np.float32) for _ in range(2))
    else:
        k_cache, v_cache = (rng.integers(0, 256, (6, 8, hk, row), dtype=np.uint8) for _ in range(2))
        if fmt == "q8_0":
            for c in (k_cache, v_cache):
                blocks = c.reshape(6, 8, hk, -1, 34)
                blocks[..., :2] = rng.uniform(0.01, 0.05, blocks.shape[:4] + (1,)).astype(
                    np.float16).view(np.uint8)
    table = None if fmt is None else np.array([[4, 1], [0, 5]], np.int32)
    ks = rng.uniform(0.005, 0.02, (6, 8, hk)).astype(np.float32) if fmt == "int8" else None
    q = tensors(rng, (batch, 1, h, d), np.float32)
    k_new, v_new = (tensors(rng, (batch, new, hk, d), np.float32) for _ in range(2))
    extra = dict(cache_format=fmt, k_scale=ks, v_scale=None if ks is None else ks.copy()) \
        if fmt else {}
    dev = [cla.to_device(queue, a) for a in (k_cache, v_cache)]
    dev_scales = {n: cla.to_device(queue, a) for n, a in extra.items() if isinstance(a, np.ndarray)}
    out = flashcl.flash_attn_with_kvcache(cla.to_device(queue, q), dev[0], dev[1], k_new, v_new,
                                          cache_seqlens=lens, block_table=table, causal=True,
                                          **{**extra, **dev_scales})
    want = flashcl.flash_attn_with_kvcache(q, k_cache, v_cache, k_new, v_new, cache_seqlens=lens,
                                           block_table=table, causal=True, **extra)
    assert isinstance(out, cla.Array)
    assert np.array_equal(dev[0].get(), k_cache) and np.array_equal(dev[1].get(), v_cache)
    for name, a in dev_scales.items():
        assert np.array_equal(a.get(), extra[name]), name
    assert np.array_equal(out.get(), want)


def test_mla_head_sizes(rng):
    """MLA's sizes (DeepSeek): q and k of 576, v the first 512 dims of k's rows (read in
    place as a view), one kv head."""
    q, k = tensors(rng, (1, 3, 4, 576), np.float32), tensors(rng, (1, 11, 1, 576), np.float32)
    out = flashcl.flash_attn_func(q, k, k[..., :512], causal=True, softmax_scale=0.05)
    want = reference(q[0], k[0], k[0, ..., :512], scale=0.05, causal=True)[0]
    assert out.shape == (1, 3, 4, 512)
    assert_close(out[0], want, np.float32, "MLA")
