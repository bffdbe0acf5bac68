// Volumes (issue 10 item 3), through the SDK under test and on the wire: Volume.create / connect /
// list / destroy, the volume file API (readFile, writeFile with uid/gid/mode/force, list with depth,
// makeDir, getInfo, exists, updateMetadata, remove) and volumeMounts at sandbox creation; data that
// outlives sandboxes and sandboxd restarts; every volume path resolved inside its volume.
// The SDK sends the volume file API to E2B_VOLUME_API_URL (not E2B_API_URL): set here to sandboxd.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, rmSync } from 'node:fs'
import path from 'node:path'
import {
  T,
  newSandbox,
  killQuietly,
  apiFetch,
  postJson,
  assertApiError,
  requireEnv,
  uniq,
  sh,
  startSandboxd,
  stopSandboxd,
  Sandbox,
  SandboxError,
  NotFoundError,
  SDK_PACKAGE,
} from './helpers.mjs'

const { Volume, VolumeError } = await import(SDK_PACKAGE)
/** 2.29.1 throws NotFoundError for a missing volume or path; the current SDK VolumeNotFoundError and
 * VolumePathNotFoundError (VolumeErrors). */
const isNotFound = (e) => e instanceof NotFoundError || e?.name === 'VolumePathNotFoundError' || e?.name === 'VolumeNotFoundError'
process.env.E2B_VOLUME_API_URL ??= process.env.E2B_API_URL

async function newVolume(t, name = uniq('vol-')) {
  const v = await Volume.create(name)
  t.after(() => Volume.destroy(v.volumeId).catch(() => {}))
  return v
}

const contentFetch = (v, p, init = {}, token = v.token) =>
  fetch(requireEnv().api + `/volumecontent/${v.volumeId}${p}`, { ...init, headers: { ...(token ? { Authorization: `Bearer ${token}` } : {}), ...(init.headers ?? {}) } })

