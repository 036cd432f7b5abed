"""Where a real training step's host time goes, from py-spy's raw (collapsed) output (issue #15).

    python tools/holdout/pyspy_steps.py FILE[.gz] [--within FRAME] [--steps N] [--rate HZ] [--top K] [--inclusive K]

py-spy samples a process from outside (`py-spy record --format raw --threads`), so unlike
torch.profiler it does not slow each op down; with Python frames only, a frame's self time
holds the C it calls (an aten op's dispatch and launch show as the Python line that called it).
Kept: the main thread's stacks that pass through FRAME (default `timed_steps`: the examples'
step loop; leave out start-up) and every other thread's (autograd's worker runs the backward).
Prints ms per step (samples / rate / steps) per thread, the top frames by self time and, with
--inclusive, by inclusive time. Samples are not time where the sampler fell behind: compare
shares within one file, not milliseconds across files.
"""
from __future__ import annotations

import argparse
import collections
import gzip
from collections.abc import Iterator


def read_stacks(path: str) -> Iterator[tuple[str, list[str], int]]:
    """(thread id, frames outermost first, samples) per line of a raw py-spy file."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, count = line.rsplit(" ", 1)
            frames = stack.split(";")
            yield frames[0].split(")")[0], frames, int(count)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file")
    p.add_argument("--within", default="timed_steps", help="keep the main thread's stacks through this frame")
    p.add_argument("--steps", type=int, default=1, help="divide by this many steps")
    p.add_argument("--rate", type=float, default=500.0, help="py-spy's --rate")
    p.add_argument("--top", type=int, default=40)
    p.add_argument("--inclusive", type=int, default=0)
    args = p.parse_args()

    rows = list(read_stacks(args.file))
    main_tid = next((tid for tid, frames, _ in rows if "MainThread" in frames[0]), None)
    per_thread: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    for tid, frames, count in rows:
        if tid == main_tid and not any(args.within in f for f in frames):
            continue
        per_thread["main" if tid == main_tid else f"other {tid})"] += count
        self_time[frames[-1] if len(frames) > 1 else "<no Python frame>"] += count
        for f in set(frames[1:]):
            inclusive[f] += count

    def ms(samples: int) -> float:
        return samples / args.rate * 1e3 / args.steps

    print("per thread: " + ", ".join(f"{k} {ms(v):.2f} ms" for k, v in per_thread.items()))
    print("--- self")
    for frame, count in self_time.most_common(args.top):
        print(f"{ms(count):8.2f} ms  {frame[:140]}")
    if args.inclusive:
        print("--- inclusive")
        for frame, count in inclusive.most_common(args.inclusive):
            print(f"{ms(count):8.2f} ms  {frame[:140]}")


if __name__ == "__main__":
    main()
