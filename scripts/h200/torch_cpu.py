# torch CPU SDPA (f32, all cores) on flashcl-bench --preset cpu's attention shapes.
import time, torch
import torch.nn.functional as F
torch.manual_seed(0)
print("torch", torch.__version__, "threads", torch.get_num_threads(), flush=True)
for b, h, lq, lk, d, causal in [(1, 8, 1024, 1024, 64, False), (1, 8, 1024, 1024, 64, True),
                                (1, 8, 1024, 1024, 128, False), (4, 8, 1, 8192, 128, False)]:
    q = torch.randn(b, h, lq, d); k = torch.randn(b, h, lk, d); v = torch.randn(b, h, lk, d)
    f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    for _ in range(2): f()
    ts = []
    for _ in range(5):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    ms = sorted(ts)[2] * 1e3
    pairs = lq * (lq + 1) / 2 if causal else lq * lk
    print(f"torch cpu sdpa f32 B{b} H{h} Lq{lq} Lk{lk} D{d}{' causal' if causal else ''}: "
          f"{ms:.3f} ms, {4 * b * h * pairs * d / ms / 1e9:.4f} TFLOP/s, "
          f"KV {2 * b * h * lk * d * 4 / ms / 1e6:.1f} GB/s", flush=True)
