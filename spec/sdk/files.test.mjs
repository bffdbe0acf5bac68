// Filesystem conformance: /files upload/download and the filesystem.Filesystem RPCs, through the SDK.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { T, newSandbox, waitFor, connectUnary, FileNotFoundError, InvalidArgumentError, SandboxError } from './helpers.mjs'

const HOME = '/home/user'
const pick = (w) => ({ name: w.name, type: w.type, path: w.path, metadata: w.metadata })

test('write then read text returns the same text and a WriteInfo for the home directory', T, async (t) => {
  const sbx = await newSandbox(t)
  const info = await sbx.files.write('hello.txt', 'Hello, World!\n')
  assert.deepEqual(pick(info), { name: 'hello.txt', type: 'file', path: `${HOME}/hello.txt`, metadata: undefined })
  assert.equal(await sbx.files.read('hello.txt'), 'Hello, World!\n')
  assert.equal(await sbx.files.read(`${HOME}/hello.txt`), 'Hello, World!\n')
  // the same bytes are seen by a process inside
  assert.equal((await sbx.commands.run('cat ~/hello.txt')).stdout, 'Hello, World!\n')
})

test('binary data (all 256 byte values, ArrayBuffer and Blob) round-trips', T, async (t) => {
  const sbx = await newSandbox(t)
  const bytes = new Uint8Array(4096).map((_, i) => (i * 7 + 3) & 0xff)
  await sbx.files.write('bin.dat', bytes.buffer)
  const back = await sbx.files.read('bin.dat', { format: 'bytes' })
  assert.ok(back instanceof Uint8Array)
  assert.deepEqual(Buffer.from(back), Buffer.from(bytes))
  await sbx.files.write('blob.dat', new Blob([bytes]))
  assert.deepEqual(Buffer.from(await sbx.files.read('blob.dat', { format: 'bytes' })), Buffer.from(bytes))
  const sum = (await sbx.commands.run('sha256sum bin.dat | cut -d" " -f1')).stdout.trim()
  const { createHash } = await import('node:crypto')
  assert.equal(sum, createHash('sha256').update(bytes).digest('hex'))
})

test('empty file reads as empty string; missing file → FileNotFoundError', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.write('empty.txt', '')
  assert.equal(await sbx.files.read('empty.txt'), '')
  assert.equal((await sbx.files.read('empty.txt', { format: 'bytes' })).length, 0)
  await assert.rejects(sbx.files.read('does-not-exist.txt'), FileNotFoundError)
  // a directory is not readable as a file
  await assert.rejects(sbx.files.read(HOME), SandboxError)
})

test('overwrite replaces the whole content (shorter content truncates)', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.write('o.txt', 'a much longer first version')
  await sbx.files.write('o.txt', 'short')
  assert.equal(await sbx.files.read('o.txt'), 'short')
})

test('write creates missing parent directories owned by user', T, async (t) => {
  const sbx = await newSandbox(t)
  const info = await sbx.files.write('p1/p2/p3/deep.txt', 'deep')
  assert.equal(info.path, `${HOME}/p1/p2/p3/deep.txt`)
  assert.equal(await sbx.files.read('p1/p2/p3/deep.txt'), 'deep')
  const dir = await sbx.files.getInfo('p1/p2')
  assert.equal(dir.type, 'dir')
  assert.equal(dir.owner, 'user')
  // absolute path in a root-owned place, written as root
  const r = await sbx.files.write('/opt/mbroot/x/y.txt', 'root data', { user: 'root' })
  assert.equal(r.path, '/opt/mbroot/x/y.txt')
  assert.equal((await sbx.files.getInfo('/opt/mbroot/x/y.txt')).owner, 'root')
  // like envd, /files writes for `user` anywhere and hands the file to user
  await sbx.files.write('/opt/mbroot/x/z.txt', 'as user')
  assert.equal((await sbx.files.getInfo('/opt/mbroot/x/z.txt')).owner, 'user')
})

