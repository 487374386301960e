"""How the Pallas kernels are compiled and run here: availability, interpret mode, the compiled-kernel cache.

On a TPU the kernels compile with Mosaic; everywhere else they run in Pallas TPU interpret mode
(`pltpu.InterpretParams()`), which executes the kernel body on CPU and simulates HBM, VMEM, SMEM, DMAs and
semaphores, checking their use.

The compiled-kernel cache is bounded by what the process can hold, not by a count. On CPU every compiled
interpret-mode kernel keeps its LLVM code in its own memory mappings (about 150 per executable, measured
with jax 0.10.2), and a process may hold `vm.max_map_count` mappings (65530 by default). A long conformance
run compiles a few hundred distinct kernels; past ~430 of them LLVM cannot map code any more
("LLVM compilation error: Cannot allocate memory") and the next compile dies with SIGSEGV. So before each
call `kernel()` checks the process's mapping count and, past half the limit, drops every compiled kernel
(`jax.clear_caches()`); the next calls recompile what they need.
"""
from __future__ import annotations

import functools
import os
import sys

#: drop compiled kernels once the process holds this fraction of vm.max_map_count mappings
MAP_BUDGET = 0.5
#: CPU devices XLA simulates when jax is first imported by this backend, for the head-sharded attention
#: (PA-49) without a TPU: one per shard count of SHARD_COUNTS.
HOST_DEVICES = 8
_HOST_FLAG = "--xla_force_host_platform_device_count"
#: shard counts the head-sharded attention is claimed for, as far as the devices allow
SHARD_COUNTS = (2, 4, 8)
#: Environment variable sizing the XLA CPU client's thread pool (xla/pjrt/utils.cc `DefaultThreadPoolSize`
#: reads PJRT_NPROC, then NPROC, else the core count). Interpret mode under shard_map deadlocks unless the
#: pool has more threads than devices: each pallas_call is bracketed by barriers over all devices, waited
#: on inside io_callbacks, and a callback argument of 100 KiB or more is read back on that pool, where the
#: waiting devices hold the threads (tests/backends/interpret_shard_deadlock.py: the cause with citations
#: and a plain-kernel reproducer; measured with jax 0.10.2, 4 devices need 5 threads, 8 devices 9). On 2
#: cores the sharded attention hit it once a shard's KV pool reached 100 KiB (two KV heads, 16 pages).
_POOL_ENV = "PJRT_NPROC"
#: XLA CPU compile options for interpret mode. An interpret-mode kernel is compiled once per shape and then
#: runs a few times in a conformance run, and its compile is most of a test's time, so these trade code
#: speed for compile speed: LLVM without its optimizations, XLA's classic elemental emitters instead of its
#: MLIR fusion emitters, one codegen module instead of a split for parallel codegen (two cores run two
#: workers anyway). Measured with jax 0.10.2 on 2 cores, ci profile, 19 compiles each, against the two
#: LLVM flags alone: ssd_chunked_scan differential 31.3 -> 17.0 s with the emitter flag (compiles 18.6 ->
#: 6.3 s); attention differential with sinks 26.0 -> 16.8 s with it, 14.5 s with all four (compiles 15.6 ->
#: 5.0 s). With no flag a compile took ~1.4 s (16 compiles, 21.8 s).
#: None enables fast-math: IEEE semantics are unchanged. Only XLA's CPU backend reads them.
CPU_COMPILE_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true",
                     "--xla_cpu_use_fusion_emitters=false", "--xla_cpu_parallel_codegen_split_count=1")


def configure_host_xla(n: int = HOST_DEVICES) -> None:
    """Before jax is imported, set XLA_FLAGS for interpret mode: `n` CPU devices (head sharding, PA-49) and
    CPU_COMPILE_FLAGS, and a CPU client thread pool of more than `n` threads (`_POOL_ENV`, the shard_map
    deadlock above). XLA reads them when its CPU client starts, so this is done when the backend is made,
    in the worker process, before any kernel runs. A no-op once jax is imported; a flag XLA_FLAGS already
    sets, or a pool size already set, is left as it is; TPU and GPU devices are not affected."""
    if "jax" in sys.modules:
        return
    flags = os.environ.get("XLA_FLAGS", "")
    wanted = [f"{_HOST_FLAG}={n}", *CPU_COMPILE_FLAGS]
    extra = [f for f in wanted if f.split("=")[0] not in flags]
    os.environ["XLA_FLAGS"] = " ".join([flags, *extra]).strip()
    if _POOL_ENV not in os.environ:
        os.environ[_POOL_ENV] = str(max(n + 1, os.cpu_count() or 1))


def _pool_threads() -> int:
    """The XLA CPU client's thread-pool size as xla/pjrt/utils.cc `DefaultThreadPoolSize` reads it."""
    for name in (_POOL_ENV, "NPROC"):
        value = os.environ.get(name, "")
        if value.strip().lstrip("-").isdigit():
            return max(0, int(value))
    return os.cpu_count() or 1


def shard_counts() -> tuple[int, ...]:
    """The shard counts of SHARD_COUNTS this process has devices for (empty without jax or with one device);
    in interpret mode also fewer than the CPU client's threads (`_POOL_ENV`: more would deadlock)."""
    if not jax_status()[0]:
        return ()
    import jax
    devices = jax.device_count() if interpret_params() is None else min(jax.device_count(), _pool_threads() - 1)
    return tuple(n for n in SHARD_COUNTS if n <= devices)


