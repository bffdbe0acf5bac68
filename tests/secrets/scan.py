#!/usr/bin/env python3
"""What another local user sees of a run: the command line of every process on the machine and
the environment of those whose environment that user can read, read over and over while the run
goes on, then checked for the run's secrets.

Run it as the run's user. Command lines are everyone's to read. An environment is readable by
its process's own user (and root): it counts when that user is not the run's, so as root every
process of another user is looked at (sandbox processes, pasta's --runas user, anything the run
started as someone else); as an ordinary user only what that user can read, which is none of
another user's. Every distinct command line and counted environment is kept, so secrets learnt
at the end (a key the run made) are checked against everything seen.

stdin, one command a line (any time):
  watch LABEL TEXT    say "seen LABEL PID SCAN" on stdout the first time a command line (its arguments
                      joined by spaces) holds TEXT
  secret LABEL VALUE  a secret of the run (checked against all that was and will be seen)
  end                 stop looking (so does the end of stdin)
stdout: "seen ..." lines as they happen, "scans N" every 10 scans, then one line "report JSON": scans, processes (distinct
pids looked at), cmdlines (distinct), environs (readable ones), seen {LABEL: scans that saw it},
leaks [{label, where: cmdline|environ, pid, uid, text}] (text with every secret replaced by
<LABEL>). Exit status: 0 clean, 1 a secret was found, 2 misuse.
"""
import json
import os
import sys
import threading
import time

SELF = os.getpid()
RUN_UID = os.getuid()        # the run's user: its processes' environments are its own business

lock = threading.Lock()
cmdlines = {}                # bytes -> (pid, uid)
environs = {}                # bytes -> (pid, uid)
watches = {}                 # label -> bytes
seen = {}                    # label -> number of scans that saw it
secrets = {}                 # label -> bytes
pids = set()
scans = 0
stop = threading.Event()


def read(path):
    try:
        with open(path, 'rb') as f:
            return f.read()
    except OSError:
        return None              # gone, or not ours to read


def uid_of(pid):
    st = read(f'/proc/{pid}/status')
    if st:
        for line in st.splitlines():
            if line.startswith(b'Uid:'):
                return int(line.split()[1])
    return -1


def scan_once():
    global scans
    found = set()
    for name in os.listdir('/proc'):
        if not name.isdigit() or int(name) == SELF:
            continue
        pid = int(name)
        cmd = read(f'/proc/{pid}/cmdline')
        uid = uid_of(pid)
        env = read(f'/proc/{pid}/environ') if uid not in (RUN_UID, -1) else None
        if cmd is None and env is None:
            continue
        with lock:
            pids.add(pid)
            if cmd and cmd not in cmdlines:
                cmdlines[cmd] = (pid, uid)
            if cmd:
                flat = cmd.replace(b'\0', b' ')
                for label, text in watches.items():
                    if text in flat and label not in found:
                        found.add(label)
                        if label not in seen:
                            print(f'seen {label} {pid} {scans + 1}', flush=True)   # in scan number
                        seen[label] = seen.get(label, 0) + 1
            # an environment counts when a user other than the run's can read it: its own
            if env and env not in environs:
                environs[env] = (pid, uid)
    with lock:
        scans += 1
        if scans % 10 == 0:
            print(f'scans {scans}', flush=True)


def looker():
    while not stop.is_set():
        scan_once()
        time.sleep(0.002)        # a breath for the machine; short-lived programs still show


def redact(text):
    s = text.replace(b'\0', b' ').decode('utf-8', 'replace')
    for label, value in secrets.items():
        s = s.replace(value.decode('utf-8', 'replace'), f'<{label}>')
    return s[:400]


def main():
    t = threading.Thread(target=looker, daemon=True)
    t.start()
    for line in sys.stdin:
        parts = line.rstrip('\n').split(' ', 2)
        if parts == ['end']:
            break
        if len(parts) != 3 or parts[0] not in ('watch', 'secret') or not parts[2]:
            print(f'scan: bad command {line!r}', file=sys.stderr)
            sys.exit(2)
        with lock:
            (watches if parts[0] == 'watch' else secrets)[parts[1]] = parts[2].encode()
    stop.set()
    t.join()
    scan_once()                  # one last look
    leaks = []
    with lock:
        for where, table in (('cmdline', cmdlines), ('environ', environs)):
            for text, (pid, uid) in table.items():
                for label, value in secrets.items():
                    if value in text:
                        leaks.append({'label': label, 'where': where, 'pid': pid, 'uid': uid, 'text': redact(text)})
        report = {'scans': scans, 'processes': len(pids), 'cmdlines': len(cmdlines), 'environs': len(environs),
                  'seen': seen, 'secrets': sorted(secrets), 'leaks': leaks, 'uid': RUN_UID}
    print('report ' + json.dumps(report), flush=True)
    sys.exit(1 if leaks else 0)


if __name__ == '__main__':
    main()