test('multi-file write returns one WriteInfo per file in order', T, async (t) => {
  const sbx = await newSandbox(t)
  const res = await sbx.files.write([
    { path: 'multi/one.txt', data: 'one' },
    { path: `${HOME}/multi/two.txt`, data: 'two' },
    { path: 'multi/sub/three.bin', data: new Uint8Array([0, 1, 2, 255]).buffer },
  ])
  assert.ok(Array.isArray(res))
  assert.deepEqual(
    res.map((r) => [r.name, r.path, r.type]),
    [
      ['one.txt', `${HOME}/multi/one.txt`, 'file'],
      ['two.txt', `${HOME}/multi/two.txt`, 'file'],
      ['three.bin', `${HOME}/multi/sub/three.bin`, 'file'],
    ],
  )
  assert.equal(await sbx.files.read('multi/one.txt'), 'one')
  assert.equal(await sbx.files.read('multi/two.txt'), 'two')
  assert.deepEqual([...(await sbx.files.read('multi/sub/three.bin', { format: 'bytes' }))], [0, 1, 2, 255])
  // an array of one still returns an array; an empty array returns []
  const single = await sbx.files.write([{ path: 'multi/four.txt', data: '4' }])
  assert.equal(single.length, 1)
  assert.deepEqual(await sbx.files.write([]), [])
})

test('list: depth 1/2/3 in exact lexical pre-order with entry details', T, async (t) => {
  const sbx = await newSandbox(t)
  // "a-b" sorts before "a/x" as a full path but after "a" as a name: pre-order walk puts a's children first.
  await sbx.files.write([
    { path: 'L/a/x.txt', data: 'x' },
    { path: 'L/a/y/z.txt', data: 'zz' },
    { path: 'L/a-b/k.txt', data: 'k' },
    { path: 'L/B.txt', data: 'B' },
    { path: 'L/b.txt', data: 'bbb' },
  ])
  await sbx.files.makeDir('L/c')
  const rel = (es) => es.map((e) => e.path.slice(`${HOME}/L/`.length))

  const d1 = await sbx.files.list('L')
  assert.deepEqual(rel(d1), ['B.txt', 'a', 'a-b', 'b.txt', 'c'])
  assert.deepEqual(d1.map((e) => e.name), ['B.txt', 'a', 'a-b', 'b.txt', 'c'])
  assert.deepEqual(d1.map((e) => e.type), ['file', 'dir', 'dir', 'file', 'dir'])

  const d2 = await sbx.files.list('L', { depth: 2 })
  assert.deepEqual(rel(d2), ['B.txt', 'a', 'a/x.txt', 'a/y', 'a-b', 'a-b/k.txt', 'b.txt', 'c'])

  const d3 = await sbx.files.list(`${HOME}/L`, { depth: 3 })
  assert.deepEqual(rel(d3), ['B.txt', 'a', 'a/x.txt', 'a/y', 'a/y/z.txt', 'a-b', 'a-b/k.txt', 'b.txt', 'c'])

  const b = d3.find((e) => e.name === 'b.txt')
  assert.equal(b.size, 3)
  assert.equal(b.mode, 0o644)
  assert.equal(b.permissions, '-rw-r--r--')
  assert.equal(b.owner, 'user')
  assert.equal(b.group, 'user')
  assert.equal(b.symlinkTarget, undefined)
  assert.ok(b.modifiedTime instanceof Date && !Number.isNaN(b.modifiedTime.getTime()))
  const z = d3.find((e) => e.name === 'z.txt')
  assert.equal(z.path, `${HOME}/L/a/y/z.txt`)
  assert.equal(z.size, 2)

  await assert.rejects(sbx.files.list('L/missing'), FileNotFoundError)
  await assert.rejects(sbx.files.list('L/b.txt'), SandboxError)
})

