"""Process groups in a rank process: `init_process_group('nccl')` and friends, simulated.

The name 'nccl' cannot be re-registered on a CPU build of torch, so `init_process_group`
(and `new_group`) are redirected to the backend "phantora" (`backend.PhantoraProcessGroup`):
collectives on (fake) CUDA tensors are simulated by the coordinator, CPU tensors and Python
objects really travel through a real gloo process group (real TCPStore rendezvous on
MASTER_ADDR/MASTER_PORT). Scripts still see `get_backend() == "nccl"`.
"""
from __future__ import annotations

import functools
import logging

log = logging.getLogger(__name__)

BACKEND = "phantora"
_installed = False

# backends we take over (CUDA collectives); plain "gloo" stays real gloo (CPU training)
_NCCL_SPECS = {None, "", "nccl", "cuda:nccl", "cuda:nccl,cpu:gloo", "cpu:gloo,cuda:nccl", "undefined"}


def _redirect(backend, mirrored: bool = False):
    """The backend a group really gets. Under representative ranks gloo groups are ours too: a
    mirrored member has no process to connect to, and our host collectives give it its
    representative's part (runtime/distributed/host_collectives.py)."""
    if backend is None:
        return BACKEND
    text = str(backend).lower().replace(" ", "")
    if text in _NCCL_SPECS or "nccl" in text or (mirrored and "gloo" in text):
        return BACKEND
    return backend


def _probe_rank():
    """The rank's runtime state when ranks are mirrored (representative ranks), else None."""
    from phantora_prof.runtime.process import state as _state

    try:
        st = _state.get()
    except Exception:  # noqa: BLE001 - not inside a simulated rank
        return None
    return st if getattr(st.config, "representative", False) else None


def install() -> None:
    """Register the backend and redirect the entry points (idempotent; cheap until used)."""
    global _installed
    if _installed:
        return
    _installed = True
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
    except Exception:  # noqa: BLE001 - torch without distributed support
        return
    if not dist.is_available():
        return
    from phantora_prof.runtime.distributed import backend as _backend

    dist.Backend.register_backend(BACKEND, _backend.create, extended_api=True, devices=["cpu", "cuda"])

    orig_init = c10d.init_process_group
    probe = _probe_rank()

    @functools.wraps(orig_init)
    def init_process_group(backend=None, *args, **kwargs):
        kwargs.pop("device_id", None)  # eager NCCL init: nothing to connect here
        return orig_init(_redirect(backend, mirrored=probe is not None), *args, **kwargs)

    orig_new_group = c10d.new_group

    @functools.wraps(orig_new_group)
    def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
        if backend is not None:
            backend = _redirect(backend, mirrored=probe is not None)
        kwargs.pop("device_id", None)
        if probe is not None and probe.config.rank == 0 and ranks is not None:
            from phantora_prof.protocol import GroupDeclared

            probe.channel.send(GroupDeclared(0, tuple(sorted(int(r) for r in ranks)), str(kwargs.get("group_desc") or "")))
        return orig_new_group(ranks, timeout, backend, *args, **kwargs)

    orig_get_backend = c10d.get_backend

    @functools.wraps(orig_get_backend)
    def get_backend(group=None):
        name = orig_get_backend(group)
        return "nccl" if name == BACKEND else name

    orig_batch = c10d.batch_isend_irecv

    @functools.wraps(orig_batch)
    def batch_isend_irecv(p2p_op_list):
        """As with NCCL: the operations of a batch form one group and run concurrently (torch
        coalesces only for the built-in ProcessGroup type, not for a Python subclass)."""
        from phantora_prof.runtime.distributed.backend import PhantoraProcessGroup

        group = (p2p_op_list[0].group if p2p_op_list else None) or c10d._get_default_group()
        if not isinstance(group, PhantoraProcessGroup) or not p2p_op_list[0].tensor.is_cuda:
            return orig_batch(p2p_op_list)
        group.start_coalescing()
        try:
            works = [op.op(op.tensor, op.peer, op.group, op.tag) if op.peer is not None
                     else op.op(op.tensor, None, op.group, op.tag, op.group_peer) for op in p2p_op_list]
        finally:
            group.end_coalescing()
        return [w for w in works if w is not None]

    orig_default_device = getattr(c10d, "_get_pg_default_device", None)
    if orig_default_device is not None:
        @functools.wraps(orig_default_device)
        def _get_pg_default_device(group=None):
            """A simulated group stands for NCCL's: its device is CUDA. torch reads it from the
            backends registered on the group, and registers none on a group its creator returned
            whole, so FSDP1's sharded state dict stopped with "Default device not found". (Its
            object collectives still go through CPU tensors, whose values travel.)"""
            import torch

            from phantora_prof.runtime.distributed.backend import PhantoraProcessGroup

            g = group if group is not None else c10d._get_default_group()
            if isinstance(g, PhantoraProcessGroup):
                return torch.device("cuda", torch.cuda.current_device())
            return orig_default_device(group)

        c10d._get_pg_default_device = _get_pg_default_device

    import sys

    replacements = {orig_init: init_process_group, orig_new_group: new_group, orig_get_backend: get_backend,
                    orig_batch: batch_isend_irecv}
    for mod_name, mod in list(sys.modules.items()):
        # modules that imported these names (device_mesh: `from ...distributed_c10d import ...`)
        if mod is None or not mod_name.startswith("torch.distributed"):
            continue
        for attr in ("init_process_group", "new_group", "get_backend", "batch_isend_irecv"):
            fn = getattr(mod, attr, None)
            if fn in replacements:
                setattr(mod, attr, replacements[fn])
    orig_verify = getattr(dist, "_verify_params_across_processes", None)

    def _verify_params_across_processes(process_group, tensors, logger=None):
        """DDP's check that every rank has the same parameters: in C++ it gathers the metadata
        in CUDA tensors (fake here, no data), so compare it on the CPU instead."""
        from phantora_prof.runtime.distributed.backend import PhantoraProcessGroup

        if not isinstance(process_group, PhantoraProcessGroup):
            return orig_verify(process_group, tensors, logger)
        mine = [(tuple(t.shape), tuple(t.stride())) for t in tensors]
        everyone = [None] * process_group.size()
        c10d.all_gather_object(everyone, mine, group=process_group)
        for r, theirs in enumerate(everyone):
            if len(theirs) != len(mine):
                raise RuntimeError(f"DDP expects same model across all ranks, but Rank {process_group.rank()} has "
                                   f"{len(mine)} params, while rank {r} has inconsistent {len(theirs)} params.")
            for i, (a, b) in enumerate(zip(mine, theirs)):
                if a[0] != b[0]:
                    raise RuntimeError(f"DDP expects same model across all ranks, but Rank {process_group.rank()} "
                                       f"has parameter {i} of shape {list(a[0])}, while rank {r} has {list(b[0])}.")

    if orig_verify is not None:
        dist._verify_params_across_processes = _verify_params_across_processes
    dist.is_nccl_available = lambda: True
    try:
        import torch
        import torch.cuda.nccl as _nccl

        if not hasattr(torch._C, "_nccl_version"):
            _nccl.version = lambda: (2, 28, 9)  # what c10d's logger asks on errors
    except Exception:  # noqa: BLE001
        pass
    c10d.is_nccl_available = dist.is_nccl_available
    _store_on_master_addr()


