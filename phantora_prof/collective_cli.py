"""`phantora-prof collective OP ...`: an nccl-tests-style sweep on the simulated network, to
hold against a real `all_reduce_perf` run."""
from __future__ import annotations

import sys

import click


@click.command("collective")
@click.argument("op", type=click.Choice(["all_reduce", "all_gather", "reduce_scatter", "alltoall", "broadcast",
                                         "reduce", "sendrecv"]))
@click.option("--nnodes", default=1, show_default=True, type=int, help="Nodes in the simulated cluster.")
@click.option("--nproc-per-node", default=8, show_default=True, type=int, help="GPUs per node taking part.")
@click.option("--cluster", default="dgx-h100", show_default=True,
              help="Cluster preset (dgx-h100, dgx-h200, dgx-a100) or a TOML cluster file.")
@click.option("-b", "--minbytes", default="8", show_default=True, help="Smallest size (nccl-tests syntax: 8, 64K, 1G).")
@click.option("-e", "--maxbytes", default="8G", show_default=True, help="Largest size.")
@click.option("-f", "--stepfactor", default=2.0, show_default=True, type=float, help="Multiply the size by this.")
@click.option("-d", "--datatype", default="float32", show_default=True, help="Element type (float32, bfloat16, ...).")
@click.option("--algorithm", default=None, help="Force an NCCL algorithm (ring, tree, nvls, nvlstree).")
@click.option("--protocol", default=None, help="Force an NCCL protocol (LL, LL128, Simple).")
@click.option("--show-algorithm", is_flag=True, help="Add the algorithm/protocol NCCL would pick to each row.")
def collective_cmd(op: str, nnodes: int, nproc_per_node: int, cluster: str, minbytes: str, maxbytes: str,
                   stepfactor: float, datatype: str, algorithm: str | None, protocol: str | None,
                   show_algorithm: bool) -> None:
    """Simulate an nccl-tests sweep of OP over NNODES x NPROC_PER_NODE GPUs and print its table.

    \b
    Example:
      phantora-prof collective all_reduce --nnodes 2 --nproc-per-node 8 --cluster dgx-h100 -b 8 -e 8G -f 2
    """
    from netsim.errors import NetsimError
    from netsim.nccl_tests import format_table, parse_size, run_sweep

    try:
        rows = run_sweep(op, nnodes, nproc_per_node, cluster, parse_size(minbytes), parse_size(maxbytes),
                         stepfactor, datatype, algorithm=algorithm, protocol=protocol)
    except NetsimError as exc:
        click.echo(f"phantora-prof collective: error: {exc}", err=True)
        sys.exit(2)
    click.echo(f"# simulated {op} on {nnodes} x {nproc_per_node} GPUs of {cluster} (phantora-prof netsim)")
    click.echo(format_table(rows, show_algorithm=show_algorithm))