test('exists and getInfo: file, directory, symlink', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.write('info.txt', 'abcd')
  assert.equal(await sbx.files.exists('info.txt'), true)
  assert.equal(await sbx.files.exists('nope.txt'), false)
  assert.equal(await sbx.files.exists(HOME), true)

  const f = await sbx.files.getInfo('info.txt')
  assert.equal(f.name, 'info.txt')
  assert.equal(f.type, 'file')
  assert.equal(f.path, `${HOME}/info.txt`)
  assert.equal(f.size, 4)
  assert.equal(f.mode, 0o644)
  assert.equal(f.permissions, '-rw-r--r--')
  assert.equal(f.owner, 'user')
  assert.equal(f.group, 'user')
  assert.equal(f.symlinkTarget, undefined)
  assert.equal(f.metadata, undefined)
  assert.ok(f.modifiedTime instanceof Date && !Number.isNaN(f.modifiedTime.getTime()))

  assert.equal(await sbx.files.makeDir('info-dir'), true)
  const d = await sbx.files.getInfo('info-dir')
  assert.equal(d.type, 'dir')
  assert.equal(d.mode, 0o755)
  assert.equal(d.permissions, 'drwxr-xr-x')
  assert.ok(d.size > 0)

  await sbx.commands.run('ln -s /home/user/info.txt info-link')
  const l = await sbx.files.getInfo('info-link')
  assert.equal(l.name, 'info-link')
  assert.equal(l.path, `${HOME}/info-link`)
  assert.equal(l.symlinkTarget, `${HOME}/info.txt`)
  assert.equal(l.type, 'file')

  // a file created by a process shows its real owner
  await sbx.commands.run('touch /tmp/root-made', { user: 'root' })
  const r = await sbx.files.getInfo('/tmp/root-made')
  assert.equal(r.owner, 'root')
  assert.equal(r.group, 'root')

  await assert.rejects(sbx.files.getInfo('nope.txt'), FileNotFoundError)
})

test('a write through a dangling link makes its target, the link kept (as envd: open with O_CREAT follows it)', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.commands.run('mkdir -p d && ln -s d/target.txt dang && ln -s dang chain && ln -s /nowhere/x.txt noparent && ln -s notes.txt rel')
  const info = await sbx.files.write('chain', 'through two links\n')
  assert.equal(info.path, `${HOME}/chain`)
  const seen = await sbx.commands.run('readlink chain; readlink dang; cat d/target.txt; stat -c %U d/target.txt; ls -A d')
  assert.equal(seen.stdout, 'dang\nd/target.txt\nthrough two links\nuser\ntarget.txt\n')
  assert.equal(await sbx.files.read('dang'), 'through two links\n')
  // a second write goes to the same file (now there: the link resolves)
  await sbx.files.write('dang', 'again\n')
  assert.equal((await sbx.commands.run('cat d/target.txt; test -L dang && echo link')).stdout, 'again\nlink\n')
  // the target's directory missing: refused (envd: no such file or directory), nothing made, the link kept
  await assert.rejects(sbx.files.write('noparent', 'x'), (e) => e instanceof SandboxError && /noparent.*No such file or directory/.test(e.message))
  assert.equal((await sbx.commands.run('test -L noparent && test ! -e /nowhere && echo kept')).stdout, 'kept\n')
  // a multi-file write through a link and beside it
  await sbx.files.write([{ path: 'rel', data: 'via rel' }, { path: 'plain.txt', data: 'plain' }])
  assert.equal((await sbx.commands.run('cat notes.txt; echo; cat plain.txt; test -L rel && echo " link"')).stdout, 'via rel\nplain link\n')
})

test('makeDir: true when created (nested), false when it already exists', T, async (t) => {
  const sbx = await newSandbox(t)
  assert.equal(await sbx.files.makeDir('md'), true)
  assert.equal(await sbx.files.makeDir('md/n1/n2/n3'), true)
  assert.equal((await sbx.files.getInfo('md/n1/n2/n3')).type, 'dir')
  assert.equal(await sbx.files.makeDir('md'), false)
  assert.equal(await sbx.files.makeDir(`${HOME}/md/n1`), false)
  assert.equal((await sbx.commands.run('stat -c %U:%a md/n1/n2')).stdout.trim(), 'user:755')
  await sbx.files.write('md/file', 'x')
  await assert.rejects(sbx.files.makeDir('md/file'), SandboxError)
})

test('rename moves files and directories; missing source → FileNotFoundError', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.write('r-src.txt', 'move me')
  const e = await sbx.files.rename('r-src.txt', 'r-dst.txt')
  assert.equal(e.name, 'r-dst.txt')
  assert.equal(e.path, `${HOME}/r-dst.txt`)
  assert.equal(e.type, 'file')
  assert.equal(await sbx.files.exists('r-src.txt'), false)
  assert.equal(await sbx.files.read('r-dst.txt'), 'move me')

  await sbx.files.write('r-dir/inner.txt', 'inner')
  const d = await sbx.files.rename('r-dir', 'r-dir2')
  assert.equal(d.type, 'dir')
  assert.equal(await sbx.files.read('r-dir2/inner.txt'), 'inner')

  await assert.rejects(sbx.files.rename('r-missing.txt', 'r-other.txt'), FileNotFoundError)
})

