#!/usr/bin/env python3
"""Every error code moonbox makes is in the one list, core/error_codes.def, and the list holds
nothing that nothing makes. Scans the C and Lua sources of core/ (mbwrap too; protoc-c's gen/
aside), sandboxd/, lua/ and policies/, comments aside, and fails naming:
  - every code-shaped string literal (^[A-Z][A-Z0-9]*_[A-Z0-9_]+$) the list lacks, with the
    files that use it: errors.new("CODE"), the C setters and pushers (mb_error_fail,
    mb_lua_push_error, tool_fail, ...), codes returned or compared (err.code == "CODE") alike;
    what is not an error code is told apart by where it stands (getenv("NAME"), find_binary,
    env_value: environment variables) or is one of envd's protobuf enum names (NOT_CODES);
  - every code of the list that nothing makes: no literal of it outside comparisons
    (==, ~=, strcmp, errors.is), no C identifier of it (MB_E_<x> of enum mb_err, MB_CODE_<x>),
    and not made at run time (envd's Connect codes: "E2B_" .. string.upper(code), with the names
    of core/connect.c; a family PREFIX_*: "PREFIX_" .. x);
  - the table of lua/README.md ("Error codes", between its markers) when it is not the one made
    from the list: run `tests/error_codes.py --write` to rewrite it.
Exit status 0 when all agree; --list prints every code with the files that make it. Run by
ctest (tests/c/CMakeLists.txt: error_codes)."""
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
LIST = os.path.join(ROOT, 'core', 'error_codes.def')
README = os.path.join(ROOT, 'lua', 'README.md')
CONNECT = os.path.join(ROOT, 'core', 'connect.c')
SCAN_DIRS = ('core', 'sandboxd', 'lua', 'policies')
SKIP_PREFIXES = ('core/gen/',)
CODE_RE = re.compile(r'^[A-Z][A-Z0-9]*_[A-Z0-9_]+$')
# envd's protobuf enum value names (wire values, not error codes).
NOT_CODES = ('EVENT_TYPE_', 'FILE_TYPE_', 'SIGNAL_', 'FILESYSTEM__', 'PROCESS__')
# Environment variables named in messages or tables (image.c: the proxy variables skopeo is given).
NOT_CODE_NAMES = {'LUA_PATH', 'E2B_API_URL', 'E2B_SANDBOX_URL', 'MOONBOX_CA_FILE', 'MOONBOX_CONNECT_TO',
                  'HTTPS_PROXY', 'HTTP_PROXY', 'NO_PROXY'}
# A literal right after one of these is an environment variable's name.
ENV_BEFORE = re.compile(r'(?:\bgetenv|\bget|\bfind_binary|\bbinaries\.find|\bpool_size|\bcache_bound)\s*\(\s*$|\benv_value\s*\(\s*\w+\s*,\s*$')
# A literal in one of these places is compared with, not made.
CMP_BEFORE = re.compile(r'(?:==|~=|!=)\s*$|\bstrcmp\s*\([^;()]*,\s*$|\berrors\.is\s*\([^;()]*,\s*$')
CMP_AFTER = re.compile(r'^\s*(?:==|~=|!=)')
BEGIN = '<!-- error codes: made from core/error_codes.def by tests/error_codes.py --write; do not edit -->'
END = '<!-- end of error codes -->'

CSTR = r'"((?:[^"\\]|\\.)*)"'


def unescape(s):
    return re.sub(r'\\(.)', r'\1', s)


