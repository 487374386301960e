"""Minimal reproducer: Pallas TPU interpret mode under shard_map deadlocks on a small CPU thread pool.

Not a test (pytest does not collect it: a script to run by hand). Usage:

    python tests/backends/interpret_shard_deadlock.py DEVICES KIB [POOL_THREADS]

runs a kernel that doubles its input block, under shard_map over DEVICES simulated CPU devices, each device
holding KIB KiB of input, with the XLA CPU client's thread pool set to POOL_THREADS (the environment
variable PJRT_NPROC, read by xla/pjrt/utils.cc `DefaultThreadPoolSize`; default: the core count). It prints
"done" and exits 0, or prints "deadlock" and exits 3 after 60 s. Measured with jax 0.10.2 on a 2-core
machine:

    4 devices, 96 KiB, 2 threads: done        4 devices, 100 KiB, 2 threads: deadlock
    4 devices, 128 KiB, 4 threads: deadlock   4 devices, 128 KiB, 5 threads: done
    8 devices, 128 KiB, 8 threads: deadlock   8 devices, 128 KiB, 9 threads: done

Why. Interpret mode runs each device's kernel in io_callbacks and brackets the kernel with barriers over
all devices (jax/_src/pallas/mosaic/interpret/interpret_pallas_call.py: `_barrier` before the first grid
step unless the kernel has a collective id, `_clean_up_shared_memory` after the last, both a
`threading.Barrier(num_devices)`). Inside a callback, an argument (here the device's input block, to be put
in the interpreter's simulated HBM by `_allocate_buffer`) is read back to host memory; XLA copies a buffer
of 100 KiB or more on its CPU client's thread pool instead of in the calling thread
(xla/pjrt/cpu/abstract_cpu_buffer.cc `ToLiteralHelper`, `kSmallDataTransferByteSize = 102400`). Devices
already waiting at the barrier, or for their own copies, hold their threads, so with no more threads than
devices the last copy is never run and every device waits forever. The head-sharded attention hit it as
soon as one shard's KV pool reached 100 KiB (two KV heads of 16 float32 pages of 4 tokens, lanes padded
to 128). The backend's worker sets PJRT_NPROC above its device count (backends/pallas/runtime.py).
"""
from __future__ import annotations

import os
import sys
import threading
import time


def main(devices: int, kib: int, threads: int | None) -> int:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    if threads is not None:
        os.environ["PJRT_NPROC"] = str(threads)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu
    from jax.sharding import Mesh, PartitionSpec

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2.0

    def per_device(x):
        return pl.pallas_call(double, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              interpret=pltpu.InterpretParams())(x)

    mesh = Mesh(np.array(jax.devices()[:devices]), ("d",))
    run = jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=PartitionSpec("d"),
                                out_specs=PartitionSpec("d"), check_vma=False))
    rows = kib * 1024 // (128 * 4)                      # float32 rows of 128 lanes per device
    x = jnp.ones((devices * rows, 128), jnp.float32)
    finished = threading.Event()

    def watchdog():
        if not finished.wait(60):
            print("deadlock", flush=True)
            os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    start = time.time()
    total = float(run(x).sum())
    finished.set()
    assert total == 2.0 * x.size
    print(f"done in {time.time() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    sys.exit(main(args[0], args[1], args[2] if len(args) > 2 else None))
