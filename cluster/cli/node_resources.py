"""``tlm node-resources``: print the ``ray start`` line that gives this node its role.

Run it on each machine before joining the cluster; paste (or ``eval``) the line it prints.
The resources it advertises (``hw:<key>``, ``measure:<key>`` per device) are what the
collection job places its actors by (cluster/resources.py).
"""
from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "node-resources",
        help="print the 'ray start ... --resources=...' line for this machine",
        description="Detect this machine's hardware and print the exact 'ray start' command "
        "that advertises its hw:<key> and measure:<key> resources.",
    )
    role = p.add_mutually_exclusive_group()
    role.add_argument("--head", action="store_true", help="start the head node of a new cluster")
    role.add_argument("--address", help="join the cluster whose head is at HOST:PORT")
    p.add_argument("--port", type=int, default=6379, help="head node port (with --head)")
    p.add_argument("--with-cpu", action="store_true", help="on a GPU node, also measure the CPU")
    p.add_argument("--json", action="store_true", help="print only the resources as JSON")
    p.add_argument(
        "--expect",
        metavar="KEY",
        help="exit 1 unless this machine's hardware key is KEY (a node-setup check for a "
        "cluster config that declares its keys up front)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from cluster.resources import count_gpus, detect_node_hardware, node_resources, ray_start_command

    hws = detect_node_hardware(with_cpu=args.with_cpu)
    gpus = count_gpus()
    slots = {hw.key: (gpus if hw.kind == "cuda" else 1) for hw in hws}
    res = node_resources(hws, slots)
    if args.expect and args.expect not in slots:
        print(f"this machine is {sorted(slots)}, not {args.expect!r}: fix the node type's resources", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({k: int(v) if float(v).is_integer() else v for k, v in res.items()}, sort_keys=True))
        return 0
    for hw in hws:
        print(f"# {hw.key}: {hw.description or hw.kind} ({slots[hw.key]} measurement slot(s))")
    print(ray_start_command(
        res,
        head=args.head or not args.address,
        address=args.address,
        port=args.port,
        num_gpus=gpus or None,
    ))
    return 0