@functools.lru_cache(maxsize=None)
def jax_status() -> tuple[bool, str, str]:
    """(available, reason if not, device description)."""
    try:
        import jax
        from jax.experimental.pallas import tpu  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on the environment
        return False, f"jax with Pallas TPU is not importable ({type(exc).__name__}: {exc})", ""
    platform = jax.default_backend()
    if platform == "tpu":
        return True, "", f"TPU ({jax.devices()[0].device_kind})"
    return True, "", f"{platform} (Pallas TPU interpret mode)"


def interpret_params():
    """None on a TPU (compile with Mosaic), TPU interpret mode everywhere else."""
    import jax
    from jax.experimental.pallas import tpu as pltpu
    return None if jax.default_backend() == "tpu" else pltpu.InterpretParams()


def interpret_context():
    """A context in which every `pallas_call` traced runs as `interpret_params()` says: for third-party
    kernels that take no `interpret` argument (jax's own Pallas ops). A no-op on a TPU."""
    import contextlib
    params = interpret_params()
    if params is None:
        return contextlib.nullcontext()
    from jax.experimental.pallas import tpu as pltpu
    return pltpu.force_tpu_interpret_mode(params)


def mapping_count() -> int | None:
    """This process's memory-mapping count (Linux), None elsewhere."""
    try:
        with open("/proc/self/maps", "rb") as fh:
            return sum(1 for _ in fh)
    except OSError:  # not Linux: no such limit to watch
        return None


@functools.lru_cache(maxsize=None)
def _mapping_limit() -> int | None:
    try:
        with open("/proc/sys/vm/max_map_count") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return None


def release_if_needed() -> bool:
    """Drop every compiled kernel when the process nears its memory-mapping limit; True if it did."""
    limit, count = _mapping_limit(), mapping_count()
    if limit is None or count is None or count < MAP_BUDGET * limit:
        return False
    import jax
    jax.clear_caches()
    return True


def kernel(name: str):
    """The jitted kernel entry point `name` (static arguments named), after the mapping check."""
    release_if_needed()
    return _jitted(name)


@functools.lru_cache(maxsize=None)
def _jitted(name: str):
    import jax
    if name == "attention":
        from .paged_attention import ragged_paged_attention_kernel
        return jax.jit(ragged_paged_attention_kernel, static_argnames=("pages_per_seq", "cfg", "interpret"))
    if name == "mla":
        from .mla import mla_kernel
        return jax.jit(mla_kernel, static_argnames=("pages_per_seq", "block_q", "interpret"))
    if name == "attention_csr":
        from .paged_attention import ragged_paged_attention_csr_kernel
        return jax.jit(ragged_paged_attention_csr_kernel, static_argnames=("cfg", "interpret"))
    if name == "slot_mapping_from_arena":
        from .metadata import slot_mapping_from_arena_kernel
        return jax.jit(slot_mapping_from_arena_kernel, static_argnames=("num_slots", "interpret"))
    if name == "write_kv":
        from .kv_write import write_kv_kernel
        return jax.jit(write_kv_kernel, static_argnames=("quantized", "interpret", "block_tokens"))
    if name == "rotate_keys":
        from .rotation import rotate_keys_kernel
        return jax.jit(rotate_keys_kernel, static_argnames=("per_block", "layout", "rotary_dim", "interpret"))
    if name == "accumulate_scores":
        from .eviction import accumulate_kernel
        return jax.jit(accumulate_kernel, static_argnames=("interpret",))
    if name == "plan_eviction":
        from .eviction import plan_kernel
        return jax.jit(plan_kernel, static_argnames=("interpret",))
    if name == "conv1d":
        from .recurrent.conv1d import conv1d_update_kernel
        return jax.jit(conv1d_update_kernel, static_argnames=("silu", "interpret"))
    if name == "selective_state":
        from .recurrent.selective_state import selective_state_update_kernel
        return jax.jit(selective_state_update_kernel,
                       static_argnames=("heads_per_block", "softplus_dt", "gate", "interpret"))
    if name == "ssd_scan":
        from .recurrent.ssd_scan import ssd_scan_kernel
        return jax.jit(ssd_scan_kernel, static_argnames=("chunk", "num_chunks", "heads_per_block", "num_snapshots",
                                                         "interpret"))
    if name == "rwkv6":
        from .recurrent.rwkv6 import rwkv6_kernel
        return jax.jit(rwkv6_kernel, static_argnames=("window", "num_windows", "heads_per_block", "interpret"))
    if name == "gated_delta_update":
        from .recurrent.gated_delta import gated_delta_update_kernel
        return jax.jit(gated_delta_update_kernel, static_argnames=("heads_per_block", "norm", "interpret"))
    if name == "gated_delta_chunked":
        from .recurrent.gated_delta import gated_delta_chunked_kernel
        return jax.jit(gated_delta_chunked_kernel,
                       static_argnames=("chunk", "num_chunks", "heads_per_block", "norm", "interpret"))
    if name == "store_rows":
        from .recurrent.store import move_rows_kernel
        return jax.jit(move_rows_kernel, static_argnames=("interpret",))
    raise KeyError(name)


__all__ = ["configure_host_xla", "shard_counts", "jax_status", "interpret_params", "interpret_context", "kernel", "release_if_needed", "mapping_count"]
