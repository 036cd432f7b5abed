"""A script that stops itself cleanly on SIGTERM (a batch scheduler's warning before the time
limit): its handler sets a flag, the loop ends, the "checkpoint" takes a few seconds of real time
(a large torch.save, an upload; here a `sleep` of argv[2] s), then it exits with argv[3].
Prints "iter N" as it goes and "saved" at the end; writes its pid to DIR/pid.RANK first."""
import os
import signal
import subprocess
import sys

import torch

out, save_s, code = sys.argv[1], sys.argv[2], int(sys.argv[3])
stop = []
signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
with open(os.path.join(out, f"pid.{os.environ.get('RANK', '0')}"), "w") as f:
    f.write(str(os.getpid()))
x = torch.randn(2048, 2048, device="cuda")
i = 0
while not stop:
    y = x @ x
    if i % 20 == 0:
        torch.cuda.synchronize()
        print("iter", i, flush=True)
    i += 1
print("caught", signal.Signals(stop[0]).name, flush=True)
subprocess.run(["sleep", save_s], check=True)
with open(os.path.join(out, "checkpoint"), "w") as f:
    f.write(str(i))
print("saved", flush=True)
sys.exit(code)
