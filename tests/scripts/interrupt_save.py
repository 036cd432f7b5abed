"""A script that saves on Ctrl-C: `except KeyboardInterrupt:` ends the loop and the "checkpoint"
takes a few seconds of real time (a large torch.save; here a `sleep` of argv[2] s); a second
KeyboardInterrupt during the save would leave no checkpoint. Prints "iter N" as it goes,
"interrupted" when it catches it and "saved" at the end; writes its pid to DIR/pid.RANK first;
checks that the signal module shows its own handler as it set it."""
import os
import signal
import subprocess
import sys

import torch

out, save_s = sys.argv[1], sys.argv[2]
with open(os.path.join(out, f"pid.{os.environ.get('RANK', '0')}"), "w") as f:
    f.write(str(os.getpid()))
assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
x = torch.randn(2048, 2048, device="cuda")
i = 0
try:
    while True:
        y = x @ x
        if i % 20 == 0:
            torch.cuda.synchronize()
            print("iter", i, flush=True)
        i += 1
except KeyboardInterrupt:
    print("interrupted", flush=True)
    for _ in range(int(float(save_s) / 0.05)):  # Python between the waits: a second SIGINT would land here
        subprocess.run(["sleep", "0.05"], check=True)  # (real seconds: time.monotonic is simulated time)
    with open(os.path.join(out, "checkpoint"), "w") as f:
        f.write(str(i))
    print("saved", flush=True)
