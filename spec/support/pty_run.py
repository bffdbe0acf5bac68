#!/usr/bin/env python3
"""Runs a command on a new pseudo-terminal, the way a person at a terminal would, for specs.

    pty_run.py SCRIPT.json -- CMD [ARGS...]

SCRIPT.json: {"rows": R, "cols": C, "steps": [...]} — the terminal starts R x C, cooked (as a
fresh terminal is), and is the command's controlling terminal (its own session). Steps, in order:
  {"expect": TEXT, "timeout": S}  wait until TEXT (a substring) appears in the output after the
                                  previous expect's match (default timeout 60 s; a miss ends the
                                  script: "failed" names the step)
  {"send": TEXT}                  write TEXT to the terminal (as typed: "\\r" is Enter, "\\u0003" ^C)
  {"sleep": S}                    wait S seconds (reading output meanwhile)
  {"resize": [R, C]}              set the terminal's size (TIOCSWINSZ) and send SIGWINCH
  {"signal": "SIGTERM"}           send a signal to the command
  {"modes": NAME}                 record the terminal's modes now under NAME
  {"run": [ARGV...]}              run a program to its end meanwhile (its output discarded)
Then it waits for the command to exit (SCRIPT's "wait", default 60 s; then it is killed) and
prints one JSON object: {"status": exit status | -signal | null, "output": what the terminal
showed, "failed": null | the step that missed, "modes": {NAME: {...}, "before": ..., "after":
...}} where a mode set is {"icanon", "echo", "isig", "opost"} as booleans. Whatever is left in
the command's process group is killed before it returns.
"""
import fcntl
import json
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time


def modes(fd):
    attrs = termios.tcgetattr(fd)
    oflag, lflag = attrs[1], attrs[3]
    return {"icanon": bool(lflag & termios.ICANON), "echo": bool(lflag & termios.ECHO),
            "isig": bool(lflag & termios.ISIG), "opost": bool(oflag & termios.OPOST)}


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def main():
    sep = sys.argv.index("--")
    with open(sys.argv[1]) as f:
        script = json.load(f)
    argv = sys.argv[sep + 1:]
    master, slave = os.openpty()
    set_size(slave, script.get("rows", 24), script.get("cols", 80))
    result = {"status": None, "output": "", "failed": None, "modes": {"before": modes(slave)}}
    pid = os.fork()
    if pid == 0:
        try:
            os.close(master)
            os.setsid()
            fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
            for fd in (0, 1, 2):
                os.dup2(slave, fd)
            if slave > 2:
                os.close(slave)
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    out = bytearray()
    status = None

    def pump(seconds):
        """Reads output for up to `seconds` (returns early once the command exited)."""
        nonlocal status
        end = time.monotonic() + seconds
        while True:
            left = end - time.monotonic()
            r, _, _ = select.select([master], [], [], max(0.0, min(left, 0.05)))
            if r:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    data = b""
                out.extend(data)
            if status is None:
                p, st = os.waitpid(pid, os.WNOHANG)
                if p == pid:
                    status = os.waitstatus_to_exitcode(st)
            if status is not None and not r:
                return
            if left <= 0:
                return

    mark = 0
    try:
        for step in script.get("steps", []):
            if "expect" in step:
                want = step["expect"].encode()
                deadline = time.monotonic() + step.get("timeout", 60)
                while True:
                    at = out.find(want, mark)
                    if at >= 0:
                        mark = at + len(want)
                        break
                    if status is not None or time.monotonic() >= deadline:
                        result["failed"] = step
                        break
                    pump(0.1)
                if result["failed"]:
                    break
            elif "send" in step:
                os.write(master, step["send"].encode())
                pump(0.05)
            elif "sleep" in step:
                pump(step["sleep"])
            elif "resize" in step:
                set_size(master, step["resize"][0], step["resize"][1])
                if status is None:
                    os.kill(pid, signal.SIGWINCH)
                pump(0.05)
            elif "signal" in step:
                if status is None:
                    os.kill(pid, getattr(signal, step["signal"]))
                pump(0.05)
            elif "modes" in step:
                result["modes"][step["modes"]] = modes(slave)
            elif "run" in step:
                subprocess.run(step["run"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=False)
                pump(0.05)
        deadline = time.monotonic() + script.get("wait", 60)
        while status is None and time.monotonic() < deadline:
            pump(0.2)
        pump(0.1)   # what is still in flight
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if status is None:
            os.waitpid(pid, 0)
    result["status"] = status
    result["modes"]["after"] = modes(slave)
    result["output"] = out.decode("utf-8", "replace")
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