test('remove deletes files and whole trees; removing a missing path is fine', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.write('rm/a/b.txt', 'b')
  await sbx.files.write('rm.txt', 'x')
  await sbx.files.remove('rm.txt')
  assert.equal(await sbx.files.exists('rm.txt'), false)
  await sbx.files.remove('rm')
  assert.equal(await sbx.files.exists('rm'), false)
  assert.equal(await sbx.files.exists('rm/a/b.txt'), false)
  await sbx.files.remove('never-existed.txt')
})

test('metadata round-trips (multipart and octet-stream), is lower-cased, survives rename, cleared on overwrite', T, async (t) => {
  const sbx = await newSandbox(t)
  const w = await sbx.files.write('meta.txt', 'm', { metadata: { Author: 'alice', team: 'core' } })
  assert.deepEqual(w.metadata, { author: 'alice', team: 'core' })
  assert.deepEqual((await sbx.files.getInfo('meta.txt')).metadata, { author: 'alice', team: 'core' })
  const listed = (await sbx.files.list(HOME)).find((e) => e.name === 'meta.txt')
  assert.deepEqual(listed.metadata, { author: 'alice', team: 'core' })

  const moved = await sbx.files.rename('meta.txt', 'meta2.txt')
  assert.deepEqual(moved.metadata, { author: 'alice', team: 'core' })

  const o = await sbx.files.write('meta-oct.txt', 'o', { useOctetStream: true, metadata: { k: 'v 1' } })
  assert.deepEqual(o.metadata, { k: 'v 1' })
  assert.deepEqual((await sbx.files.getInfo('meta-oct.txt')).metadata, { k: 'v 1' })

  // overwriting without metadata clears it
  await sbx.files.write('meta2.txt', 'again')
  assert.equal((await sbx.files.getInfo('meta2.txt')).metadata, undefined)

  // an xattr set by a process inside shows up as metadata
  await sbx.files.write('meta3.txt', 'x')
  await sbx.commands.run(`python3 -c "import os; os.setxattr('meta3.txt', 'user.e2b.color', b'blue')"`)
  assert.deepEqual((await sbx.files.getInfo('meta3.txt')).metadata, { color: 'blue' })

  // invalid keys are refused by the SDK before any request; invalid header from a raw client is refused by the server
  await assert.rejects(sbx.files.write('meta4.txt', 'x', { metadata: { 'bad key': 'v' } }), InvalidArgumentError)
})

test('gzip: compressed upload (octet-stream) and compressed download decode to the same bytes', T, async (t) => {
  const sbx = await newSandbox(t)
  const text = 'compress me '.repeat(2000)
  await sbx.files.write('gz.txt', text, { useOctetStream: true, gzip: true })
  assert.equal(await sbx.files.read('gz.txt'), text)
  assert.equal(await sbx.files.read('gz.txt', { gzip: true }), text)
  assert.equal((await sbx.commands.run('wc -c < gz.txt')).stdout.trim(), String(text.length))

  const bytes = new Uint8Array(10000).map((_, i) => (i * 31) & 0xff)
  await sbx.files.write('gz.bin', bytes.buffer, { useOctetStream: true, gzip: true })
  assert.deepEqual(Buffer.from(await sbx.files.read('gz.bin', { format: 'bytes', gzip: true })), Buffer.from(bytes))
  assert.deepEqual(Buffer.from(await sbx.files.read('gz.bin', { format: 'bytes' })), Buffer.from(bytes))
})

