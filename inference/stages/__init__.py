"""Pipeline stage implementations: load, prefill and decode variants.

Every class has two faces: `run(...)` (the real torch / file implementation, on the tiny
model) and `work(task, model)` (its analytic cost for the simulator). torch is imported only
when something runs for real (`attention.py`, `kv_cache.py` and `tiny_model.py` are loaded on
first use), so the cost model stays light.
"""
