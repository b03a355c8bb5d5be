"""Calibration: drive real engines to fit the simulator's profiles (`akvc calibrate`).

It lives beside `serve/` rather than inside `sim/`: it launches real vLLM instances and
replays workloads on them (`engine.py`) and fits the serving stage to those replays
(`serving_fit.py`); the simulator only reads what it writes (the profile JSON under
`profiles/data/`, applied by profiles/fitted.py).
"""
