"""The runtime: where plugin code runs (worker processes, Ray) and what keeps a run safe around it:
interrupts, file locks, progress, and where a plugin's code came from.
"""