test('volume lifecycle: create, connect (getInfo), list, destroy; names checked', T, async (t) => {
  const name = uniq('vol-')
  const v = await newVolume(t, name)
  assert.match(v.volumeId, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
  assert.equal(v.name, name)
  assert.ok(v.token)
  const again = await Volume.connect(v.volumeId)
  assert.equal(again.name, name)
  assert.equal(again.token, v.token)
  assert.ok((await Volume.list()).some((x) => x.volumeId === v.volumeId && x.name === name))
  await assert.rejects(Volume.create(name), (e) => e instanceof VolumeError && /already exists/.test(e.message))
  await assert.rejects(Volume.create('bad name'), (e) => e instanceof VolumeError && /'name'/.test(e.message))
  await assert.rejects(Volume.connect('00000000-0000-4000-8000-000000000000'), isNotFound)
  assert.equal(await Volume.destroy(v.volumeId), true)
  assert.equal(await Volume.destroy(v.volumeId), false)
  assert.ok(!(await Volume.list()).some((x) => x.volumeId === v.volumeId))
  // the control plane needs the API key; the list is sandboxd's shape
  await assertApiError(await apiFetch('/volumes', { headers: { 'X-API-KEY': undefined } }), 401, 'no key')
  await assertApiError(await postJson('/volumes', { name: 'x', extra: 1 }), 400, 'unknown field')
})

test('the volume file API: write (uid, gid, mode, force), read, list with depth, makeDir, getInfo, exists, updateMetadata, remove', T, async (t) => {
  const v = await newVolume(t)
  const f = await v.writeFile('/docs/a.txt', 'hello volume', { force: true, mode: 0o640, uid: 1000, gid: 1000 })
  assert.equal(f.path, '/docs/a.txt')
  assert.equal(f.name, 'a.txt')
  assert.equal(f.type, 'file')
  assert.equal(f.size, 12)
  assert.equal(f.mode, 0o640)
  assert.equal(f.uid, 1000)
  assert.ok(f.mtime instanceof Date && !Number.isNaN(f.mtime.getTime()))
  assert.equal(await v.readFile('/docs/a.txt'), 'hello volume')
  assert.deepEqual(Buffer.from(await v.readFile('docs/a.txt', { format: 'bytes' })).toString(), 'hello volume')
  // parents made for a write are 0777 and belong to the writer's owner (E2B's ensureDirs)
  const d = await v.getInfo('/docs')
  assert.equal(d.type, 'directory')
  assert.equal(d.mode, 0o777)
  assert.equal(d.uid, 1000)
  // E2B's defaults for what the API makes: 0666 files, 0777 directories, owner 9090
  const dflt = await v.writeFile('/defaults.txt', 'x')
  assert.deepEqual([dflt.mode, dflt.uid, dflt.gid], [0o666, 9090, 9090])
  const ddir = await v.makeDir('/defaults')
  assert.deepEqual([ddir.mode, ddir.uid, ddir.gid], [0o777, 9090, 9090])
  await v.remove('/defaults.txt')
  await v.remove('/defaults')
  // without force: an existing file is not replaced, a missing parent is not made
  await assert.rejects(v.writeFile('/docs/a.txt', 'again'), (e) => e instanceof VolumeError && /already exists/.test(e.message))
  await assert.rejects(v.writeFile('/nothere/b.txt', 'x'), isNotFound)
  assert.equal((await v.writeFile('/docs/a.txt', 'replaced', { force: true })).size, 8)
  assert.equal(await v.readFile('/docs/a.txt'), 'replaced')
  const big = Buffer.alloc(3 * 1024 * 1024, 7)
  assert.equal((await v.writeFile('/big.bin', big)).size, big.length)
  assert.ok(Buffer.from(await v.readFile('/big.bin', { format: 'bytes' })).equals(big))
  await assert.rejects(v.readFile('/empty'), isNotFound)
  await v.writeFile('/empty', '')
  assert.equal(await v.readFile('/empty'), '')
  // makeDir, list with depth
  const m = await v.makeDir('/a/b/c', { force: true, mode: 0o750 })
  assert.equal(m.mode, 0o750)
  await assert.rejects(v.makeDir('/a/b/c'), (e) => e instanceof VolumeError && /already exists/.test(e.message))
  await assert.rejects(v.makeDir('/x/y'), isNotFound)
  const top = (await v.list('/')).map((e) => e.path).sort()
  assert.deepEqual(top, ['/a', '/big.bin', '/docs', '/empty'])
  const deep = (await v.list('/', { depth: 3 })).map((e) => e.path).sort()
  assert.deepEqual(deep, ['/a', '/a/b', '/a/b/c', '/big.bin', '/docs', '/docs/a.txt', '/empty'])
  await assert.rejects(v.list('/', { depth: 11 }), (e) => e instanceof VolumeError && /depth/.test(e.message))
  await assert.rejects(v.list('/nothing'), isNotFound)
  // getInfo, exists, updateMetadata, remove
  assert.equal(await v.exists('/docs/a.txt'), true)
  assert.equal(await v.exists('/docs/none'), false)
  const u = await v.updateMetadata('/docs/a.txt', { mode: 0o600, uid: 0, gid: 0 })
  assert.equal(u.mode, 0o600)
  assert.equal(u.uid, 0)
  await assert.rejects(v.updateMetadata('/docs/a.txt', { uid: 70000 }), (e) => e instanceof VolumeError && /uid 70000/.test(e.message))
  await v.remove('/a')
  assert.equal(await v.exists('/a/b/c'), false)
  await assert.rejects(v.remove('/a'), isNotFound)
  await assert.rejects(v.remove('/'), (e) => e instanceof VolumeError && /root/.test(e.message))
  // on the wire: the token is the volume's, not the API key; unknown parameters are refused
  assert.equal((await contentFetch(v, '/path?path=/docs', {}, null)).status, 401)
  assert.equal((await contentFetch(v, '/path?path=/docs', { headers: { 'X-API-KEY': requireEnv().key } }, null)).status, 401)
  assert.equal((await contentFetch(v, '/path?path=/docs', {}, 'wrong')).status, 401)
  const unknown = await contentFetch(v, '/path?path=/docs&recursive=true')
  assert.equal(unknown.status, 400)
  assert.match((await unknown.json()).message, /'recursive'/)
  const nul = await contentFetch(v, '/path?path=/docs%00/x')
  assert.equal(nul.status, 400)
  assert.match((await nul.json()).message, /NUL/)
  const body = await (await contentFetch(v, '/path?path=/gone')).json()
  assert.equal(typeof body.code, 'string', 'the content API\'s Error has a string code')
  assert.match(body.message, /not found/)
})

test('every volume path stays inside its volume: ".." is folded at its root, symlinks pointing out resolve inside', T, async (t) => {
  const v = await newVolume(t)
  const sbx = await newSandbox(t, { volumeMounts: { '/mnt/v': v } })
  await sbx.commands.run('ln -s /etc /mnt/v/abs && ln -s ../../../../../../etc /mnt/v/up && mkdir /mnt/v/real && ln -s real /mnt/v/rel', { user: 'root' })
  for (const p of ['../../../../etc/passwd', '/../etc/passwd', 'abs/passwd', '/up/passwd']) {
    await assert.rejects(v.readFile(p), isNotFound, p)
    assert.equal(await v.exists(p), false, p)
  }
  const link = await v.getInfo('/abs')
  assert.equal(link.type, 'symlink')
  // writing through them lands nowhere outside: the host's /etc is untouched
  await assert.rejects(v.writeFile('/abs/mb-volume-escape', 'x', { force: true }), VolumeError)
  assert.equal(existsSync('/etc/mb-volume-escape'), false)
  // a symlink inside the volume is followed inside it
  await v.writeFile('/rel/inside.txt', 'ok')
  assert.equal((await sbx.commands.run('cat /mnt/v/real/inside.txt')).stdout, 'ok')
})

test('volumeMounts: two sandboxes share one volume, each sees the other\'s writes; sandbox files and the file API agree', T, async (t) => {
  const v = await newVolume(t)
  await v.writeFile('/seed.txt', 'seeded', { mode: 0o644 })
  const a = await newSandbox(t, { volumeMounts: { '/data': v } })
  const b = await newSandbox(t, { volumeMounts: { '/srv/shared': v.name } })
  assert.equal((await a.commands.run('cat /data/seed.txt')).stdout, 'seeded')
  await a.commands.run('for i in $(seq 1 50); do echo a$i >> /data/log; done')
  await b.commands.run('for i in $(seq 1 50); do echo b$i >> /srv/shared/log; done')
  const lines = (await a.commands.run('cat /data/log')).stdout.trim().split('\n')
  assert.equal(lines.length, 100)
  assert.equal(lines.filter((l) => l.startsWith('b')).length, 50)
  assert.equal((await v.readFile('/log')).split('\n').filter(Boolean).length, 100)
  // files made in a sandbox belong to its user, as the API reports them
  assert.equal((await v.getInfo('/log')).uid, 1000)
  // the sandbox's own file API reaches the mount
  await b.files.write('/srv/shared/via-files.txt', 'through envd')
  assert.equal(await v.readFile('/via-files.txt'), 'through envd')
  assert.equal(await a.files.read('/data/via-files.txt'), 'through envd')
  // reported on the sandbox, nosuid and nodev
  assert.deepEqual((await a.getInfo()).volumeMounts, [{ name: v.name, path: '/data' }])
  assert.match((await a.commands.run('grep " /data " /proc/mounts')).stdout, /nosuid,nodev/)
  // a fork mounts what its source mounts
  const forked = await (await postJson(`/sandboxes/${a.sandboxId}/fork`, { timeout: 120 })).json()
  const fid = forked[0]?.sandbox?.sandboxID
  assert.ok(fid, JSON.stringify(forked))
  t.after(() => apiFetch(`/sandboxes/${fid}`, { method: 'DELETE' }))
  const fork = await Sandbox.connect(fid, { timeoutMs: 120_000 })
  assert.equal((await fork.commands.run('cat /data/seed.txt')).stdout, 'seeded')
  assert.deepEqual((await fork.getInfo()).volumeMounts, [{ name: v.name, path: '/data' }])
  // a mounted volume cannot be destroyed; once no sandbox mounts it, it can
  await assert.rejects(Volume.destroy(v.volumeId), (e) => e instanceof VolumeError && /mounted in 3 running sandboxes/.test(e.message))
  await killQuietly(fork)
  await killQuietly(a)
  await killQuietly(b)
  assert.equal(await Volume.destroy(v.volumeId), true)
})

test('volumeMounts bad input: unknown volume, over /proc, /, relative, "..", the same path twice → 400 naming the field', T, async (t) => {
  const v = await newVolume(t)
  const cases = [
    [[{ name: 'no-such-volume-' + uniq(''), path: '/mnt/x' }], /volumeMounts\[0\]\.name.*not found/],
    [[{ name: v.name, path: '/proc' }], /volumeMounts\[0\]\.path.*kernel file systems/],
    [[{ name: v.name, path: '/proc/self/x' }], /kernel file systems/],
    [[{ name: v.name, path: '/sys' }], /kernel file systems/],
    [[{ name: v.name, path: '/dev/shm' }], /kernel file systems/],
    [[{ name: v.name, path: '/' }], /over the root/],
    [[{ name: v.name, path: 'mnt/rel' }], /must be absolute/],
    [[{ name: v.name, path: '/mnt/../etc' }], /'\.' or '\.\.'/],
    [[{ name: v.name, path: '/mnt/x' }, { name: v.name, path: '/mnt/x' }], /volumeMounts\[1\]\.path.*already used/],
    [[{ name: v.name }], /volumeMounts\[0\]' must be an object/],
    [{ name: v.name }, /'volumeMounts' must be an array/],
  ]
  for (const [mounts, why] of cases) {
    const res = await postJson('/sandboxes', { templateID: 'base', timeout: 30, volumeMounts: mounts })
    if (res.status === 201) {
      await apiFetch(`/sandboxes/${(await res.json()).sandboxID}`, { method: 'DELETE' })
      assert.fail(`${JSON.stringify(mounts)} was accepted`)
    }
    const body = await assertApiError(res, 400, JSON.stringify(mounts))
    assert.match(body.message, why)
  }
  // through the SDK: its error, naming the field
  await assert.rejects(Sandbox.create('base', { timeoutMs: 30_000, volumeMounts: { '/proc': v } }), (e) => e instanceof SandboxError && /volumeMounts/.test(e.message))
  // a snapshot that put a symlink where a volume is mounted: the mount refuses to follow it
  const src = await newSandbox(t)
  await src.commands.run('ln -s /proc /home/user/trap', { user: 'root' })
  const snap = await src.createSnapshot()
  t.after(() => apiFetch(`/templates/${encodeURIComponent(snap.snapshotId)}`, { method: 'DELETE' }))
  const trapped = await postJson('/sandboxes', { templateID: snap.snapshotId, timeout: 30, volumeMounts: [{ name: v.name, path: '/home/user/trap' }] })
  const tb = await trapped.json()
  if (trapped.status === 201) await apiFetch(`/sandboxes/${tb.sandboxID}`, { method: 'DELETE' })
  assert.equal(trapped.status, 500, JSON.stringify(tb))
  assert.match(tb.message, /volume mount \/home\/user\/trap: 'trap' is not a directory/)
})

test('volumes outlive sandboxes and sandboxd restarts; a destroyed volume leaves nothing', T, async (t) => {
  let s = await startSandboxd()
  t.after(async () => {
    await stopSandboxd(s)
    rmSync(s.stateDir, { recursive: true, force: true })
  })
  const o = () => ({ apiUrl: s.url, apiKey: s.key })
  const v = await Volume.create('kept', o())
  await v.writeFile('/from-api.txt', 'api', o())
  const a = await Sandbox.create('base', { ...s.opts, timeoutMs: 120_000, volumeMounts: { '/keep': v } })
  await a.commands.run('echo sandbox > /keep/from-sandbox.txt')
  await a.kill()
  await stopSandboxd(s)
  s = await startSandboxd({ stateDir: s.stateDir })
  const again = await Volume.connect(v.volumeId, o())
  assert.equal(again.token, v.token)
  assert.equal(await again.readFile('/from-api.txt', o()), 'api')
  assert.equal(await again.readFile('/from-sandbox.txt', o()), 'sandbox\n')
  const b = await Sandbox.create('base', { ...s.opts, timeoutMs: 120_000, volumeMounts: { '/keep': 'kept' } })
  assert.equal((await b.commands.run('cat /keep/from-api.txt /keep/from-sandbox.txt')).stdout, 'apisandbox\n')
  await b.kill()
  assert.equal(await Volume.destroy(v.volumeId, o()), true)
  assert.equal(existsSync(path.join(s.stateDir, 'volumes', v.volumeId)), false)
  assert.deepEqual(await Volume.list(o()), [])
})