def read_list():
    """[(kind, name, meaning, modules, enum, section)] in the list's order."""
    text = open(LIST, encoding='utf-8').read()
    body = re.sub(r'/\*(?!\s*----).*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    out, section = [], ''
    errno_re = re.compile(r'^MB_ERRNO\((\w+),\s*(\w+),\s*' + CSTR + r',\s*' + CSTR + r',\s*' + CSTR + r'\)\s*$')
    error_re = re.compile(r'^MB_ERROR\((\w+),\s*' + CSTR + r',\s*' + CSTR + r'\)\s*$')
    family_re = re.compile(r'^MB_ERROR_FAMILY\((\w+),\s*' + CSTR + r',\s*' + CSTR + r'\)\s*$')
    for n, line in enumerate(body.splitlines(), 1):
        line = line.strip()
        m = re.match(r'^/\*\s*----\s*(.*?)\s*----\s*\*/$', line)
        if m:
            section = m.group(1)
            continue
        if not line or line.startswith('#'):
            continue
        m = errno_re.match(line)
        if m:
            out.append(('errno', m.group(2), unescape(m.group(4)), unescape(m.group(5)), m.group(1), section))
            continue
        m = error_re.match(line)
        if m:
            out.append(('error', m.group(1), unescape(m.group(2)), unescape(m.group(3)), None, section))
            continue
        m = family_re.match(line)
        if m:
            out.append(('family', m.group(1) + '_', unescape(m.group(2)), unescape(m.group(3)), None, section))
            continue
        sys.exit('%s:%d: not a line of the list: %s' % (os.path.relpath(LIST, ROOT), n, line))
    return out


def source_files():
    try:
        out = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '--'] + list(SCAN_DIRS), cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split('\n')
    except (OSError, subprocess.CalledProcessError):
        out = []
        for d in SCAN_DIRS:
            for dirpath, _, names in os.walk(os.path.join(ROOT, d)):
                out += [os.path.relpath(os.path.join(dirpath, f), ROOT) for f in names]
    return sorted(f for f in set(out) if f.endswith(('.c', '.h', '.lua')) and not f.startswith(SKIP_PREFIXES)
                  and os.path.isfile(os.path.join(ROOT, f)))


def strip(text, lua):
    """(code, nocomment, literals): the text with comments and string contents blanked, the
    text with comments blanked (offsets kept), and every string literal as (value, start, end)."""
    out, lits, i, n = list(text), [], 0, len(text)
    keep = list(text)

    def blank(a, b, strings=False):
        for k in range(a, b):
            if out[k] != '\n':
                out[k] = ' '
                if not strings:
                    keep[k] = ' '

    while i < n:
        c = text[i]
        if lua and text.startswith('--', i):
            m = re.match(r'--\[(=*)\[', text[i:])
            if m:
                j = text.find(']' + m.group(1) + ']', i)
                j = n if j < 0 else j + len(m.group(1)) + 2
            else:
                j = text.find('\n', i)
                j = n if j < 0 else j
            blank(i, j)
            i = j
        elif lua and re.match(r'\[(=*)\[', text[i:]):
            m = re.match(r'\[(=*)\[', text[i:])
            j = text.find(']' + m.group(1) + ']', i)
            j = n if j < 0 else j + len(m.group(1)) + 2
            blank(i, j)
            i = j
        elif not lua and text.startswith('/*', i):
            j = text.find('*/', i)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif not lua and text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif c == '"' or c == "'":
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            j = min(j + 1, n)
            if c == '"' or lua:
                lits.append((text[i + 1:j - 1], i, j))
            blank(i + 1, j - 1, strings=True)
            i = j
        else:
            i += 1
    return ''.join(out), ''.join(keep), lits