test('octet-stream mode: single and multiple files', T, async (t) => {
  const sbx = await newSandbox(t)
  const one = await sbx.files.write('oct/a.txt', 'A', { useOctetStream: true })
  assert.deepEqual(pick(one), { name: 'a.txt', type: 'file', path: `${HOME}/oct/a.txt`, metadata: undefined })
  const many = await sbx.files.write(
    [
      { path: 'oct/b.txt', data: 'B' },
      { path: 'oct/c.txt', data: 'C' },
    ],
    { useOctetStream: true },
  )
  assert.deepEqual(many.map((m) => m.path), [`${HOME}/oct/b.txt`, `${HOME}/oct/c.txt`])
  assert.equal((await sbx.commands.run('cat oct/a.txt oct/b.txt oct/c.txt')).stdout, 'ABC')
  assert.equal((await sbx.files.getInfo('oct/b.txt')).mode, 0o644)
})

test('watchDir reports writes with names relative to the watched directory', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.makeDir('w')
  const events = []
  const h = await sbx.files.watchDir('w', (e) => events.push(e))
  try {
    await sbx.files.write('w/f.txt', 'hello')
    await waitFor(() => events.some((e) => e.name === 'f.txt' && e.type === 'write'), { what: 'write event for f.txt' })
    await sbx.commands.run('rm w/f.txt')
    await waitFor(() => events.some((e) => e.name === 'f.txt' && e.type === 'remove'), { what: 'remove event for f.txt' })
    // non-recursive: nothing from below a subdirectory
    assert.ok(events.every((e) => !e.name.includes('/')))
    assert.ok(events.every((e) => e.entry === undefined))
  } finally {
    await h.stop()
  }
})

test('watchDir recursive: nested names, and directories created after the watch started', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.makeDir('wr/existing')
  const events = []
  const h = await sbx.files.watchDir('wr', (e) => events.push(e), { recursive: true })
  try {
    await sbx.files.write('wr/existing/n.txt', 'n')
    await waitFor(() => events.some((e) => e.name === 'existing/n.txt' && e.type === 'write'), { what: 'existing/n.txt write' })
    await sbx.files.makeDir('wr/fresh')
    await waitFor(() => events.some((e) => e.name === 'fresh' && e.type === 'create'), { what: 'fresh create' })
    // give the watcher a moment-independent way to pick up the new dir: write until seen (bounded)
    await waitFor(
      async () => {
        await sbx.files.write('wr/fresh/g.txt', 'g')
        return events.some((e) => e.name === 'fresh/g.txt' && e.type === 'write')
      },
      { what: 'fresh/g.txt write', intervalMs: 300 },
    )
  } finally {
    await h.stop()
  }
})

test('watchDir includeEntry attaches the entry; missing dir → FileNotFoundError; a file → SandboxError', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.makeDir('we')
  const events = []
  const h = await sbx.files.watchDir('we', (e) => events.push(e), { includeEntry: true })
  try {
    await sbx.files.write('we/e.txt', 'entry')
    const ev = await waitFor(() => events.find((e) => e.name === 'e.txt' && e.type === 'write' && e.entry), { what: 'write event with entry' })
    assert.equal(ev.entry.name, 'e.txt')
    assert.equal(ev.entry.path, `${HOME}/we/e.txt`)
    assert.equal(ev.entry.type, 'file')
  } finally {
    await h.stop()
  }
  await assert.rejects(sbx.files.watchDir('no-such-dir', () => {}), FileNotFoundError)
  await sbx.files.write('we-file.txt', 'x')
  await assert.rejects(sbx.files.watchDir('we-file.txt', () => {}), SandboxError)
})

test('Stat on the wire: EntryInfo fields as envd sends them, absent ones omitted', T, async (t) => {
  const sbx = await newSandbox(t)
  await sbx.files.write('wire.txt', 'wire')
  const r = await connectUnary(sbx, 'filesystem.Filesystem/Stat', { path: 'wire.txt' })
  assert.equal(r.status, 200)
  const e = r.body.entry
  assert.deepEqual(Object.keys(e).sort(), ['group', 'mode', 'modifiedTime', 'name', 'owner', 'path', 'permissions', 'size', 'type'])
  assert.equal(e.type, 'FILE_TYPE_FILE')
  assert.equal(Number(e.size), 4)
  assert.equal(e.mode, 0o644)
  assert.match(e.modifiedTime, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/)
  const missing = await connectUnary(sbx, 'filesystem.Filesystem/Stat', { path: 'nope.txt' })
  assert.equal(missing.status, 404)
  assert.equal(missing.body.code, 'not_found')
})
