// Template COPY steps (issue 20): symbolic links as E2B defines them (the SDK's tar keeps a link as
// a link; with `resolveSymlinks: true` it holds the target's contents), a link pointing outside
// the copied tree, a large file (its sha256 checked inside the sandbox), and archives crafted to
// write outside the copy's directory (a `../` member, a file under a link to elsewhere) sent
// through the upload URL directly: the build fails at that step, saying why.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { mkdtempSync, mkdirSync, writeFileSync, symlinkSync, openSync, writeSync, closeSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Sandbox, SDK_PACKAGE, apiFetch, killQuietly, uniq } from './helpers.mjs'

const { Template } = await import(SDK_PACKAGE)
const skip = typeof Template !== 'function' ? `${SDK_PACKAGE} has no Template builder` : false
const TB = { timeout: 300_000, skip }

const deleteQuietly = (ref) => apiFetch(`/templates/${encodeURIComponent(ref)}`, { method: 'DELETE' }).catch(() => {})
const json = (body) => ({ method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } })

function tempDir(t, prefix) {
  const dir = mkdtempSync(path.join(tmpdir(), prefix))
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

async function buildAndCreate(t, tpl, prefix) {
  const name = uniq(prefix)
  t.after(() => deleteQuietly(name))
  await Template.build(tpl, name)
  const sbx = await Sandbox.create(name, { timeoutMs: 120_000 })
  t.after(() => killQuietly(sbx))
  return sbx
}

test('COPY of symbolic links: kept as links, or their targets\' contents with resolveSymlinks', TB, async (t) => {
  const dir = tempDir(t, 'mb-tplsym-')
  const outside = tempDir(t, 'mb-tplout-')   // a file outside the build context
  writeFileSync(path.join(outside, 'secret.txt'), 'outside the context\n')
  writeFileSync(path.join(dir, 'hello.txt'), 'hello\n')
  symlinkSync('hello.txt', path.join(dir, 'link.txt'))
  symlinkSync(path.join(outside, 'secret.txt'), path.join(dir, 'outlink.txt'))
  mkdirSync(path.join(dir, 'tree', 'sub'), { recursive: true })
  writeFileSync(path.join(dir, 'tree', 'sub', 'data.txt'), 'data\n')
  symlinkSync('sub/data.txt', path.join(dir, 'tree', 'in'))        // inside the copied tree
  symlinkSync('../hello.txt', path.join(dir, 'tree', 'up'))        // outside the copied tree
  symlinkSync(path.join(outside, 'secret.txt'), path.join(dir, 'tree', 'abs')) // absolute, outside (the SDK hashes a link's target: it must exist)
  symlinkSync('sub', path.join(dir, 'tree', 'subdir'))             // to a directory
  const tpl = Template({ fileContextPath: dir })
    .fromTemplate('base')
    .copy('hello.txt', '/opt/c/hello.txt')
    .copy('link.txt', '/opt/c/link.txt')
    .copy('link.txt', '/opt/c/link-moded.txt', { mode: 0o600 })
    .copy('link.txt', '/opt/c/resolved.txt', { resolveSymlinks: true })
    .copy('outlink.txt', '/opt/c/outlink.txt')
    .copy('outlink.txt', '/opt/c/outside.txt', { resolveSymlinks: true, mode: 0o640 })
    .copy('tree', '/opt/tree/')
  const sbx = await buildAndCreate(t, tpl, 'tbsym')
  const run = async (cmd) => (await sbx.commands.run(cmd)).stdout
  const kind = (p) => run(`stat -c %F ${p}`)
  assert.equal(await kind('/opt/c/link.txt'), 'symbolic link\n', 'a link is copied as a link by default')
  assert.equal(await run('readlink /opt/c/link.txt; cat /opt/c/link.txt'), 'hello.txt\nhello\n')
  assert.equal(await run('readlink /opt/c/link-moded.txt; stat -c %a /opt/c/hello.txt'), 'hello.txt\n644\n',
    'a mode is not applied through a link')
  assert.equal(await kind('/opt/c/resolved.txt'), 'regular file\n', 'resolveSymlinks: the target\'s contents')
  assert.equal(await run('cat /opt/c/resolved.txt'), 'hello\n')
  assert.equal(await run('readlink /opt/c/outlink.txt'), `${path.join(outside, 'secret.txt')}\n`,
    'a link to a file outside the context stays a link (its target is not copied)')
  assert.equal(await run('test -e /opt/c/outlink.txt && echo resolves || echo dangling'), 'dangling\n')
  assert.equal(await run('cat /opt/c/outside.txt; stat -c "%F %a" /opt/c/outside.txt'), 'outside the context\nregular file 640\n',
    'resolveSymlinks copies what a link outside the context points to')
  assert.equal(await run('cd /opt/tree && for l in in up abs subdir; do echo "$l $(stat -c %F $l) $(readlink $l)"; done'),
    `in symbolic link sub/data.txt\nup symbolic link ../hello.txt\nabs symbolic link ${path.join(outside, 'secret.txt')}\nsubdir symbolic link sub\n`,
    'links in a copied directory are kept as they are, wherever they point')
  assert.equal(await run('cat /opt/tree/in /opt/tree/subdir/data.txt'), 'data\ndata\n')
})

test('COPY of a large file: 256 MiB, its sha256 checked inside the sandbox', TB, async (t) => {
  const dir = tempDir(t, 'mb-tplbig-')
  const file = path.join(dir, 'big.bin')
  const hash = createHash('sha256')
  const fd = openSync(file, 'w')
  for (let i = 0; i < 256; i++) {
    const chunk = randomBytes(1 << 20)
    hash.update(chunk)
    writeSync(fd, chunk)
  }
  closeSync(fd)
  const want = hash.digest('hex')
  const sbx = await buildAndCreate(t, Template({ fileContextPath: dir }).fromTemplate('base').copy('big.bin', '/home/user/big.bin'), 'tbbig')
  const r = await sbx.commands.run('sha256sum /home/user/big.bin; stat -c "%s %U" /home/user/big.bin')
  assert.equal(r.stdout, `${want}  /home/user/big.bin\n${256 << 20} user\n`)
})

// ---- crafted archives through the upload URL

/** One ustar member: {name, type: '0' file | '2' symlink | '1' hard link | '5' dir, link, data}. */
function tarMember({ name, type = '0', link = '', data = Buffer.alloc(0), mode = 0o644 }) {
  const h = Buffer.alloc(512)
  const put = (s, off, len) => Buffer.from(s).copy(h, off, 0, len)
  const oct = (n, len) => n.toString(8).padStart(len - 1, '0') + '\0'
  put(name, 0, 100)
  put(oct(mode, 8), 100, 8)
  put(oct(0, 8), 108, 8)
  put(oct(0, 8), 116, 8)
  put(oct(type === '0' ? data.length : 0, 12), 124, 12)
  put(oct(0, 12), 136, 12)
  put('        ', 148, 8)
  put(type, 156, 1)
  put(link, 157, 100)
  put('ustar\0', 257, 6)
  put('00', 263, 2)
  let sum = 0
  for (const b of h) sum += b
  put(sum.toString(8).padStart(6, '0') + '\0 ', 148, 8)
  const body = type === '0' ? Buffer.concat([data, Buffer.alloc((512 - (data.length % 512)) % 512)]) : Buffer.alloc(0)
  return Buffer.concat([h, body])
}
const tarOf = (members) => Buffer.concat([...members.map(tarMember), Buffer.alloc(1024)])

/** Requests a build, uploads `archive` for a COPY of `src`, runs [RUN marker, COPY, RUN after]; the final status. */
async function buildWithArchive(archive, src) {
  const name = uniq('tbtar')
  const res = await apiFetch('/v3/templates', json({ name }))
  assert.equal(res.status, 202)
  const { templateID, buildID } = await res.json()
  const hash = createHash('sha256').update(archive).digest('hex')
  const link = await (await apiFetch(`/templates/${templateID}/files/${hash}`)).json()
  assert.equal(link.present, false)
  assert.equal((await fetch(link.url, { method: 'PUT', body: archive })).status, 200)
  const steps = [
    { type: 'RUN', args: ['mkdir -p /tmp/outside && echo before > /tmp/outside/file', 'root'] },
    { type: 'COPY', args: [src, '/opt/dst/'], filesHash: hash },
    { type: 'RUN', args: ['echo the-copy-went-through'] },
  ]
  const r = await apiFetch(`/v2/templates/${templateID}/builds/${buildID}`, json({ fromTemplate: 'base', steps }))
  assert.equal(r.status, 202, await r.text())
  let st
  for (let i = 0; i < 1200; i++) {
    st = await (await apiFetch(`/templates/${templateID}/builds/${buildID}/status`)).json()
    if (st.status !== 'building' && st.status !== 'waiting') break
    await new Promise((ok) => setTimeout(ok, 100))
  }
  await deleteQuietly(name)
  return st
}

test('a crafted archive cannot write outside the copy\'s directory: the build fails at the COPY step', TB, async () => {
  const cases = [
    ['a ../ member', [{ name: 'x/ok.txt', data: Buffer.from('ok\n') }, { name: '../../tmp/outside/file', data: Buffer.from('pwned\n') }],
      /Member name contains '\.\.'/],
    ['a member with .. inside its name', [{ name: 'x/../../../tmp/outside/file', data: Buffer.from('pwned\n') }], /Member name contains '\.\.'/],
    ['a file under a link to an absolute directory', [{ name: 'x', type: '2', link: '/tmp/outside' }, { name: 'x/file', data: Buffer.from('pwned\n') }],
      /x\/file: Cannot open: Not a directory/],
    ['a file under a link that climbs out', [{ name: 'x', type: '5' }, { name: 'x/up', type: '2', link: '../../../../tmp/outside' },
      { name: 'x/up/file', data: Buffer.from('pwned\n') }], /x\/up\/file: Cannot open: Not a directory/],
    ['a hard link to a file outside', [{ name: 'x', type: '1', link: '../../../../tmp/outside/file' }], /hard link/i],
  ]
  for (const [what, members, tarSays] of cases) {
    const st = await buildWithArchive(tarOf(members), 'x')
    assert.equal(st.status, 'error', `${what}: ${JSON.stringify(st)}`)
    assert.equal(st.reason.step, '2', what)
    assert.match(st.reason.message, /^COPY x \/opt\/dst\/ failed: exit status 1: /, what)
    assert.match(st.reason.message, /COPY: the upload was refused/, what)
    assert.match(st.reason.message, tarSays, `${what}: ${st.reason.message}`)
    assert.ok(!st.logEntries.some((e) => /the-copy-went-through/.test(e.message) && !/RUN/.test(e.message)), `${what}: later steps do not run`)
  }
  // the same handshake with a harmless archive builds (the cases above fail for their members only)
  const ok = await buildWithArchive(tarOf([{ name: 'x', type: '5' }, { name: 'x/in', type: '2', link: 'file' }, { name: 'x/file', data: Buffer.from('fine\n') }]), 'x')
  assert.equal(ok.status, 'ready', JSON.stringify(ok))
})
