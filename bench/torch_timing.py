"""The timed loop of the PyTorch baselines torch_mamba.py and torch_moe.py, as bench_mamba and
bench_moe time the plugin's layers: a training forward and the backward that follows, the
gradients cleared before each, after 3 untimed iterations (first touches of memory, thread start).
"""
import time


def time_forward_backward(forward, leaves, dy, iters):
    """Milliseconds of the forward and of the backward of each of `iters` timed iterations;
    forward() returns the output that dy is the gradient of, `leaves` are the tensors whose
    gradients it accumulates."""
    fwd, bwd = [], []
    for it in range(iters + 3):
        for t in leaves:
            t.grad = None
        t0 = time.perf_counter()
        y = forward()
        t1 = time.perf_counter()
        y.backward(dy)
        t2 = time.perf_counter()
        if it >= 3:
            fwd.append((t1 - t0) * 1e3)
            bwd.append((t2 - t1) * 1e3)
    return fwd, bwd


def median(values):
    """The upper median, as the C++ benchmarks take it."""
    return sorted(values)[len(values) // 2]