def _store_on_master_addr() -> None:
    """Rank 0's TCPStore (the env:// rendezvous) listens on MASTER_ADDR only.

    torch's store daemon binds to every interface (`*:MASTER_PORT`); the simulated cluster is
    on this machine (MASTER_ADDR is 127.0.0.1), so nothing else should be able to reach it.
    torch lets the daemon take a socket already listening (`master_listen_fd`, as torchelastic
    does): one bound to MASTER_ADDR. If that cannot be made, torch's own way is kept."""
    import importlib
    import socket

    from torch.distributed import TCPStore

    _rdzv = importlib.import_module("torch.distributed.rendezvous")  # the module (the package exports a function)

    orig = getattr(_rdzv, "_create_c10d_store", None)
    if orig is None or getattr(orig, "_phantora", False):
        return

    def _create_c10d_store(hostname, port, rank, world_size, timeout, use_libuv=True):
        if rank != 0 or _rdzv._torchelastic_use_agent_store():
            return orig(hostname, port, rank, world_size, timeout, use_libuv)
        try:
            family = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)[0][0]
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((hostname, port))
            sock.listen(max(128, world_size))
        except OSError as exc:
            log.debug("could not listen on %s:%s only (%s); the store listens on all interfaces", hostname,
                      port, exc)
            return orig(hostname, port, rank, world_size, timeout, use_libuv)
        # Representative ranks: rank 0 runs alone first, so it must not wait for the others
        wait = _probe_rank() is None
        store = TCPStore(host_name=hostname, port=port, world_size=world_size, is_master=True, timeout=timeout,
                         wait_for_workers=wait, multi_tenant=True, master_listen_fd=sock.fileno(),
                         use_libuv=use_libuv)
        _LISTENERS.append(sock)  # the daemon uses the descriptor: keep the socket open
        return store

    _create_c10d_store._phantora = True
    _rdzv._create_c10d_store = _create_c10d_store


_LISTENERS: list = []
