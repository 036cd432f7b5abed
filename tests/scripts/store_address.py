"""Where rank 0's TCPStore listens: prints the local addresses of listening sockets on
MASTER_PORT (from /proc/net/tcp and tcp6)."""
import os
import socket
import struct

import torch.distributed as dist

dist.init_process_group("nccl")
port = int(os.environ["MASTER_PORT"])
found = []
for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
    try:
        lines = open(path).read().splitlines()[1:]
    except OSError:
        continue
    for line in lines:
        local, state = line.split()[1], line.split()[3]
        addr, p = local.split(":")
        if state != "0A" or int(p, 16) != port:
            continue
        raw = bytes.fromhex(addr)
        if family == socket.AF_INET:
            found.append(socket.inet_ntop(family, raw[::-1]))
        else:
            found.append(socket.inet_ntop(family, b"".join(struct.pack("<I", w) for w in struct.unpack(">4I", raw))))
if dist.get_rank() == 0:
    print("master", os.environ["MASTER_ADDR"], "listening", sorted(set(found)), flush=True)
dist.barrier()
dist.destroy_process_group()
