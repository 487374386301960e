"""Run control: the output folder and its lock (outdir.py), interrupts (interrupt.py), the gate's verdict
and exit code (gate.py), expectations files (expectations.py) and live progress (progress.py).
Imports only the engine."""
