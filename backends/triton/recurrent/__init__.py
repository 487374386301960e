"""Recurrent-state kernels of the Triton backend (spec/recurrent.md, RS-*), one module per kernel.

conv1d           causal depthwise conv1d update over a slot pool of windows (RS-10 .. RS-12)
selective_state  one-token selective state update, Mamba1 and multi-head Mamba2 (RS-14 .. RS-16)
ssd_scan         chunked variable-length Mamba2 prefill with initial states and snapshots (RS-17 .. RS-19)
rwkv6            RWKV6 wkv over packed sequences (RS-20)
gated_delta      gated delta rule: chunked WY-form prefill and single-token update (RS-28 .. RS-33)
adapter          argument checks (the reference's own messages), NumPy <-> torch, launches

Importing the package imports neither torch nor triton; the kernel modules do.
"""
