"""The timed loops of the PyTorch baselines (torch_layers.py, torch_mamba.py, torch_moe.py, and
median_ms for torch_mhc.py and gemm_shapes.py), as
bench_layers, bench_mamba and bench_moe time the plugin's layers: a training forward and the
backward that follows, the gradients cleared before each, after 3 untimed iterations (first
touches of memory, thread start); and the one thread pool that torch_mamba.py and torch_moe.py
run in.
"""
import os
import statistics
import sys
import time

import torch


def add_pool_argument(parser):
    """--pool: which thread pool runs the work (prepare_threads)."""
    parser.add_argument("--pool", choices=["torch", "openblas"], default="torch",
                        help="torch: PyTorch's pool of --threads threads, OpenBLAS single-threaded "
                             "(OPENBLAS_NUM_THREADS=1); openblas: OpenBLAS's pool of --threads threads for the "
                             "matrix products (OPENBLAS_NUM_THREADS=--threads), PyTorch's own single-threaded. "
                             "Debian's PyTorch multiplies matrices through OpenBLAS, so for work made of matrix "
                             "products the second is its faster configuration: measure both, report the faster.")


def add_compile_argument(parser):
    """--compile: time torch.compile of the function (PyTorch 2.x) instead of eager."""
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile the layer (inductor, PyTorch 2.x); its compilation falls in the "
                             "untimed warm-up iterations")


def compiled(script, fn, enabled):
    """fn, or torch.compile(fn) when enabled (refused on a PyTorch without torch.compile)."""
    if not enabled:
        return fn
    if not hasattr(torch, "compile"):
        sys.exit(f"{script}: --compile needs PyTorch 2.0 or newer; this is {torch.__version__}")
    return torch.compile(fn)


def prepare_threads(script, threads, pool="torch"):
    """One thread pool of `threads` threads: PyTorch's own (pool "torch"; the OpenBLAS that
    Debian's PyTorch calls for matrix products must not start a second on the same cores, so
    `script` refuses to run without OPENBLAS_NUM_THREADS=1), or OpenBLAS's (pool "openblas":
    OPENBLAS_NUM_THREADS must equal `threads`, and PyTorch's pool is one thread). Subnormal floats
    count as zero, as in plexus-train (run.flush_denormals) and the C++ benchmarks; seed 0."""
    blas = "1" if pool == "torch" else str(threads)
    if os.environ.get("OPENBLAS_NUM_THREADS") != blas:
        sys.exit(f"{script}: set OPENBLAS_NUM_THREADS={blas} (one thread pool: "
                 f"{'PyTorch' if pool == 'torch' else 'OpenBLAS'}'s own)")
    torch.set_num_threads(threads if pool == "torch" else 1)
    torch.set_flush_denormal(True)
    torch.manual_seed(0)


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


def median_ms(fn, reps, sync=lambda: None, warmup=3):
    """The median of `reps` timed calls of fn() in milliseconds, after `warmup` untimed ones;
    sync() (a device synchronization, or nothing) ends each call."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        begin = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - begin) * 1e3)
    return statistics.median(times)


def median(values):
    """The upper median, as the C++ benchmarks take it."""
    return sorted(values)[len(values) // 2]
