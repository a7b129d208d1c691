"""The benchmarks' stderr filter: Kineto's trace-point lines go, every other line stays, in order."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROFILE_TWICE = """
import os, sys, torch
from torch.profiler import ProfilerActivity, profile
from benchmarks._profiler_log import without_profiler_trace_points

def work():
    print("python line", file=sys.stderr)
    for _ in range(2):
        with profile(activities=[ProfilerActivity.CPU]):
            torch.ones(3) + 1
    os.write(2, b"c line\\n")

if sys.argv[1] == "filtered":
    with without_profiler_trace_points():
        work()
else:
    work()
print("after the block", file=sys.stderr)
"""


def stderr_of(mode: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROFILE_TWICE, mode], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stderr.splitlines()


def test_the_filter_drops_the_profilers_trace_points_and_keeps_every_other_line():
    filtered = stderr_of("filtered")
    assert filtered == ["python line", "c line", "after the block"]
    # Unfiltered, the same run prints those lines and the trace points (two per profile with torch 2.13), nothing else.
    plain = stderr_of("plain")
    assert [line for line in plain if not line.startswith(("USDT:", "STAGE:"))] == filtered
