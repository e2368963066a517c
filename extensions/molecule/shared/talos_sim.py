#!/usr/bin/env python3
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Starts and stops the talos-sim of one Molecule scenario, and talks to its control port.

  talos_sim.py start --binary B --pid-file P --log L --control-address A -- [talos-sim options]
  talos_sim.py stop --pid-file P --control-address A
  talos_sim.py control --control-address A '{"op": "status"}'

A scenario owns fixed addresses, so a simulator left running by an earlier, aborted run (whose pid
file may be in another ephemeral directory) would hold them: start and stop also end the talos-sim
that listens on the scenario's control port, and only a process named talos-sim.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time


def is_talos_sim(pid):
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip() == "talos-sim"
    except OSError:
        return False


def listener_pids(address):
    """Pids of the processes listening on the TCP port of `address` (host:port) on the loopback."""
    port = address.rsplit(":", 1)[1]
    out = subprocess.run(
        ["ss", "-Hltnp", f"sport = :{port}"], capture_output=True, text=True, check=False
    ).stdout
    return {int(p) for p in re.findall(r"pid=(\d+)", out)}


def terminate(pid):
    if not is_talos_sim(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(100):
        if not is_talos_sim(pid):
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True


def stop(args):
    stopped = []
    pids = set()
    if os.path.exists(args.pid_file):
        with open(args.pid_file, encoding="utf-8") as f:
            text = f.read().strip()
        if text.isdigit():
            pids.add(int(text))
        os.remove(args.pid_file)
    pids |= listener_pids(args.control_address)
    for pid in sorted(pids):
        if terminate(pid):
            stopped.append(pid)
    print(json.dumps({"stopped": stopped}))


def start(args, sim_args):
    stop(args)
    cmd = [args.binary, "--control-address", args.control_address, "--pid-file", args.pid_file, *sim_args]
    with open(args.log, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(args.log, encoding="utf-8") as f:
            for line in f:
                if line.startswith("READY "):
                    print(line[len("READY "):].strip())
                    return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    with open(args.log, encoding="utf-8") as f:
        sys.exit(f"talos-sim did not start ({' '.join(cmd)}):\n{f.read()}")


def control(args):
    host, port = args.control_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall((args.request.strip() + "\n").encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    reply = json.loads(data)
    print(json.dumps(reply))
    if not reply.get("ok"):
        sys.exit(f"talos-sim control {args.request}: {reply.get('error')}")


def main():
    argv = sys.argv[1:]
    sim_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, sim_args = argv[:i], argv[i + 1:]
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("start")
    p.add_argument("--binary", required=True)
    p.add_argument("--pid-file", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--control-address", required=True)
    p = sub.add_parser("stop")
    p.add_argument("--pid-file", required=True)
    p.add_argument("--control-address", required=True)
    p = sub.add_parser("control")
    p.add_argument("--control-address", required=True)
    p.add_argument("request")
    args = parser.parse_args(argv)
    if args.command == "start":
        start(args, sim_args)
    elif args.command == "stop":
        stop(args)
    else:
        control(args)


if __name__ == "__main__":
    main()
