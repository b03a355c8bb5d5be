"""Calibration: drive real engines to fit the simulator's profiles (`akvc calibrate`).

It lives beside `serve/` rather than inside `sim/`: it launches real vLLM instances and
replays workloads on them (`engine.py`); the simulator only reads what it writes (the profile
JSON under `sim/profiles/data/`, and `sim/serving_fit.py`'s fit of the serving stage).
"""
