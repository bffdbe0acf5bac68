#!/usr/bin/env python3
"""sandboxd's modules form a DAG, with the HTTP layer a leaf and the modules the C unit tests link
free of HTTP code. A module is a .c/.h pair of sandboxd/; it depends on the modules whose headers
its files include. Exit status 0 when every rule holds; prints the dependency order (leaves
first) with --order."""
import os, re, sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'sandboxd')
# What a pure parser may include: no I/O, no allocation, no locale.
PURE_LIBC = {'stdbool.h', 'stddef.h', 'stdint.h', 'string.h'}
# Leaves any module may include, even one held to "only X" below: the clocks in milliseconds and
# an error message into a caller's buffer. They include no module themselves (checked).
UTIL = {'clocks', 'errbuf'}

def modules():
    deps = {}
    for f in sorted(os.listdir(SRC)):
        m, ext = os.path.splitext(f)
        if ext not in ('.c', '.h'):
            continue
        text = open(os.path.join(SRC, f), encoding='utf-8').read()
        inc = set(re.findall(r'^\s*#\s*include\s+"([^"]+)\.h"', text, re.M))
        local = {i for i in inc if '/' not in i and os.path.exists(os.path.join(SRC, i + '.h'))}
        deps.setdefault(m, set()).update(local - {m})
    return deps

def closure(deps, m, seen=None):
    seen = set() if seen is None else seen
    for d in deps.get(m, ()):
        if d not in seen:
            seen.add(d)
            closure(deps, d, seen)
    return seen

def order(deps):
    done, out = set(), []
    def visit(m, path):
        if m in done:
            return
        if m in path:
            raise SystemExit('cycle: ' + ' -> '.join(path[path.index(m):] + [m]))
        for d in sorted(deps[m]):
            visit(d, path + [m])
        done.add(m)
        out.append(m)
    for m in sorted(deps):
        visit(m, [])
    return out

def main():
    deps = modules()
    seq = order(deps)                      # raises on a cycle
    failures = []
    # The HTTP layer knows nothing of sandboxd.
    if deps.get('http'):
        failures.append(f"http depends on {sorted(deps['http'])}")
    # What the unit tests and fuzzers link must not reach the HTTP layer.
    for m in ('apikey', 'paths', 'registry', 'router', 'auth', 'users', 'template', 'connect_request', 'ptab', 'upload', 'net', 'pidfile',
              'ids', 'layer_copy', 'layers', 'snapshots', 'volumes', 'cgroups', 'metrics', 'pool', 'egress_rules',
              'sniff', 'dnsmsg', 'transforms', 'secrets', 'sbxlog', 'fdpass', 'template_spec', 'template_build',
              'layer_merge', 'template_key', 'template_cache', 'image', 'statefile', 'clocks', 'errbuf'):
        if m not in deps:
            failures.append(f'module {m} is missing')
        elif 'http' in closure(deps, m) | {m}:
            failures.append(f'{m} reaches the HTTP layer: {sorted(closure(deps, m))}')
    for m in sorted(UTIL):
        if deps.get(m):
            failures.append(f'{m} depends on {sorted(deps[m])}: it must be a leaf')
    # The egress proxy's parsers are pure leaves: no sandboxd module, and of libc only what parsing needs.
    for m in ('sniff', 'dnsmsg'):
        if deps.get(m):
            failures.append(f'{m} depends on {sorted(deps[m])}: it must be a leaf')
        for f in (m + '.c', m + '.h'):
            path = os.path.join(SRC, f)
            if not os.path.exists(path):
                continue
            text = open(path, encoding='utf-8').read()
            extra = set(re.findall(r'^\s*#\s*include\s+<([^>]+)>', text, re.M)) - PURE_LIBC
            if extra:
                failures.append(f'{f} includes {sorted(extra)}: only {sorted(PURE_LIBC)}')
    # The secret store is a leaf but for its ids: no registry (a sandbox's end reaches it through
    # main.c's death hook), no HTTP, nothing that could log or answer a value.
    if deps.get('secrets', set()) - {'ids', 'statefile'} - UTIL:
        failures.append(f"secrets depends on {sorted(deps['secrets'] - {'ids', 'statefile'} - UTIL)}: only ids and statefile")
    for m in ('registry', 'router', 'auth', 'http'):
        if 'secrets' in closure(deps, m):
            failures.append(f'{m} depends on secrets')
    # A template build's request parser knows only the sandbox's users (a unit test links it alone).
    if deps.get('template_spec', set()) - {'users'} - UTIL:
        failures.append(f"template_spec depends on {sorted(deps['template_spec'] - {'users'} - UTIL)}: only users")
    # A step's cache key is pure: the step as parsed, nothing else (a unit test links it alone).
    if deps.get('template_key', set()) - {'template_spec'}:
        failures.append(f"template_key depends on {sorted(deps['template_key'] - {'template_spec'})}: only template_spec")
    # Merging layers is file-system work only.
    if deps.get('layer_merge'):
        failures.append(f"layer_merge depends on {sorted(deps['layer_merge'])}: it must be a leaf")
    # Image pulls know the layer store and the template only: no sandbox, no registry of sandboxes.
    if deps.get('image', set()) - {'layers', 'template', 'statefile'} - UTIL:
        failures.append(f"image depends on {sorted(deps['image'] - {'layers', 'template', 'statefile'} - UTIL)}: only layers, template and statefile")
    # The state directory's catalogues are written by one module that knows none but errbuf.
    if deps.get('statefile', set()) - {'errbuf'}:
        failures.append(f"statefile depends on {sorted(deps['statefile'] - {'errbuf'})}: only errbuf")
    # What sandboxd does to itself at start knows no module.
    if deps.get('harden'):
        failures.append(f"harden depends on {sorted(deps['harden'])}: it must be a leaf")
    # The registry knows sandboxes only through its backend.
    if 'sandbox' in closure(deps, 'registry'):
        failures.append('registry depends on sandbox')
    # sandbox.c's helpers know no sandbox: cgroups (a set of directories), metrics (a ring of
    # samples read from a cgroup set and a directory), the warm pool (opaque spares, booted and
    # discarded through callbacks).
    for m in ('cgroups', 'metrics', 'pool'):
        if 'sandbox' in closure(deps, m):
            failures.append(f'{m} depends on sandbox')
    if 'cgroups' in closure(deps, 'pool'):
        failures.append('pool depends on cgroups (a spare is opaque to it)')
    if '--order' in sys.argv:
        for m in seq:
            print(f"{m}: {', '.join(sorted(deps[m])) or '-'}")
    for f in failures:
        print('FAIL', f)
    print(f'{len(deps)} modules, {"no" if not failures else len(failures)} layer violations')
    return 1 if failures else 0

sys.exit(main())
