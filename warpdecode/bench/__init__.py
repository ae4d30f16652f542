"""The benchmark harness: timing, the measured ceiling, sweeps to CSV, tuning, figures.

Everything here that times needs a CUDA GPU; the accuracy sweep also runs on the CPU.
"""
