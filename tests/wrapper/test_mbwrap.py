#!/usr/bin/env python3
"""Tests for mbwrap (core/wrapper), run on the host by ctest: test_mbwrap.py PATH_TO_MBWRAP.

Frames are decoded here independently of the C host decoder (python's base64, strict and canonical)
and every run is checked against the ordering rules of core/wrapper/PROTOCOL.md.
"""
import base64
import errno
import os
import pty
import re
import select
import signal
import stat
import subprocess
import sys
import tempfile
import time
import unittest

MBWRAP = None
PY = sys.executable
FRAME_RAW = 24576
# Waiting for a condition that must come true is bounded only so a broken build fails instead of
# hanging; it is never an assertion about speed.
LIVENESS_CAP_S = 30


class Frames:
    def __init__(self):
        self.kinds = []          # sequence of frame kinds: 'o', 'e', '!pgid', '!exit', ...
        self.out = bytearray()
        self.err = bytearray()
        self.pgid = None
        self.exit = None
        self.signal = None
        self.spawn_error = None  # (errno, message)
        self.max_frame = 0


def decode(data, tool=False):
    """Strictly decodes a complete frame stream and checks the protocol's ordering rules."""
    assert data.endswith(b"\n"), "truncated: last line has no newline: %r" % data[-80:]
    f = Frames()
    lines = data[:-1].split(b"\n")
    for i, line in enumerate(lines):
        assert line, "empty line at %d" % i
        assert "!done" not in f.kinds, "frame after !done: %r" % line
        kind = line[:1]
        if kind in (b"o", b"e"):
            payload = line[1:]
            raw = base64.b64decode(payload, validate=True)
            assert base64.b64encode(raw) == payload, "non-canonical base64"
            assert 1 <= len(raw) <= FRAME_RAW, "frame size %d" % len(raw)
            assert "!empty" not in f.kinds, "data after !empty"
            f.max_frame = max(f.max_frame, len(raw))
            (f.out if kind == b"o" else f.err).extend(raw)
            f.kinds.append(kind.decode())
            continue
        assert kind == b"!", "unknown frame kind: %r" % line
        parts = line.decode("ascii").split(" ")
        name = parts[0]
        assert name not in f.kinds, "duplicate %s" % name
        if name == "!pgid":
            assert not tool and not f.kinds, "!pgid must be first"
            assert len(parts) == 2 and re.fullmatch(r"[1-9][0-9]*", parts[1]) and int(parts[1]) > 1
            f.pgid = int(parts[1])
        elif name == "!spawn-error":
            assert not tool and (f.kinds in ([], ["!pgid"])), "spawn-error placement %r" % f.kinds
            assert len(parts) == 3 and re.fullmatch(r"[0-9]+", parts[1])
            msg = base64.b64decode(parts[2], validate=True)
            assert base64.b64encode(msg).decode() == parts[2] and msg
            f.spawn_error = (int(parts[1]), msg.decode())
        elif name in ("!exit", "!signal"):
            assert "!spawn-error" not in f.kinds and "!exit" not in f.kinds and "!signal" not in f.kinds
            assert len(parts) == 2 and re.fullmatch(r"0|[1-9][0-9]*", parts[1])
            n = int(parts[1])
            if name == "!exit":
                assert 0 <= n <= 255
                f.exit = n
            else:
                assert 1 <= n <= 64
                f.signal = n
        elif name == "!empty":
            assert len(parts) == 1
            assert {"!exit", "!signal", "!spawn-error"} & set(f.kinds), "!empty before the exit fact"
        elif name == "!done":
            assert len(parts) == 1 and "!empty" in f.kinds and i == len(lines) - 1
        else:
            raise AssertionError("unknown control frame %r" % line)
        f.kinds.append(name)
    assert f.kinds and f.kinds[-1] == "!done", "incomplete: no !done"
    if not tool:
        assert f.kinds[0] in ("!pgid", "!spawn-error")
    return f


