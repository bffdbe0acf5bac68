#!/usr/bin/env python3
"""Every directory with a README.md documents its own source files. For each such directory
(tracked by git; build trees and node_modules aside) this fails naming:
  - every source file directly in the directory (SOURCE_EXT) that its README never names by file
    name (`foo.c`, a path ending in it, or `foo.c/.h`, which names foo.c and foo.h);
  - every file a README names in a code span that is a path with a source extension
    (`stem.c`, `dir/x.lua`, `x.c/.h`) when no such file exists: relative to the README, to the
    repository's root, or as the tail of a tracked path (`sniff.c`, `include/moonbox.h`).
Only the README's own directory is listed: a subdirectory answers to its own README, if any
(core/gen, protoc-c's output, has none). Exit status 0 when every README is complete and
current; --list prints what each README covers. Run by ctest (tests/c/CMakeLists.txt)."""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
# What counts as source: code and scripts (build files, data and prose are not listed).
SOURCE_EXT = ('c', 'h', 'lua', 'py', 'sh', 'mjs', 'js')
EXT_RE = '(?:' + '|'.join(SOURCE_EXT) + ')'
# A code span that is a path: `name.ext`, `dir/name.ext`, `../dir/name.ext`, `name.c/.h`.
PATH_SPAN = re.compile(r'(?:\.{1,2}/)?[\w./-]*[\w-]\.' + EXT_RE + r'(?:/\.' + EXT_RE + r')*')
SKIP_DIRS = {'build', 'node_modules', '.git'}


def tracked_files():
    """The repository's files, relative to ROOT (git's list, or a walk outside a checkout)."""
    try:
        out = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard'], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        files = [f for f in out.splitlines() if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for dirpath, dirnames, filenames in os.walk(ROOT):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith('build')]
            rel = os.path.relpath(dirpath, ROOT)
            files += [os.path.normpath(os.path.join(rel, f)) for f in filenames]
    keep = []
    for f in files:
        parts = f.split('/')
        if any(p in SKIP_DIRS or p.startswith('build') for p in parts[:-1]):
            continue
        if os.path.isfile(os.path.join(ROOT, f)):   # (deleted but not yet staged: gone)
            keep.append(f)
    return sorted(set(keep))


def spans(text):
    """The code spans of a Markdown text that are paths of source files, expanded: `x.c/.h`
    gives x.c and x.h."""
    out = []
    for span in re.findall(r'`([^`\n]+)`', text):
        span = span.strip()
        if not PATH_SPAN.fullmatch(span):
            continue
        m = re.fullmatch(r'(.*?)\.(' + EXT_RE + r')((?:/\.' + EXT_RE + r')*)', span)
        stem, more = m.group(1), m.group(3)
        out += [stem + '.' + ext for ext in [m.group(2)] + more.split('/.')[1:]]
    return out


def mentions(text, name):
    """Whether the text names the file: its name as a token (alone or at the end of a path),
    or its stem in a `stem.c/.h` form."""
    if re.search(r'(?<![\w.-])' + re.escape(name) + r'(?![\w-])', text):
        return True
    stem, ext = os.path.splitext(name)
    both = r'(?<![\w.-])' + re.escape(stem) + r'((?:\.' + EXT_RE + r')(?:/\.' + EXT_RE + r')+)(?![\w-])'
    return any(ext[1:] in m.group(1).replace('/', '').split('.')[1:] for m in re.finditer(both, text))


def exists(span, readme_dir, files, fileset):
    path = span[2:] if span.startswith('./') else span
    for cand in (os.path.normpath(os.path.join(readme_dir, path)), os.path.normpath(path)):
        if cand in fileset:
            return True
    if path.startswith('../'):
        return False
    tail = '/' + path
    return any(f.endswith(tail) or f == path for f in files)


def main():
    files = tracked_files()
    fileset = set(files)
    readmes = [f for f in files if os.path.basename(f) == 'README.md']
    problems = []
    listing = '--list' in sys.argv[1:]
    for readme in readmes:
        d = os.path.dirname(readme)
        text = open(os.path.join(ROOT, readme), encoding='utf-8').read()
        here = [f for f in files if os.path.dirname(f) == d
                and os.path.splitext(f)[1][1:] in SOURCE_EXT]
        missing = [os.path.basename(f) for f in here if not mentions(text, os.path.basename(f))]
        for name in missing:
            problems.append('%s: does not name %s' % (readme, os.path.join(d, name) if d else name))
        for span in sorted(set(spans(text))):
            if not exists(span, d, files, fileset):
                problems.append('%s: names `%s`, which does not exist' % (readme, span))
        if listing:
            print('%s: %d source files, %d named' % (readme, len(here), len(here) - len(missing)))
    for p in problems:
        print(p)
    print('%d READMEs checked, %d problems' % (len(readmes), len(problems)))
    return 1 if problems or not readmes else 0


if __name__ == '__main__':
    sys.exit(main())
