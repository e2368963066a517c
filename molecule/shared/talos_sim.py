#!/usr/bin/env python3
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Starts and stops the talos-sim of one Molecule run, and talks to its control port.

  talos_sim.py start --binary B --files DIR -- [talos-sim options]
  talos_sim.py stop --files DIR
  talos_sim.py control --files DIR '{"op": "status"}'

DIR is the run's ephemeral directory: it holds talos-sim.pid, talos-sim.log and talos-sim.block.
Each run picks a free 127.0.B.0/24 block (B in 2-19, below the blocks the pytest fixture uses and
not 10, which `make demo` uses), so concurrent runs and simulators left by aborted runs never share
addresses, and a run only ever stops the simulator whose pid it wrote itself. The nodes are
127.0.B.1 and up; the control port is 127.0.B.250:50999.
"""

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

BLOCKS = [b for b in range(2, 20) if b != 10]
CONTROL_HOST = 250
CONTROL_PORT = 50999


def paths(files):
    return {k: os.path.join(files, f"talos-sim.{k}") for k in ("pid", "log", "block")}


def is_talos_sim(pid):
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip() == "talos-sim"
    except OSError:
        return False


def busy_blocks():
    """Blocks with any TCP listener on one of their addresses."""
    out = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True, check=False).stdout
    busy = set()
    for line in out.splitlines():
        for field in line.split():
            if field.startswith("127.0."):
                parts = field.split(".")
                if len(parts) >= 3 and parts[2].isdigit():
                    busy.add(int(parts[2]))
    return busy


def stop(files):
    p = paths(files)
    stopped = []
    if os.path.exists(p["pid"]):
        with open(p["pid"], encoding="utf-8") as f:
            text = f.read().strip()
        if text.isdigit() and is_talos_sim(int(text)):
            pid = int(text)
            os.kill(pid, signal.SIGTERM)
            for _ in range(100):
                if not is_talos_sim(pid):
                    break
                time.sleep(0.1)
            else:
                os.kill(pid, signal.SIGKILL)
            stopped.append(pid)
    # talos-sim removes its pid file itself when it exits cleanly.
    for leftover in (p["pid"], p["block"]):
        with contextlib.suppress(FileNotFoundError):
            os.remove(leftover)
    return stopped


def try_start(binary, files, block, sim_args):
    p = paths(files)
    cmd = [
        binary,
        "--base-address", f"127.0.{block}.1",
        "--control-address", f"127.0.{block}.{CONTROL_HOST}:{CONTROL_PORT}",
        "--pid-file", p["pid"],
        *sim_args,
    ]
    with open(p["log"], "w", encoding="utf-8") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(p["log"], encoding="utf-8") as f:
            for line in f:
                if line.startswith("READY "):
                    return line[len("READY "):].strip()
        if proc.poll() is not None:
            return None
        time.sleep(0.1)
    proc.kill()
    return None


def start(args, sim_args):
    stop(args.files)
    p = paths(args.files)
    free = [b for b in BLOCKS if b not in busy_blocks()]
    random.shuffle(free)
    # Another run may take a block between the check and the bind: then the next one is tried.
    for block in free[:5]:
        ready = try_start(args.binary, args.files, block, sim_args)
        if ready:
            with open(p["block"], "w", encoding="utf-8") as f:
                f.write(f"{block}\n")
            print(ready)
            return
    log = ""
    if os.path.exists(p["log"]):
        with open(p["log"], encoding="utf-8") as f:
            log = f.read()
    sys.exit(f"talos-sim did not start (free blocks tried: {free[:5]} of {BLOCKS}):\n{log}")


def control(args):
    with open(paths(args.files)["block"], encoding="utf-8") as f:
        block = f.read().strip()
    with socket.create_connection((f"127.0.{block}.{CONTROL_HOST}", CONTROL_PORT), timeout=10) as s:
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
    p.add_argument("--files", required=True)
    p = sub.add_parser("stop")
    p.add_argument("--files", required=True)
    p = sub.add_parser("control")
    p.add_argument("--files", required=True)
    p.add_argument("request")
    args = parser.parse_args(argv)
    if args.command == "start":
        start(args, sim_args)
    elif args.command == "stop":
        print(json.dumps({"stopped": stop(args.files)}))
    else:
        control(args)


if __name__ == "__main__":
    main()