def scan(files, names, families, enum_name):
    """→ (unknown {code: files}, made {code: files})."""
    unknown, made = {}, {}

    def known(code):
        return code in names or any(code.startswith(p) and len(code) > len(p) for p in families)

    def mark(d, code, f):
        d.setdefault(code, set()).add(f)

    connect = re.findall(r'\{"([a-z_]+)",\s*\d+\}', open(CONNECT, encoding='utf-8').read())
    for f in files:
        text = open(os.path.join(ROOT, f), encoding='utf-8', errors='replace').read()
        lua = f.endswith('.lua')
        code, nocomment, lits = strip(text, lua)
        for value, a, b in lits:
            if not CODE_RE.match(value) or value.startswith(NOT_CODES) or value in NOT_CODE_NAMES:
                continue
            before = code[max(0, a - 80):a].split('\n')[-1]
            after = code[b:b + 12]
            if ENV_BEFORE.search(before):
                continue
            if not known(value):
                mark(unknown, value, f)
            if not (CMP_BEFORE.search(before) or CMP_AFTER.match(after)):
                mark(made, value, f)
        if not lua and f not in ('core/include/moonbox_errors.h', 'core/errors.h', 'core/errors.c'):
            for m in re.finditer(r'\b(MB_E_[A-Z_]+|MB_CODE_[A-Z0-9_]+)\b', code):
                ident = m.group(1)
                before = code[max(0, m.start() - 40):m.start()].split('\n')[-1]
                if CMP_BEFORE.search(before) or CMP_AFTER.match(code[m.end():m.end() + 12]):
                    continue
                name = enum_name.get(ident) or (ident[len('MB_CODE_'):] if ident.startswith('MB_CODE_') else None)
                if name and name in names:
                    mark(made, name, f)
                elif ident.startswith('MB_CODE_') and ident not in ('MB_CODE_OK', 'MB_CODE__COUNT'):
                    mark(unknown, ident[len('MB_CODE_'):], f)
        if lua and re.search(r'"E2B_"\s*\.\.\s*string\.upper\(', nocomment):
            for c in connect:
                mark(made, 'E2B_' + c.upper(), f)
        for p in families:
            if re.search(r'"' + re.escape(p) + r'"\s*\.\.', nocomment) or re.search(r'"' + re.escape(p) + r'%s', nocomment):
                mark(made, p, f)
    return unknown, made


def table(entries):
    """The README's table, made from the list."""
    lines, section = [BEGIN], None
    for kind, name, meaning, modules, _, sec in entries:
        if sec != section:
            if section is not None:
                lines.append('')
            lines += ['**%s**' % sec, '', '| code | meaning | raised by |', '|---|---|---|']
            section = sec
        shown = '`%s<…>`' % name if kind == 'family' else '`%s`' % name
        lines.append('| %s | %s | %s |' % (shown, meaning, modules))
    lines.append(END)
    return '\n'.join(lines)


def main():
    entries = read_list()
    names = {e[1] for e in entries if e[0] != 'family'}
    families = [e[1] for e in entries if e[0] == 'family']
    seen, problems = set(), []
    for e in entries:
        if e[1] in seen:
            problems.append('core/error_codes.def: %s is listed twice' % e[1])
        seen.add(e[1])
    enum_name = {e[4]: e[1] for e in entries if e[0] == 'errno'}
    unknown, made = scan(source_files(), names, families, enum_name)
    if '--list' in sys.argv:
        for e in entries:
            print('%-28s %s' % (e[1] + ('*' if e[0] == 'family' else ''), ' '.join(sorted(made.get(e[1], ())))))
    for code in sorted(unknown):
        problems.append('%s is not in core/error_codes.def (used in %s)' % (code, ', '.join(sorted(unknown[code]))))
    for e in entries:
        if e[1] not in made:
            problems.append('%s is in core/error_codes.def but nothing makes it' % (e[1] + ('*' if e[0] == 'family' else '')))
    want = table(entries)
    doc = open(README, encoding='utf-8').read()
    a, b = doc.find(BEGIN), doc.find(END)
    if a < 0 or b < a:
        problems.append('lua/README.md has no table of error codes between the markers %s ... %s' % (BEGIN, END))
    elif doc[a:b + len(END)] != want:
        if '--write' in sys.argv:
            with open(README, 'w', encoding='utf-8') as out:
                out.write(doc[:a] + want + doc[b + len(END):])
            print('lua/README.md: the table of error codes rewritten')
        else:
            problems.append('lua/README.md: the table of error codes is not the list\'s (run tests/error_codes.py --write)')
    for p in problems:
        print('error_codes: ' + p)
    if not problems:
        print('error_codes: %d codes and %d families, every one made, every made one listed, lua/README.md current'
              % (len(names), len(families)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
