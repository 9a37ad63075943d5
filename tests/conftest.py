"""Suite-wide settings. Area fixtures live in tests/<area>/conftest.py.

Ray's token auth and usage stats are off for local test clusters (FACTS-tvm-ray.md), and
the slow CUDA tensor-intrinsic import is avoided on CPU-only runs by the collectors' own fix.
"""
import os

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