def run(args, env=None, stdin=subprocess.DEVNULL, check_rc=True, extra=()):
    """mbwrap run [extra] -E… -- args; returns (Frames, wrapper stderr)."""
    cmd = [MBWRAP, "run", *extra]
    for k, v in (env if env is not None else {"PATH": "/usr/bin:/bin"}).items():
        cmd += ["-E", "%s=%s" % (k, v)]
    p = subprocess.run(cmd + ["--", *args], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       env={"INHERITED_SHOULD_NOT_LEAK": "1", "PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    if check_rc:
        assert p.returncode == 0, (p.returncode, p.stderr)
    return decode(p.stdout), p.stderr


def tool(*args, rc=0):
    p = subprocess.run([MBWRAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    f = decode(p.stdout, tool=True)
    assert f.exit == rc, (args, f.exit, bytes(f.out))
    assert not f.err
    return bytes(f.out)


class Live:
    """A wrapper running in the background whose frames are read incrementally."""

    def __init__(self, args, grace_ms=None, env=None):
        cmd = [MBWRAP, "run"]
        if grace_ms is not None:
            cmd += ["-g", str(grace_ms)]
        for k, v in (env or {"PATH": "/usr/bin:/bin"}).items():
            cmd += ["-E", "%s=%s" % (k, v)]
        self.p = subprocess.Popen(cmd + ["--", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
        self.buf = bytearray()

    def read_until(self, pred):
        """Reads more stream until pred(decoded-prefix-lines) holds or EOF."""
        fd = self.p.stdout.fileno()
        while not pred(self.buf):
            r, _, _ = select.select([fd], [], [], LIVENESS_CAP_S)
            assert r, "no progress from the wrapper"
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            self.buf.extend(chunk)
        return self.buf

    def finish(self):
        self.read_until(lambda b: False)
        self.p.wait(timeout=LIVENESS_CAP_S)
        self.stderr = self.p.stderr.read()
        self.p.stdout.close()
        self.p.stderr.close()
        return decode(bytes(self.buf))


def read_bytes(path):
    with open(path, "rb") as fh:
        return fh.read()


def complete_lines(buf):
    return bytes(buf[: buf.rfind(b"\n") + 1]).split(b"\n")[:-1]


def stream_so_far(buf, kind=b"o"):
    out = bytearray()
    for line in complete_lines(buf):
        if line[:1] == kind:
            out.extend(base64.b64decode(line[1:]))
    return bytes(out)


def alive(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as fh:
            st = fh.read()
    except FileNotFoundError:
        return False
    return st[st.rfind(")") + 2] not in "ZX"


def wait_state(pid, states):
    """Waits until pid's /proc state letter is one of states."""
    for _ in range(LIVENESS_CAP_S * 100):
        with open("/proc/%d/stat" % pid) as fh:
            st = fh.read()
        if st[st.rfind(")") + 2] in states:
            return
        select.select([], [], [], 0.01)
    raise AssertionError("pid %d never reached state %s" % (pid, states))


def wait_comm(pid, comm):
    for _ in range(LIVENESS_CAP_S * 100):
        with open("/proc/%d/comm" % pid) as fh:
            if fh.read().strip() == comm:
                return
        select.select([], [], [], 0.01)
    raise AssertionError("pid %d never became %s" % (pid, comm))


def session_members(sid):
    res = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as fh:
                st = fh.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        fields = st[st.rfind(")") + 2:].split()
        if int(fields[3]) == sid and fields[0] not in "ZX":
            res.append(int(d))
    return res


class RunMode(unittest.TestCase):
    def test_binary_and_large_output_exact(self):
        data = bytes(range(256)) * 64 + os.urandom(3 * 1024 * 1024 + 17)
        with tempfile.NamedTemporaryFile() as src:
            src.write(data)
            src.flush()
            f, _ = run(["/bin/cat", src.name])
        self.assertEqual(bytes(f.out), data)
        self.assertEqual(f.exit, 0)
        self.assertEqual(f.max_frame, FRAME_RAW)  # large output is cut at the frame limit
        self.assertEqual(f.kinds[-3:], ["!exit", "!empty", "!done"])

    def test_small_writes_to_a_slow_reader_travel_in_large_frames(self):
        # 1 KiB at a time to a reader slower than the program: while frames wait for the reader
        # the wrapper lets the program's pipe fill to a whole frame, so the bytes do not travel
        # one frame per write (~600 frames here if they did).
        prog = ("import os, time\n"
                "for i in range(600):\n"
                "    os.write(1, bytes([i % 251]) * 1024)\n"
                "    time.sleep(0.0005)\n")
        cmd = [MBWRAP, "run", "-E", "PATH=/usr/bin:/bin", "--", PY, "-c", prog]
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        out = bytearray()
        deadline = time.monotonic() + LIVENESS_CAP_S
        while time.monotonic() < deadline:
            chunk = os.read(p.stdout.fileno(), 2048)
            if not chunk:
                break
            out.extend(chunk)
            time.sleep(0.002)   # ~1 MB/s of frames: slower than the program writes
        p.stdout.close()
        self.assertEqual(p.wait(LIVENESS_CAP_S), 0)
        f = decode(bytes(out))
        self.assertEqual(bytes(f.out), b"".join(bytes([i % 251]) * 1024 for i in range(600)))
        self.assertLess(f.kinds.count("o"), 120, f.kinds.count("o"))
        self.assertEqual(f.max_frame, FRAME_RAW)

    def test_every_length_encodes_canonically(self):
        # the wrapper's own base64 (two characters per table lookup) at every length modulo 12
        # and around the frame limit; decode() checks each frame strictly and canonically
        data = os.urandom(FRAME_RAW + 40)
        for n in list(range(1, 40)) + [FRAME_RAW - 1, FRAME_RAW, FRAME_RAW + 1, FRAME_RAW + 13]:
            with tempfile.NamedTemporaryFile() as src:
                src.write(data[:n])
                src.flush()
                f, _ = run(["/bin/cat", src.name])
            self.assertEqual(bytes(f.out), data[:n])

    def test_interleaved_stdout_stderr(self):
        prog = ("import sys\n"
                "for i in range(2000):\n"
                "  sys.stdout.buffer.write(b'out%d\\n' % i); sys.stdout.flush()\n"
                "  sys.stderr.buffer.write(b'err%d\\x00\\xff\\n' % i); sys.stderr.flush()\n")
        f, _ = run([PY, "-c", prog])
        self.assertEqual(bytes(f.out), b"".join(b"out%d\n" % i for i in range(2000)))
        self.assertEqual(bytes(f.err), b"".join(b"err%d\x00\xff\n" % i for i in range(2000)))
        self.assertIn("e", f.kinds)
        self.assertEqual(f.exit, 0)

    def test_exact_environment(self):
        env = {"A": "1", "B": "x y=z\tq", "PATH": "/usr/bin:/bin", "EMPTY": ""}
        f, _ = run(["env"], env=env)
        got = bytes(f.out).decode().splitlines()
        self.assertEqual(sorted(got), sorted("%s=%s" % kv for kv in env.items()))

    def test_no_environment_and_absolute_program(self):
        f, _ = run(["/usr/bin/env"], env={})
        self.assertEqual(bytes(f.out), b"")
        self.assertEqual(f.exit, 0)

    def test_spawn_error_missing_program(self):
        for args, env in ((["no-such-program-mbwrap"], None), (["/no/such/program"], None), (["env"], {})):
            f, _ = run(args, env=env)
            self.assertEqual(f.spawn_error[0], 2, (args, f.spawn_error))
            self.assertIn(args[0], f.spawn_error[1])
            self.assertIsNone(f.exit)
            self.assertIsNone(f.signal)
            self.assertEqual(f.kinds, ["!pgid", "!spawn-error", "!empty", "!done"])

    def test_spawn_error_not_executable(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "prog")
            with open(path, "w") as fh:
                fh.write("#!/bin/sh\necho hi\n")
            os.chmod(path, 0o644)
            f, _ = run([path])
            self.assertEqual(f.spawn_error[0], 13)
            f, _ = run(["prog"], env={"PATH": d})
            self.assertEqual(f.spawn_error[0], 13)

    def test_path_search_uses_given_path(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "myprog")
            with open(path, "w") as fh:
                fh.write("#!/bin/sh\necho from-myprog \"$@\"\n")
            os.chmod(path, 0o755)
            f, _ = run(["myprog", "a b"], env={"PATH": "/nonexistent:" + d})
            self.assertEqual(bytes(f.out), b"from-myprog a b\n")

    def test_exit_codes(self):
        for code in (0, 1, 42, 255):
            f, _ = run(["/bin/sh", "-c", "echo x; exit %d" % code])
            self.assertEqual((f.exit, f.signal), (code, None))
            self.assertEqual(bytes(f.out), b"x\n")

    def test_pgid_is_the_program_session(self):
        prog = "import os; print(os.getpid(), os.getpgid(0), os.getsid(0))"
        f, _ = run([PY, "-c", prog])
        pid, pgid, sid = map(int, bytes(f.out).split())
        self.assertEqual((pid, pgid, sid), (f.pgid, f.pgid, f.pgid))

    def test_signal_death_keeps_output(self):
        f, _ = run(["/bin/sh", "-c", "printf partial; printf errpart >&2; kill -TERM $$"])
        self.assertEqual((f.exit, f.signal), (None, 15))
        self.assertEqual(bytes(f.out), b"partial")
        self.assertEqual(bytes(f.err), b"errpart")

    def test_segv_keeps_output(self):
        prog = ("import sys, ctypes\n"
                "sys.stdout.buffer.write(b'y' * 100000); sys.stdout.flush()\n"
                "ctypes.string_at(0)\n")
        f, _ = run([PY, "-c", prog])
        self.assertEqual(f.signal, signal.SIGSEGV)
        self.assertEqual(bytes(f.out), b"y" * 100000)

    def test_exit_frame_follows_leader_output(self):
        # Everything written before the leader died precedes !exit, even while a descendant keeps
        # the pipe open. Made deterministic by stopping the wrapper until the leader is a zombie,
        # so several frames' worth of output is still queued in the pipe when it is reaped.
        with tempfile.TemporaryDirectory() as d:
            gate, hold = os.path.join(d, "gate"), os.path.join(d, "hold")
            os.mkfifo(gate)
            os.mkfifo(hold)
            prog = ("(read y < %s; echo tail) & read x < %s; head -c 60000 /dev/zero | tr '\\0' a; exit 7"
                    % (hold, gate))
            w = Live(["/bin/sh", "-c", prog])
            w.read_until(lambda b: b"\n" in b)
            pgid = int(complete_lines(w.buf)[0].split()[1])
            wait_comm(pgid, "sh")  # the program runs: the wrapper no longer holds it back
            w.p.send_signal(signal.SIGSTOP)
            with open(gate, "w") as fh:
                fh.write("go\n")
            wait_state(pgid, "Z")
            w.p.send_signal(signal.SIGCONT)
            w.read_until(lambda b: b"!exit" in b)
            self.assertEqual(stream_so_far(w.buf), b"a" * 60000)
            with open(hold, "w") as fh:
                fh.write("go\n")
            f = w.finish()
        self.assertEqual(bytes(f.out), b"a" * 60000 + b"tail\n")
        self.assertEqual(f.exit, 7)
        self.assertEqual(f.kinds[f.kinds.index("!exit"):], ["!exit", "o", "!empty", "!done"])

    def test_stdin_is_inherited(self):
        with open(__file__, "rb") as fh:
            f, _ = run(["/bin/cat"], stdin=fh)
        self.assertEqual(bytes(f.out), read_bytes(__file__))

    def test_stdin_from_argument(self):
        # -i BASE64: the bytes become the program's stdin, then EOF; the wrapper's own stdin is not
        # inherited. More than a pipe buffer's worth is fed without blocking the wrapper.
        data = os.urandom(90000)
        with open(__file__, "rb") as fh:
            f, _ = run(["/bin/cat"], stdin=fh, extra=["-i", base64.b64encode(data).decode()])
        self.assertEqual(bytes(f.out), data)
        f, _ = run(["/bin/cat"], extra=["-i", ""])
        self.assertEqual((bytes(f.out), f.exit), (b"", 0))
        # a program that never reads its stdin still completes
        f, _ = run(["/bin/true"], extra=["-i", base64.b64encode(data).decode()])
        self.assertEqual(f.exit, 0)
        # a descendant keeps reading stdin after the leader exited (more than a pipe buffer)
        f, _ = run(["/bin/sh", "-c", "exec 3<&0; cat <&3 3<&- &"], extra=["-i", base64.b64encode(data).decode()])
        self.assertEqual(bytes(f.out), data)

    def test_env_keys_from_own_environment(self):
        # -K NAME keeps NAME=value from the wrapper's environment (values off the command line);
        # everything else of that environment is dropped.
        own = {"KEEP": "v 1=\t2", "ALSO": "", "DROP_ME": "secret", "PATH": "/usr/bin:/bin"}
        p = subprocess.run([MBWRAP, "run", "-K", "KEEP", "-K", "ALSO", "-E", "PATH=/usr/bin:/bin", "--", "env"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=own)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn(b"secret", p.stdout)
        got = sorted(bytes(decode(p.stdout).out).decode().splitlines())
        self.assertEqual(got, ["ALSO=", "KEEP=v 1=\t2", "PATH=/usr/bin:/bin"])
        # a name missing from the environment is a spawn error, not a silent omission
        p = subprocess.run([MBWRAP, "run", "-K", "NOT_THERE", "--", "/usr/bin/env"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=own)
        f = decode(p.stdout)
        self.assertEqual(f.spawn_error[0], errno.EINVAL)
        self.assertIn("NOT_THERE", f.spawn_error[1])
        self.assertEqual(f.kinds, ["!spawn-error", "!empty", "!done"])

    def test_only_stdio_and_default_signals_reach_the_program(self):
        # The wrapper inherits an extra fd and ignored SIGINT/SIGHUP; the program sees neither.
        r, w = os.pipe()

        def prep():
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        try:
            outs = []
            for prog in (["ls", "/proc/self/fd"], ["grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"]):
                p = subprocess.run([MBWRAP, "run", "-E", "PATH=/usr/bin:/bin", "--", *prog], stdout=subprocess.PIPE,
                                   pass_fds=(r, w), preexec_fn=prep, stdin=subprocess.DEVNULL)
                outs.append(bytes(decode(p.stdout).out).decode().split())
        finally:
            os.close(r)
            os.close(w)
        self.assertEqual(outs[0], ["0", "1", "2", "3"])  # 3 is ls's own directory descriptor
        self.assertEqual(outs[1], ["SigBlk:", "0" * 16, "SigIgn:", "0" * 16])

    def test_usage_errors_emit_no_frames(self):
        for args in (["run", "--"], ["run", "-x", "1", "--", "true"], ["run", "-E", "NOEQUALS", "--", "true"],
                     ["run", "-E", "A=1", "-E", "A=2", "--", "true"], ["run", "-g", "abc", "--", "true"],
                     ["run", "-i", "a", "--", "true"], ["run", "-i", "YQ=a", "--", "true"],
                     ["run", "-K", "A=B", "--", "true"], ["run", "-K", "", "--", "true"],
                     ["run", "-E", "PATH=/x", "-K", "PATH", "--", "true"],
                     ["bogus"], ["stat"], ["signal", "1", "TERM"]):
            p = subprocess.run([MBWRAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.assertEqual(p.returncode, 2, args)
            self.assertEqual(p.stdout, b"", args)
            self.assertTrue(p.stderr, args)


class Termination(unittest.TestCase):
    def test_term_ignoring_program_reports_kill_after_death(self):
        prog = "trap 'echo got-term' TERM; echo ready; while :; do sleep 0.05; done"
        w = Live(["/bin/sh", "-c", prog], grace_ms=300)
        w.read_until(lambda b: b"ready" in stream_so_far(b))
        pgid = int(complete_lines(w.buf)[0].split()[1])
        self.assertTrue(alive(pgid))
        w.p.send_signal(signal.SIGTERM)
        # The !signal frame may only appear once the leader is dead and reaped.
        w.read_until(lambda b: b"!signal" in b)
        self.assertFalse(alive(pgid))
        f = w.finish()
        self.assertIn(b"got-term", bytes(f.out))  # TERM reached it, and it survived TERM
        self.assertEqual((f.exit, f.signal), (None, 9))
        self.assertEqual(session_members(pgid), [])
        self.assertEqual(w.p.returncode, 0)

    def test_zero_grace_kills_at_once(self):
        w = Live(["/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"], grace_ms=0)
        w.read_until(lambda b: b"ready" in stream_so_far(b))
        w.p.send_signal(signal.SIGTERM)
        f = w.finish()
        self.assertEqual(f.signal, signal.SIGKILL)

    def test_double_forked_grandchild_is_killed_and_reaped(self):
        with tempfile.TemporaryDirectory() as d:
            pidfile = os.path.join(d, "gpid")
            prog = ("import os, signal, sys, time\n"
                    "if os.fork() == 0:\n"
                    "    os.setsid()\n"
                    "    if os.fork() == 0:\n"
                    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                    "        fd = os.open('/dev/null', os.O_RDWR)\n"
                    "        os.dup2(fd, 1); os.dup2(fd, 2)\n"
                    "        open(%r + '.tmp', 'w').write(str(os.getpid()))\n"
                    "        os.rename(%r + '.tmp', %r)\n"
                    "        while True: time.sleep(1)\n"
                    "    os._exit(0)\n"
                    "os.wait()\n"
                    "while not os.path.exists(%r): time.sleep(0.01)\n"
                    "print('ready', flush=True)\n"
                    "while True: time.sleep(1)\n") % (pidfile, pidfile, pidfile, pidfile)
            w = Live([PY, "-c", prog], grace_ms=200)
            w.read_until(lambda b: b"ready" in stream_so_far(b))
            gpid = int(read_bytes(pidfile))
            with open("/proc/%d/stat" % gpid) as fh:
                st = fh.read()
            ppid = int(st[st.rfind(")") + 2:].split()[1])
            self.assertEqual(ppid, w.p.pid)  # reparented to the subreaper, not to init
            w.p.send_signal(signal.SIGTERM)
            f = w.finish()
            self.assertEqual(f.signal, 15)
            # The wrapper reaped it before !empty: it is gone, not even a zombie.
            self.assertFalse(os.path.exists("/proc/%d" % gpid) and alive(gpid))
            self.assertFalse(os.path.exists("/proc/%d/stat" % gpid))

    def test_pipe_holding_grandchild(self):
        with tempfile.TemporaryDirectory() as d:
            fifo = os.path.join(d, "go")
            os.mkfifo(fifo)
            prog = "(read x < %s; echo late; echo late-err >&2) & echo early" % fifo
            w = Live(["/bin/sh", "-c", prog])
            w.read_until(lambda b: b"!exit" in b)
            self.assertNotIn(b"!empty", w.buf)  # the grandchild is still alive
            self.assertEqual(stream_so_far(w.buf), b"early\n")
            with open(fifo, "w") as fh:
                fh.write("go\n")
            f = w.finish()
            self.assertEqual(f.exit, 0)
            self.assertEqual(bytes(f.out), b"early\nlate\n")
            self.assertEqual(bytes(f.err), b"late-err\n")
            self.assertLess(f.kinds.index("!exit"), len(f.kinds) - 3)
            self.assertEqual(f.kinds[f.kinds.index("!exit") + 1:][-2:], ["!empty", "!done"])

    def test_sighup_and_sigint_terminate(self):
        for sig in (signal.SIGHUP, signal.SIGINT):
            w = Live(["/bin/sh", "-c", "echo ready; exec sleep 1000"], grace_ms=5000)
            w.read_until(lambda b: b"ready" in stream_so_far(b))
            w.p.send_signal(sig)
            f = w.finish()
            self.assertEqual(f.signal, signal.SIGTERM)

    def test_stopped_program_is_terminated(self):
        # A stopped program still dies: TERM is followed by CONT.
        w = Live(["/bin/sh", "-c", "echo ready; kill -STOP $$; echo never"], grace_ms=5000)
        w.read_until(lambda b: b"ready" in stream_so_far(b))
        pgid = int(complete_lines(w.buf)[0].split()[1])
        wait_state(pgid, "T")
        w.p.send_signal(signal.SIGTERM)
        f = w.finish()
        self.assertEqual(f.signal, signal.SIGTERM)
        self.assertNotIn(b"never", bytes(f.out))

    def test_vanished_reader_kills_tree(self):
        p = subprocess.Popen([MBWRAP, "run", "-g", "100", "--", "/usr/bin/yes"], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL)
        first = p.stdout.readline()
        pgid = int(first.split()[1])
        p.stdout.read(100000)
        p.stdout.close()
        rc = p.wait(timeout=LIVENESS_CAP_S)
        self.assertEqual(rc, 1)
        self.assertEqual(session_members(pgid), [])


class Spill(unittest.TestCase):
    def test_spill_within_cap(self):
        with tempfile.TemporaryDirectory() as d:
            so, se = os.path.join(d, "out:log"), os.path.join(d, "err.log")
            data = os.urandom(200000)
            with tempfile.NamedTemporaryFile() as src:
                src.write(data)
                src.flush()
                cmd = "cat %s; cat %s >&2" % (src.name, src.name)
                f, err = run(["/bin/sh", "-c", cmd], extra=["-o", "%s:%d" % (so, len(data)), "-e",
                                                             "%s:%d" % (se, 10 * len(data))])
            self.assertEqual(bytes(f.out), data)
            for path in (so, se):
                with open(path, "rb") as fh:
                    self.assertEqual(fh.read(), data)
                self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            self.assertEqual(err, b"")

    def test_spill_over_cap_is_removed_and_noted(self):
        with tempfile.TemporaryDirectory() as d:
            so = os.path.join(d, "out.log")
            with open(so, "w") as fh:  # a stale file of the same name is replaced, then removed
                fh.write("old")
            f, err = run(["/bin/sh", "-c", "head -c 100001 /dev/zero"], extra=["-o", "%s:100000" % so])
            self.assertEqual(bytes(f.out), b"\0" * 100001)  # the stream itself is intact
            self.assertFalse(os.path.exists(so))
            self.assertIn(b"mbwrap: stdout spill removed", err)

    def test_spill_open_failure_is_spawn_error(self):
        # only the spill's own directory is made: a missing grandparent is ENOENT
        f, _ = run(["/bin/true"], extra=["-o", "/nonexistent-dir/sub/x:10"])
        self.assertEqual(f.kinds, ["!spawn-error", "!empty", "!done"])
        self.assertEqual(f.spawn_error[0], 2)
        self.assertFalse(os.path.exists("/nonexistent-dir"))

    def test_spill_directory_is_made_on_first_use(self):
        with tempfile.TemporaryDirectory() as d:
            so = os.path.join(d, "processes", "out.log")
            f, err = run(["/bin/sh", "-c", "echo hi"], extra=["-o", "%s:100" % so])
            self.assertEqual(bytes(f.out), b"hi\n")
            self.assertEqual(read_bytes(so), b"hi\n")
            self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(so)).st_mode), 0o700)
            self.assertEqual(err, b"")

    def test_spill_within_keep_min_is_removed_quietly(self):
        with tempfile.TemporaryDirectory() as d:
            so, se = os.path.join(d, "out.log"), os.path.join(d, "err.log")
            f, err = run(["/bin/sh", "-c", "printf 12345; printf 123456 >&2"],
                         extra=["-o", "%s:100" % so, "-k", "o:5", "-e", "%s:100" % se, "-k", "e:5"])
            self.assertEqual(bytes(f.out), b"12345")
            self.assertFalse(os.path.exists(so))           # 5 <= 5: the tail holds it whole
            self.assertEqual(read_bytes(se), b"123456")    # 6 > 5: needed
            self.assertEqual(err, b"")
            f, _ = run(["/bin/true"], extra=["-o", "%s:100" % so, "-k", "o:0"])
            self.assertFalse(os.path.exists(so))           # empty streams leave nothing

    def test_spill_of_a_failed_spawn_is_removed(self):
        with tempfile.TemporaryDirectory() as d:
            so = os.path.join(d, "out.log")
            f, _ = run(["/no/such/program"], extra=["-o", "%s:100" % so])
            self.assertIn("!spawn-error", f.kinds)
            self.assertFalse(os.path.exists(so))

    def test_bad_keep_is_usage_error(self):
        for bad in ("x:1", "o:", "o1", "o:-1"):
            p = subprocess.run([MBWRAP, "run", "-k", bad, "--", "/bin/true"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
            self.assertEqual((p.returncode, p.stdout), (2, b""), bad)


class Tools(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = os.path.realpath(self.tmp.name)

    def tearDown(self):
        self.tmp.cleanup()

    def p(self, *names):
        return os.path.join(self.d, *names)

    def test_realpath(self):
        os.makedirs(self.p("real", "sub"))
        os.symlink("real", self.p("rel"))
        os.symlink(self.p("real", "sub"), self.p("abs"))
        os.symlink("rel/sub/../..", self.p("up"))
        weird = "new\nline-é-ü"
        os.makedirs(self.p(weird))
        cases = ["rel", "rel/sub", "abs/..", "rel/missing/x/../y", "up/real", "./rel/./sub/", weird,
                 weird + "/missing", "missing/../rel", "/" + self.d[1:] + "//rel"]
        for c in cases:
            got = tool("realpath", c, self.d)
            self.assertEqual(got, os.fsencode(os.path.realpath(os.path.join(self.d, c))), c)
        self.assertEqual(tool("realpath", self.p("rel", "sub")), os.fsencode(self.p("real", "sub")))
        self.assertEqual(tool("realpath", "/"), b"/")
        self.assertEqual(tool("realpath", "/.."), b"/")

    def test_realpath_errors(self):
        with open(self.p("file"), "w") as fh:
            fh.write("x")
        os.symlink("loop2", self.p("loop1"))
        os.symlink("loop1", self.p("loop2"))
        self.assertTrue(tool("realpath", "file/x", self.d, rc=1).startswith(b"err ENOTDIR "))
        self.assertTrue(tool("realpath", "file/", self.d, rc=1).startswith(b"err ENOTDIR "))
        self.assertTrue(tool("realpath", "loop1", self.d, rc=1).startswith(b"err ELOOP "))
        self.assertTrue(tool("realpath", "x", "relative", rc=1).startswith(b"err EINVAL "))
        self.assertEqual(tool("realpath", "file", self.d), os.fsencode(self.p("file")))

    def stat(self, *args):
        return tool("stat", *args).decode().rstrip("\n").split(" ")

    def test_stat(self):
        with open(self.p("f"), "wb") as fh:
            fh.write(b"hello")
        os.chmod(self.p("f"), 0o640)
        os.symlink("f", self.p("l"))
        kind, size, mode, ver = self.stat(self.p("f"))
        self.assertEqual((kind, size, mode), ("file", "5", "0640"))
        st = os.stat(self.p("f"))
        fields = [int(x, 16) for x in ver.split(":")]
        self.assertEqual(fields, [st.st_dev, st.st_ino, 5, st.st_mtime_ns, st.st_ctime_ns])
        self.assertEqual(self.stat(self.p("l"))[0], "symlink")
        self.assertEqual(self.stat("-L", self.p("l")), [kind, size, mode, ver])
        self.assertEqual(self.stat(self.p("missing")), ["absent"])
        self.assertEqual(self.stat(self.p("f", "under-file")), ["absent"])
        self.assertEqual(self.stat(self.d)[0], "directory")

    def test_stat_version_changes_on_same_size_rewrite(self):
        path = self.p("f")
        with open(path, "wb") as fh:
            fh.write(b"AAAA")
        versions = []
        for content in (b"BBBB", b"CCCC", b"DDDD"):
            versions.append(self.stat(path)[3])
            with open(path, "r+b") as fh:  # in place: same inode, same size
                fh.write(content)
        versions.append(self.stat(path)[3])
        self.assertEqual(len(set(versions)), len(versions), versions)

    def staging(self, content, name="content"):
        sd = tempfile.mkdtemp(prefix=".mb-stage-", dir=self.d)
        path = os.path.join(sd, name)
        with open(path, "wb") as fh:
            fh.write(content)
        return sd, path

    def test_publish_create_only(self):
        target = self.p("new.txt")
        sd, sp = self.staging(b"one\n")
        out = tool("publish", "--create-only", sp, target).decode()
        m = re.fullmatch(r"ok create (\S+)\n", out)
        self.assertTrue(m, out)
        self.assertEqual(m.group(1), self.stat(target)[3])  # the returned version is the live one
        self.assertEqual(read_bytes(target), b"one\n")
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o600)
        self.assertFalse(os.path.exists(sd))
        # A second creator loses and the first creator's file is preserved.
        sd, sp = self.staging(b"two\n")
        out = tool("publish", "--create-only", sp, target, rc=1)
        self.assertTrue(out.startswith(b"err FS_NOT_OBSERVED "), out)
        self.assertEqual(read_bytes(target), b"one\n")
        self.assertFalse(os.path.exists(sd))
        # --create-only onto a directory is FS_NOT_REGULAR_FILE, checked before publishing.
        os.mkdir(self.p("dir"))
        sd, sp = self.staging(b"x")
        self.assertTrue(tool("publish", "--create-only", sp, self.p("dir"), rc=1).startswith(b"err FS_NOT_REGULAR"))

    def test_publish_update_expect_keep_mode_before(self):
        target = self.p("t.txt")
        with open(target, "wb") as fh:
            fh.write(b"old\ncontent\n")
        os.chmod(target, 0o751)
        ver = self.stat(target)[3]
        sd, sp = self.staging(b"new content\n")
        out = tool("publish", "--expect", ver, "--before", "100", sp, target)
        m = re.fullmatch(rb"before 12\nold\ncontent\n\nok update (\S+)\n", out)
        self.assertTrue(m, out)
        self.assertEqual(m.group(1).decode(), self.stat(target)[3])
        self.assertNotEqual(m.group(1).decode(), ver)
        self.assertEqual(read_bytes(target), b"new content\n")
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o751)
        self.assertFalse(os.path.exists(sd))
        # The old version is stale now; the target is untouched and the staging is cleaned.
        sd, sp = self.staging(b"zzz")
        out = tool("publish", "--expect", ver, sp, target, rc=1)
        self.assertTrue(out.startswith(b"err FS_STALE_VERSION "), out)
        self.assertEqual(read_bytes(target), b"new content\n")
        self.assertFalse(os.path.exists(sd))
        # --expect on a missing file is stale too.
        sd, sp = self.staging(b"zzz")
        out = tool("publish", "--expect", ver, sp, self.p("missing"), rc=1)
        self.assertTrue(out.startswith(b"err FS_STALE_VERSION "), out)
        self.assertFalse(os.path.exists(self.p("missing")))

    def test_publish_before_bounds_and_mode(self):
        target = self.p("big")
        with open(target, "wb") as fh:
            fh.write(b"x" * 1000)
        sd, sp = self.staging(b"y")
        out = tool("publish", "--before", "999", "--mode", "755", sp, target)
        self.assertTrue(re.fullmatch(rb"before-too-large 1000\nok update \S+\n", out), out)
        self.assertEqual(stat.S_IMODE(os.stat(target).st_mode), 0o755)
        sd, sp = self.staging(b"z")
        out = tool("publish", "--before", "10", sp, self.p("fresh"))
        self.assertTrue(re.fullmatch(rb"before-absent\nok create \S+\n", out), out)
        # Binary "before" content (newlines, NULs) comes back byte-exact.
        blob = bytes(range(256)) * 200
        with open(target, "wb") as fh:
            fh.write(blob)
        sd, sp = self.staging(b"q")
        out = tool("publish", "--keep-mode", "--before", str(len(blob)), sp, target)
        head = b"before %d\n" % len(blob)
        self.assertTrue(out.startswith(head))
        self.assertEqual(out[len(head):len(head) + len(blob)], blob)
        self.assertTrue(re.fullmatch(rb"\nok update \S+\n", out[len(head) + len(blob):]))

    def test_publish_symlink_target_is_not_regular(self):
        with open(self.p("real"), "w") as fh:
            fh.write("r")
        os.symlink("real", self.p("link"))
        sd, sp = self.staging(b"x")
        out = tool("publish", sp, self.p("link"), rc=1)
        self.assertTrue(out.startswith(b"err FS_NOT_REGULAR_FILE "), out)
        self.assertTrue(os.path.islink(self.p("link")))

    def test_remove(self):
        os.makedirs(self.p("tree", "a", "b"))
        with open(self.p("tree", "a", "b", "f"), "w") as fh:
            fh.write("x")
        os.makedirs(self.p("outside"))
        with open(self.p("outside", "keep"), "w") as fh:
            fh.write("keep")
        os.symlink(self.p("outside"), self.p("tree", "a", "link"))  # a link is removed, never followed
        out = tool("remove", self.p("tree"), rc=1)
        self.assertTrue(out.startswith(b"err FS_NOT_EMPTY "), out)
        self.assertTrue(os.path.isdir(self.p("tree", "a", "b")))
        self.assertEqual(tool("remove", "-r", self.p("tree")), b"ok directory\n")
        self.assertFalse(os.path.lexists(self.p("tree")))
        self.assertEqual(read_bytes(self.p("outside", "keep")), b"keep")
        os.symlink("outside", self.p("l"))
        self.assertEqual(tool("remove", self.p("l")), b"ok symlink\n")
        self.assertTrue(os.path.isdir(self.p("outside")))
        self.assertEqual(tool("remove", self.p("outside", "keep")), b"ok file\n")
        self.assertEqual(tool("remove", self.p("outside")), b"ok directory\n")
        self.assertTrue(tool("remove", self.p("missing"), rc=1).startswith(b"err FS_NOT_FOUND "))
        # The root is refused before anything happens (checked without -r: the same guard comes
        # first for both, and a broken guard must not empty this machine's root).
        out = tool("remove", "/", rc=1)
        self.assertTrue(out.startswith(b"err FS_INVALID_TARGET ") and b"root directory" in out, out)
        # A failure deep inside names the entry (run as nobody when we are root: root may remove anything).
        os.makedirs(self.p("locked", "in"))
        pre = None
        if os.geteuid() == 0:
            os.chmod(self.d, 0o755)
            for sub in ("locked", "locked/in"):
                os.chown(self.p(sub), 65534, 65534)
            pre = lambda: (os.setgroups([]), os.setgid(65534), os.setuid(65534))
        os.chmod(self.p("locked"), 0o555)
        p = subprocess.run([MBWRAP, "remove", "-r", self.p("locked")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, preexec_fn=pre)
        os.chmod(self.p("locked"), 0o755)
        self.assertEqual(p.returncode, 0, p.stderr)
        f = decode(p.stdout, tool=True)
        self.assertEqual(f.exit, 1)
        self.assertTrue(bytes(f.out).startswith(b"err FS_PERMISSION_DENIED cannot remove 'in' in "), bytes(f.out))
        self.assertTrue(os.path.isdir(self.p("locked", "in")))

    def test_mkdir(self):
        out = tool("mkdir", self.p("d")).decode()
        m = re.fullmatch(r"ok created (\S+)\n", out)
        self.assertTrue(m, out)
        self.assertEqual(m.group(1), self.stat(self.p("d"))[3])
        self.assertTrue(tool("mkdir", self.p("d"), rc=1).startswith(b"err FS_ALREADY_EXISTS "))
        self.assertTrue(tool("mkdir", self.p("x", "y"), rc=1).startswith(b"err FS_NOT_FOUND "))
        self.assertTrue(re.fullmatch(rb"ok existed \S+\n", tool("mkdir", "-p", self.p("d"))))
        self.assertTrue(re.fullmatch(rb"ok created \S+\n", tool("mkdir", "-p", self.p("x", "y", "z"))))
        self.assertTrue(os.path.isdir(self.p("x", "y", "z")))
        with open(self.p("f"), "w") as fh:
            fh.write("x")
        self.assertTrue(tool("mkdir", "-p", self.p("f"), rc=1).startswith(b"err FS_ALREADY_EXISTS "))
        self.assertTrue(tool("mkdir", "-p", self.p("f", "g"), rc=1).startswith(b"err FS_NOT_DIRECTORY "))
        self.assertTrue(tool("mkdir", self.p("f", "g"), rc=1).startswith(b"err FS_NOT_DIRECTORY "))

    def test_rename(self):
        for n, c in (("a", b"A"), ("b", b"B")):
            with open(self.p(n), "wb") as fh:
                fh.write(c)
        out = tool("rename", "--no-replace", self.p("a"), self.p("b"), rc=1)
        self.assertTrue(out.startswith(b"err FS_ALREADY_EXISTS "), out)
        self.assertEqual((read_bytes(self.p("a")), read_bytes(self.p("b"))), (b"A", b"B"))
        out = tool("rename", self.p("a"), self.p("b")).decode()
        m = re.fullmatch(r"ok file (\S+)\n", out)
        self.assertTrue(m, out)
        self.assertEqual(m.group(1), self.stat(self.p("b"))[3])
        self.assertFalse(os.path.exists(self.p("a")))
        self.assertEqual(read_bytes(self.p("b")), b"A")
        self.assertTrue(re.fullmatch(rb"ok file \S+\n", tool("rename", "--no-replace", self.p("b"), self.p("c"))))
        self.assertTrue(tool("rename", self.p("b"), self.p("c2"), rc=1).startswith(b"err FS_NOT_FOUND "))
        out = tool("rename", self.p("c"), self.p("nodir", "c"), rc=1)
        self.assertTrue(out.startswith(b"err FS_NOT_FOUND ") and b"destination" in out, out)
        os.makedirs(self.p("d1", "sub"))
        os.makedirs(self.p("d2", "full"))
        with open(self.p("d2", "full", "f"), "w") as fh:
            fh.write("x")
        self.assertTrue(tool("rename", self.p("d1"), self.p("d2", "full"), rc=1).startswith(b"err FS_NOT_EMPTY "))
        self.assertTrue(tool("rename", self.p("d1"), self.p("d1", "sub", "in"), rc=1).startswith(b"err FS_INVALID_TARGET "))
        self.assertTrue(tool("rename", self.p("c"), self.p("d2"), rc=1).startswith(b"err FS_NOT_REGULAR_FILE "))
        self.assertTrue(tool("rename", self.p("d1"), self.p("c"), rc=1).startswith(b"err FS_NOT_DIRECTORY "))
        self.assertTrue(re.fullmatch(rb"ok directory \S+\n", tool("rename", "--no-replace", self.p("d1"), self.p("d3"))))
        self.assertTrue(os.path.isdir(self.p("d3", "sub")))

    def test_which(self):
        a, b = self.p("a"), self.p("b")
        os.makedirs(a)
        os.makedirs(b)
        for d, m in ((a, 0o644), (b, 0o755)):
            with open(os.path.join(d, "tool"), "w") as fh:
                fh.write("#!/bin/sh\n")
            os.chmod(os.path.join(d, "tool"), m)
        os.makedirs(os.path.join(a, "dirtool"))
        pathlist = "%s:/nonexistent:%s" % (a, b)
        self.assertEqual(tool("which", "tool", pathlist), os.fsencode(os.path.join(b, "tool")))
        self.assertTrue(tool("which", "dirtool", pathlist, rc=1).startswith(b"err ENOENT "))
        self.assertTrue(tool("which", "nope", pathlist, rc=1).startswith(b"err ENOENT "))
        self.assertEqual(tool("which", os.path.join(b, "tool"), ""), os.fsencode(os.path.join(b, "tool")))
        self.assertTrue(tool("which", "a/tool", pathlist, rc=1).startswith(b"err EINVAL "))

    def test_signal(self):
        p = subprocess.Popen(["sleep", "1000"], start_new_session=True)
        self.assertEqual(tool("signal", str(p.pid), "SIGTERM"), b"")
        self.assertEqual(p.wait(timeout=LIVENESS_CAP_S), -signal.SIGTERM)
        self.assertTrue(tool("signal", str(p.pid), "KILL", rc=1).startswith(b"err ESRCH "))

    def test_killsession(self):
        prog = "trap '' TERM; sleep 1000 & sleep 1000 & (trap '' TERM; exec sleep 1000) & echo ready; wait"
        p = subprocess.Popen(["/bin/sh", "-c", prog], start_new_session=True, stdout=subprocess.PIPE)
        self.assertEqual(p.stdout.readline(), b"ready\n")
        members = session_members(p.pid)
        self.assertGreaterEqual(len(members), 4)
        out = tool("killsession", str(p.pid), "200")
        self.assertEqual(int(out), len(members))
        p.wait(timeout=LIVENESS_CAP_S)
        p.stdout.close()
        self.assertEqual(session_members(p.pid), [])
        self.assertEqual(tool("killsession", str(p.pid), "0"), b"0\n")

    def test_killsession_hangs_up_an_interactive_shell(self):
        # An interactive shell ignores TERM; HUP ends it at once. With a grace far beyond the
        # liveness cap, killsession can only return in time if HUP did the work.
        pid, master = pty.fork()
        if pid == 0:
            os.execve("/bin/sh", ["/bin/sh", "-i"], {"PATH": "/usr/bin:/bin", "PS1": "$ "})
        try:
            buf = b""
            while b"$ " not in buf:
                r, _, _ = select.select([master], [], [], LIVENESS_CAP_S)
                self.assertTrue(r, "no prompt")
                buf += os.read(master, 1024)
            p = subprocess.run([MBWRAP, "killsession", str(pid), "3600000"], stdout=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=LIVENESS_CAP_S)
            f = decode(p.stdout, tool=True)
            self.assertEqual((f.exit, bytes(f.out)), (0, b"1\n"))
            _, st = os.waitpid(pid, 0)
            self.assertTrue(os.WIFSIGNALED(st) and os.WTERMSIG(st) == signal.SIGHUP, st)
        finally:
            os.close(master)
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass

    def spawn_tty(self, argv):
        pid, master = pty.fork()
        if pid == 0:
            os.execv(argv[0], argv)
        self.addCleanup(lambda: (os.close(master), os.kill(pid, signal.SIGKILL), os.waitpid(pid, 0)))
        return pid

    def fg(self, pid):
        return tool("fg", str(pid)).decode().split()

    def test_fg_input_waiting(self):
        pid = self.spawn_tty(["/bin/cat"])
        for _ in range(LIVENESS_CAP_S * 100):
            res = self.fg(pid)
            if res == [str(pid), "1"]:
                break
            select.select([], [], [], 0.01)
        self.assertEqual(res, [str(pid), "1"])

    def test_fg_not_waiting(self):
        pid = self.spawn_tty(["/bin/sleep", "1000"])
        for _ in range(LIVENESS_CAP_S * 100):
            with open("/proc/%d/stat" % pid) as fh:
                st = fh.read()
            if st[st.find("(") + 1:st.rfind(")")] == "sleep" and st[st.rfind(")") + 2] == "S":
                break
            select.select([], [], [], 0.01)
        self.assertEqual(self.fg(pid), [str(pid), "0"])

    def test_fg_absent(self):
        p = subprocess.Popen(["true"])
        p.wait()
        self.assertEqual(self.fg(p.pid), ["absent"])


def stool(*args):
    """A streaming tool (manifest, pack): → (stdout bytes, stderr-frame bytes, exit code)."""
    p = subprocess.run([MBWRAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, (args, p.returncode, p.stderr)
    f = decode(p.stdout, tool=True)
    return bytes(f.out), bytes(f.err), f.exit


def parse_manifest(out):
    """mbwrap manifest records → {path: (t, mode, size, hash, link)}."""
    recs, pos = {}, 0
    while pos < len(out):
        m = re.match(rb"(\w) (\S+) (\d+) (\d+)\.(\d{9}) (\S+) (\d+) ", out[pos:])
        assert m, out[pos:pos + 80]
        pos += m.end()
        plen = int(m.group(7))
        path = out[pos:pos + plen]
        pos += plen
        m2 = re.match(rb" (\d+) ", out[pos:])
        pos += m2.end()
        llen = int(m2.group(1))
        link = out[pos:pos + llen]
        pos += llen
        assert out[pos:pos + 1] == b"\n"
        pos += 1
        recs[path.decode()] = (m.group(1).decode(), m.group(2).decode(), int(m.group(3)), m.group(6).decode(), link.decode())
    return recs


class SyncTools(unittest.TestCase):
    """mbwrap's workspace-sync tools: manifest, pack, unpack (PROTOCOL.md, "Sync tools")."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = os.path.realpath(self.tmp.name)

    def tearDown(self):
        subprocess.run(["chmod", "-R", "u+rwx", self.d])
        self.tmp.cleanup()

    def p(self, *names):
        return os.path.join(self.d, *names)

    def write(self, rel, data):
        os.makedirs(os.path.dirname(self.p(rel)) or self.d, exist_ok=True)
        with open(self.p(rel), "wb") as fh:
            fh.write(data)

    def tree(self):
        self.write("t/a/x.txt", b"hello")
        self.write("t/a/y.log", b"log")
        self.write("t/keep.log", b"keep")
        self.write("t/nm/m.js", b"m")
        self.write("t/.gitignore", b"*.log\n!keep.log\n")
        os.makedirs(self.p("t", "empty"))
        os.symlink("../x", self.p("t", "a", "l"))
        os.chmod(self.p("t", "a", "x.txt"), 0o750)
        return self.p("t")

    def test_manifest(self):
        import hashlib
        t = self.tree()
        out, err, rc = stool("manifest", "--gitignore", "--exclude", base64.b64encode(b"nm/\n").decode(), t)
        self.assertEqual((rc, err), (0, b""))
        r = parse_manifest(out)
        self.assertEqual(r["a/x.txt"], ("f", "0750", 5, hashlib.sha256(b"hello").hexdigest(), ""))
        self.assertEqual(r["a/l"][0::4], ("l", "../x"))
        self.assertEqual(r["empty"][0], "d")
        self.assertEqual(r["a/y.log"][0:2], ("x", "f"))      # excluded: recorded, not hashed
        self.assertEqual(r["nm"][0:2], ("x", "d"))           # excluded directory: not descended
        self.assertNotIn("nm/m.js", r)
        self.assertEqual(r["keep.log"][0], "f")
        # many files, hashed in parallel batches
        for i in range(1500):
            self.write("t/many/f%04d" % i, b"%d" % i)
        r = parse_manifest(stool("manifest", t)[0])
        for i in range(0, 1500, 97):
            self.assertEqual(r["many/f%04d" % i][3], hashlib.sha256(b"%d" % i).hexdigest())

    def test_manifest_failures(self):
        t = self.tree()
        os.mkfifo(self.p("t", "a", "pipe"))
        out, err, rc = stool("manifest", t)
        self.assertEqual(rc, 1)
        self.assertTrue(err.startswith(b"err SYNC_UNSUPPORTED_TYPE "), err)
        self.assertTrue(err.endswith(b"\npath 6 a/pipe\n"), err)
        os.unlink(self.p("t", "a", "pipe"))
        _, err, rc = stool("manifest", "--max-files", "3", t)
        self.assertTrue(err.startswith(b"err SYNC_TOO_MANY_FILES "), err)
        _, err, rc = stool("manifest", "--max-bytes", "4", t)
        self.assertTrue(err.startswith(b"err SYNC_TOO_LARGE "), err)
        _, err, rc = stool("manifest", self.p("missing"))
        self.assertTrue(err.startswith(b"err SYNC_NOT_FOUND "), err)
        self.write("bad-sum", b"#!/bin/sh\necho broken >&2\nexit 3\n")
        os.chmod(self.p("bad-sum"), 0o755)
        _, err, rc = stool("manifest", "--sha256sum", self.p("bad-sum"), t)
        self.assertTrue(err.startswith(b"err SYNC_REMOTE_TOOL "), err)
        self.assertIn(b"broken", err)
        _, err, rc = stool("manifest", "--sha256sum", self.p("no-such-tool"), t)
        self.assertTrue(err.startswith(b"err SYNC_REMOTE_TOOL "), err)
        p = subprocess.run([MBWRAP, "manifest", "--exclude", "not base64!", t], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertEqual((p.returncode, p.stdout), (2, b""))

    def test_pack(self):
        import io
        import tarfile
        t = self.tree()
        os.link(self.p("t", "a", "x.txt"), self.p("t", "hard"))
        names = b"a/x.txt\0a/l\0hard\0empty\0"
        out, err, rc = stool("pack", t, base64.b64encode(names).decode())
        self.assertEqual((rc, err), (0, b""))
        tf = tarfile.open(fileobj=io.BytesIO(out))
        got = {m.name: m for m in tf.getmembers()}
        self.assertEqual(sorted(got), ["a/l", "a/x.txt", "empty", "hard"])
        self.assertTrue(got["hard"].isreg() and got["a/x.txt"].isreg())   # hard links dereferenced
        self.assertEqual(tf.extractfile(got["hard"]).read(), b"hello")
        self.assertTrue(got["a/l"].issym() and got["a/l"].linkname == "../x")
        for bad in (b"../x\0", b"/etc/passwd\0", b"a//b\0"):
            _, err, rc = stool("pack", t, base64.b64encode(bad).decode())
            self.assertTrue(err.startswith(b"err SYNC_UNSAFE_ENTRY "), err)
        _, err, rc = stool("pack", t, base64.b64encode(b"nope\0").decode())
        self.assertEqual(rc, 1)
        self.assertTrue(err.startswith(b"err SYNC_"), err)
        self.write("t/big", b"z" * 300000)
        _, err, rc = stool("pack", "--max-bytes", "100000", t, base64.b64encode(b"big\0").decode())
        self.assertTrue(err.startswith(b"err SYNC_TOO_LARGE "), err)
        for args in (["pack", t, base64.b64encode(b"no-terminator").decode()], ["pack", t]):
            p = subprocess.run([MBWRAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.assertEqual((p.returncode, p.stdout), (2, b""))

    def archive(self, members):
        import io
        import tarfile
        os.makedirs(self.p("stage"), mode=0o700)
        with tarfile.open(self.p("stage", "archive.tar"), "w", format=tarfile.PAX_FORMAT) as tf:
            for name, kind, data in members:
                i = tarfile.TarInfo(name)
                i.type = kind
                i.mode = 0o644
                if kind == tarfile.REGTYPE:
                    i.size = len(data)
                    tf.addfile(i, io.BytesIO(data))
                else:
                    if kind in (tarfile.LNKTYPE, tarfile.SYMTYPE):
                        i.linkname = data.decode()
                    if kind == tarfile.DIRTYPE:
                        i.mode = 0o755
                    tf.addfile(i)
        return self.p("stage")

    def test_unpack_swaps_the_tree_in(self):
        import tarfile
        target = self.p("w", "target")
        os.makedirs(target)
        self.write("w/target/old", b"old")
        st = self.archive([("d", tarfile.DIRTYPE, b""), ("d/f", tarfile.REGTYPE, b"new"), ("l", tarfile.SYMTYPE, b"/etc")])
        out = tool("unpack", st, target)
        self.assertEqual(out, b"ok 1 1 1 3\n")
        self.assertEqual(sorted(os.listdir(target)), ["d", "l"])
        self.assertEqual(read_bytes(os.path.join(target, "d", "f")), b"new")
        self.assertEqual(os.readlink(os.path.join(target, "l")), "/etc")
        self.assertFalse(os.path.exists(st))                                   # staging gone
        self.assertEqual(os.listdir(self.p("w")), ["target"])                  # old tree gone
        # a missing target is made, with its parents
        st = self.archive([("f", tarfile.REGTYPE, b"x")])
        self.assertEqual(tool("unpack", st, self.p("new", "deep", "t")), b"ok 1 0 0 1\n")

    def test_unpack_refusals_leave_the_target(self):
        import tarfile
        target = self.p("target")
        os.makedirs(target)
        self.write("target/keep", b"previous")
        cases = [
            ([("a", tarfile.REGTYPE, b"x"), ("b", tarfile.LNKTYPE, b"a")], "SYNC_UNSAFE_ENTRY"),   # a hard link
            ([("p", tarfile.FIFOTYPE, b"")], "SYNC_UNSUPPORTED_TYPE"),
            ([("../evil", tarfile.REGTYPE, b"x")], None),                           # tar refuses or skips it
            ([("a", tarfile.REGTYPE, b"x"), ("b", tarfile.REGTYPE, b"y"), ("c", tarfile.REGTYPE, b"z")], "SYNC_TOO_MANY_FILES"),
        ]
        if os.geteuid() == 0:
            cases.append(([("dev", tarfile.CHRTYPE, b"")], "SYNC_UNSUPPORTED_TYPE"))
        for members, code in cases:
            st = self.archive(members)
            p = subprocess.run([MBWRAP, "unpack", "--max-files", "2", st, target], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            f = decode(p.stdout, tool=True)
            if code is None:
                self.assertEqual(f.exit, 1, bytes(f.out))
                self.assertTrue(bytes(f.out).startswith(b"err SYNC_"), bytes(f.out))
            else:
                self.assertEqual(f.exit, 1, (members, bytes(f.out)))
                self.assertTrue(bytes(f.out).startswith(b"err " + code.encode()), bytes(f.out))
            self.assertEqual(os.listdir(target), ["keep"])
            self.assertFalse(os.path.exists(st))
            self.assertFalse(os.path.exists(self.p("evil")))
        # a target that is a file; a staging directory that is not one
        self.write("file", b"f")
        st = self.archive([("f", tarfile.REGTYPE, b"x")])
        f = decode(subprocess.run([MBWRAP, "unpack", st, self.p("file")], stdout=subprocess.PIPE).stdout, tool=True)
        self.assertTrue(bytes(f.out).startswith(b"err SYNC_NOT_DIRECTORY "), bytes(f.out))
        self.assertFalse(os.path.exists(st))
        f = decode(subprocess.run([MBWRAP, "unpack", self.p("missing"), target], stdout=subprocess.PIPE).stdout, tool=True)
        self.assertEqual(f.exit, 1)
        for args in (["unpack", "relative", target], ["unpack", st], ["unpack", "--max-files", "x", st, target]):
            p = subprocess.run([MBWRAP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.assertEqual((p.returncode, p.stdout), (2, b""))


def watch_records(out):
    """Parses mbwrap watch's records (PROTOCOL.md, "watch") of a complete prefix → (records, rest)."""
    recs, pos = [], 0
    while pos < len(out):
        m = re.match(rb"(ready|overflow|gone)\n", out[pos:])
        if m:
            recs.append((m.group(1).decode(),))
            pos += m.end()
            continue
        m = re.match(rb"ev (create|write|remove|rename|chmod) ([1-9][0-9]*) ", out[pos:])
        if m:
            n = int(m.group(2))
            start = pos + m.end()
            if len(out) < start + n + 1:
                break
            assert out[start + n:start + n + 1] == b"\n", out[pos:start + n + 1]
            recs.append(("ev", m.group(1).decode(), out[start:start + n]))
            pos = start + n + 1
            continue
        m = re.match(rb"err (\S+) [^\n]*\n", out[pos:])
        if m:
            recs.append(("err", m.group(1).decode()))
            pos += m.end()
            continue
        assert b"\n" not in out[pos:] and len(out) - pos < 64, "malformed record: %r" % out[pos:pos + 80]
        break
    return recs, out[pos:]


class Watch(unittest.TestCase):
    """mbwrap watch [-r] DIR: a long-running tool (PROTOCOL.md, "watch")."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = os.path.realpath(self.tmp.name)
        self.procs = []

    def tearDown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
        self.tmp.cleanup()

    def p(self, *names):
        return os.path.join(self.d, *names)

    def start(self, *args):
        p = subprocess.Popen([MBWRAP, "watch", *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
        self.procs.append(p)
        p.buf, p.out, p.recs, p.frames = bytearray(), bytearray(), [], bytearray()
        self.until(p, lambda r: ("ready",) in r)
        return p

    def until(self, p, pred):
        """Reads records until pred(records so far) holds; → them. Frames and records are decoded
        as they come (complete lines only; a record may span frames)."""
        fd = p.stdout.fileno()
        while True:
            cut = p.buf.rfind(b"\n") + 1
            for line in bytes(p.buf[:cut]).split(b"\n")[:-1]:
                if line[:1] == b"o":
                    p.out.extend(base64.b64decode(line[1:]))
            del p.buf[:cut]
            recs, rest = watch_records(bytes(p.out))
            p.recs.extend(recs)
            p.out = bytearray(rest)
            if pred(p.recs):
                return p.recs
            r, _, _ = select.select([fd], [], [], LIVENESS_CAP_S)
            assert r, "no progress from mbwrap watch; records so far: %r" % p.recs[-20:]
            chunk = os.read(fd, 65536)
            assert chunk, "mbwrap watch ended; records: %r" % p.recs[-20:]
            p.buf.extend(chunk)
            p.frames.extend(chunk)

    def finish(self, p):
        p.frames.extend(p.stdout.read())
        self.assertEqual(p.wait(timeout=LIVENESS_CAP_S), 0)
        return decode(bytes(p.frames), tool=True)

    def test_events_of_each_kind_in_order(self):
        w = self.start(self.d)
        with open(self.p("a"), "w") as fh:
            fh.write("x")
        os.chmod(self.p("a"), 0o600)
        os.rename(self.p("a"), self.p("b"))
        os.unlink(self.p("b"))
        os.mkdir(self.p("sub"))
        with open(self.p("sub", "inner"), "w") as fh:   # below DIR: not without -r
            fh.write("y")
        os.mkdir(self.p("z"))
        want = [("ev", "create", b"a"), ("ev", "write", b"a"), ("ev", "chmod", b"a"), ("ev", "rename", b"a"),
                ("ev", "create", b"b"), ("ev", "remove", b"b"), ("ev", "create", b"sub"), ("ev", "create", b"z")]
        recs = self.until(w, lambda r: ("ev", "create", b"z") in r)
        evs = [r for r in recs if r[0] == "ev"]
        self.assertEqual([r for i, r in enumerate(evs) if i == 0 or evs[i - 1] != r], want)   # writes may repeat
        w.terminate()
        self.assertEqual(w.wait(timeout=LIVENESS_CAP_S), -signal.SIGTERM)

    def test_recursive_watches_new_directories_and_what_they_hold(self):
        os.makedirs(self.p("old", "deeper"))
        w = self.start("-r", self.d)
        with open(self.p("old", "deeper", "f"), "w") as fh:
            fh.write("1")
        os.makedirs(self.p("new", "a", "b"))
        with open(self.p("new", "a", "b", "g"), "w") as fh:
            fh.write("2")
        os.rename(self.p("new"), self.p("moved"))
        with open(self.p("moved", "a", "h"), "w") as fh:
            fh.write("3")
        os.symlink(self.d, self.p("loop"))                 # never followed
        with open(self.p("last"), "w") as fh:
            fh.write("4")
        recs = self.until(w, lambda r: ("ev", "create", b"last") in r)
        evs = [r for r in recs if r[0] == "ev"]
        # what a directory holds is reported under its new name when it appears (new/a/b/g only
        # if its watch came before the rename)
        for want in [("create", b"old/deeper/f"), ("create", b"new"), ("rename", b"new"), ("create", b"moved"),
                     ("create", b"moved/a"), ("create", b"moved/a/b/g"), ("create", b"moved/a/h"), ("create", b"loop")]:
            self.assertIn(("ev",) + want, evs)
        self.assertFalse([r for r in evs if r[2].startswith(b"loop/")])
        self.assertLess(evs.index(("ev", "rename", b"new")), evs.index(("ev", "create", b"moved/a/h")))
        w.terminate()
        w.wait(timeout=LIVENESS_CAP_S)

    def test_gone_ends_the_watch(self):
        os.mkdir(self.p("w"))
        w = self.start(self.p("w"))
        os.rmdir(self.p("w"))
        f = self.finish(w)
        self.assertEqual(f.exit, 0)
        recs, rest = watch_records(bytes(f.out))
        self.assertEqual((recs[0], recs[-1], rest), (("ready",), ("gone",), b""))

    def test_a_vanished_reader_ends_the_watch(self):
        w = self.start(self.d)
        w.stdout.close()
        self.assertEqual(w.wait(timeout=LIVENESS_CAP_S), 0)
        self.procs.remove(w)

    def test_kernel_queue_overflow_is_reported(self):
        with open("/proc/sys/fs/inotify/max_queued_events") as fh:
            limit = int(fh.read())
        if limit > 100000:
            self.skipTest("max_queued_events is %d" % limit)
        for n in ("a", "b"):
            open(self.p(n), "w").close()
        w = self.start(self.d)
        # nothing is read meanwhile: the pipe fills, mbwrap blocks, the kernel's queue overflows
        # (chmod events of two files in turn: the kernel merges only repeats of the last event)
        n = limit // 2 + 2000
        for _ in range(n):
            os.utime(self.p("a"))
            os.utime(self.p("b"))
        recs = self.until(w, lambda r: ("overflow",) in r)
        self.assertLess(len([r for r in recs if r[0] == "ev"]), 2 * n)
        self.assertEqual({r for r in recs if r[0] == "ev"}, {("ev", "chmod", b"a"), ("ev", "chmod", b"b")})
        w.terminate()
        w.wait(timeout=LIVENESS_CAP_S)

    def test_errors(self):
        with open(self.p("file"), "w") as fh:
            fh.write("x")
        for args, code in ((["missing"], "ENOENT"), (["file"], "FS_NOT_DIRECTORY"), (["-r", "file"], "FS_NOT_DIRECTORY")):
            p = subprocess.run([MBWRAP, "watch", *args[:-1], self.p(args[-1])], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
            self.assertEqual(p.returncode, 0, p.stderr)
            f = decode(p.stdout, tool=True)
            self.assertEqual(f.exit, 1)
            self.assertEqual(watch_records(bytes(f.out))[0], [("err", code)])
        for args in ([], ["-r"], ["a", "b"], [""]):
            p = subprocess.run([MBWRAP, "watch", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self.assertEqual((p.returncode, p.stdout), (2, b""))


if __name__ == "__main__":
    MBWRAP = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
