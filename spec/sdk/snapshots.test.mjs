// Snapshots, templates made of them, and forks (issue 10 item 2), through the SDK under test and on
// the wire: POST /sandboxes/{id}/snapshots, GET /snapshots, DELETE /templates/{id},
// Sandbox.create(<snapshot id or name>), POST /sandboxes/{id}/fork. A snapshot holds the file system
// (contents, modes, owners, xattrs, symlinks, hard links, deletions), taken while the sandbox runs;
// its layers are shared by every sandbox made from it and removed when the last user is gone.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import {
  T,
  newSandbox,
  killQuietly,
  apiFetch,
  postJson,
  assertApiError,
  uniq,
  sh,
  waitFor,
  startSandboxd,
  stopSandboxd,
  SDK_V2,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
} from './helpers.mjs'

/** A manifest of every path under `dirs` (sorted): type, mode, owner, mtime, size and hard links
 * and sha256 of files, symlink targets, extended attributes of every namespace visible. */
const MANIFEST = (dirs) => `
find ${dirs.join(' ')} -xdev -print0 2>/dev/null | sort -z | while IFS= read -r -d '' p; do
  t=$(stat -c %F "$p")
  line=$(stat -c '%n|%F|%a|%U|%G|%Y' "$p")
  case "$t" in
    "regular file"|"regular empty file") line="$line|$(stat -c '%s|%h' "$p")|$(sha256sum < "$p" | cut -c1-64)";;
    "symbolic link") line="$line|->$(readlink "$p")";;
  esac
  printf '%s|%s\\n' "$line" "$(getfattr -h -d -m - --absolute-names "$p" 2>/dev/null | grep -v '^#' | tr '\\n' ';')"
done`

const root = { user: 'root' }

/** Creates from a snapshot and kills the sandbox when the test ends. */
async function fromSnapshot(t, ref, opts = {}) {
  const sbx = await Sandbox.create(ref, { timeoutMs: 180_000, ...opts })
  t.after(() => killQuietly(sbx))
  return sbx
}

async function snapshotsOf(sandboxId) {
  const res = await apiFetch(`/snapshots?sandboxID=${sandboxId}`)
  assert.equal(res.status, 200, await res.clone().text())
  return res.json()
}

const deleteQuietly = (id) => apiFetch(`/templates/${encodeURIComponent(id)}`, { method: 'DELETE' }).catch(() => {})

test('a snapshot keeps the file system exactly: contents, modes, owners, xattrs, symlinks, hard links, deletions', T, async (t) => {
  const src = await newSandbox(t)
  const doc = (await src.commands.run('ls /usr/share/doc | head -1')).stdout.trim()
  assert.ok(doc, 'a directory of host /usr to delete')
  await src.commands.run(
    [
      'set -e',
      'mkdir -p /home/user/snap/deep/er && cd /home/user/snap',
      'printf "hello\\n" > plain && chown user:user plain',
      'printf "set-id\\n" > setid && chmod 4750 setid',
      'mkdir sticky && chmod 1777 sticky && chown user:root sticky',
      'ln -s plain link && ln -s /nowhere/at/all dangling',
      'ln plain hard',
      'mkfifo fifo && chmod 0640 fifo',
      'setfattr -n user.moonbox -v "some value" plain && setfattr -n user.dir -v d deep',
      'head -c 3000000 /dev/urandom > big && truncate -s 50M sparse && printf end >> sparse',
      'touch -d "2001-02-03 04:05:06" deep/er',
      'echo etc > /etc/mbsnap && chmod 600 /etc/mbsnap',
      'rm /etc/magic',
      'rm -rf /etc/ld.so.conf.d && mkdir /etc/ld.so.conf.d && echo only > /etc/ld.so.conf.d/only.conf',
      'mkdir -p /usr/local/mbsnap && echo usr > /usr/local/mbsnap/file',
      `rm -rf /usr/share/doc/${doc}`,
    ].join('\n'),
    root,
  )
  const dirs = ['/home/user/snap', '/etc/mbsnap', '/etc/ld.so.conf.d', '/usr/local/mbsnap']
  const before = (await src.commands.run(MANIFEST(dirs), root)).stdout
  assert.match(before, /\/home\/user\/snap\/plain\|regular file\|644\|user\|user\|\d+\|6\|2\|[0-9a-f]{64}\|user\.moonbox="some value";/)
  assert.match(before, /\/home\/user\/snap\/setid\|regular file\|4750\|root\|root/)
  assert.match(before, /\/home\/user\/snap\/dangling\|symbolic link\|777\|root\|root\|\d+\|->\/nowhere\/at\/all/)

  const snap = await src.createSnapshot()
  t.after(() => deleteQuietly(snap.snapshotId))
  assert.match(snap.snapshotId, /^[a-z0-9]{20}:default$/)
  assert.deepEqual(snap.names, [])
  // the source goes on, changing what it has: the snapshot does not follow
  await src.commands.run('echo later > /home/user/snap/plain; rm /home/user/snap/big; echo new > /etc/magic', root)

  const copy = await fromSnapshot(t, snap.snapshotId)
  assert.equal((await copy.commands.run(MANIFEST(dirs), root)).stdout, before)
  assert.equal((await copy.files.read('/home/user/snap/plain')), 'hello\n')
  assert.equal((await sh(copy, 'test -e /etc/magic', root)).code, 1, 'a file deleted from the template stays deleted')
  assert.equal((await sh(copy, `test -e /usr/share/doc/${doc}`, root)).code, 1, 'a directory deleted from host /usr stays deleted')
  assert.equal((await copy.commands.run('ls /etc/ld.so.conf.d')).stdout, 'only.conf\n', 'a replaced directory shows only its new contents')
  assert.equal((await copy.commands.run('stat -c %h /home/user/snap/plain /home/user/snap/hard; [ plain -ef hard ] && echo same', { cwd: '/home/user/snap' })).stdout, '2\n2\nsame\n')
  const kib = Number((await copy.commands.run('du -k /home/user/snap/sparse | cut -f1')).stdout)
  assert.ok(kib < 1024, `a sparse file of 50 MiB stays sparse (${kib} KiB used)`)
  // its templateID is the snapshot's
  const info = await copy.getInfo()
  assert.equal(info.templateId, snap.snapshotId.split(':')[0])
  // and the copy is a sandbox of its own: what it writes, neither the source nor other copies see
  await copy.commands.run('echo mine > /home/user/snap/plain', root)
  const other = await fromSnapshot(t, snap.snapshotId)
  assert.equal(await other.files.read('/home/user/snap/plain'), 'hello\n')
  assert.equal(await src.files.read('/home/user/snap/plain'), 'later\n')
})

test('taken while the sandbox runs: its processes go on, the snapshot is listed per sandbox and deleted', T, async (t) => {
  const src = await newSandbox(t)
  await src.commands.run('while :; do date +%s%N >> /tmp/ticks; sleep 0.02; done', { background: true, timeoutMs: 0 })
  await waitFor(async () => (await src.commands.run('wc -l < /tmp/ticks')).stdout.trim() > 2, { what: 'ticks' })
  const a = await src.createSnapshot()
  t.after(() => deleteQuietly(a.snapshotId))
  const n0 = Number((await src.commands.run('wc -l < /tmp/ticks')).stdout)
  await waitFor(async () => Number((await src.commands.run('wc -l < /tmp/ticks')).stdout) > n0 + 3, { what: 'ticks after the snapshot' })
  const b = await Sandbox.createSnapshot(src.sandboxId)   // the static form
  t.after(() => deleteQuietly(b.snapshotId))
  assert.notEqual(a.snapshotId, b.snapshotId)
  // listed: per sandbox (newest first), and all of them
  const mine = await snapshotsOf(src.sandboxId)
  assert.deepEqual(mine.map((s) => s.snapshotID), [b.snapshotId, a.snapshotId])
  const viaSdk = await src.listSnapshots().nextItems()
  assert.deepEqual(viaSdk.map((s) => s.snapshotId), [b.snapshotId, a.snapshotId])
  const all = await Sandbox.listSnapshots().nextItems()
  assert.ok([a, b].every((s) => all.some((x) => x.snapshotId === s.snapshotId)), 'both in the full list')
  // pages of one, with x-next-token
  const first = await apiFetch(`/snapshots?sandboxID=${src.sandboxId}&limit=1`)
  assert.deepEqual((await first.json()).map((s) => s.snapshotID), [b.snapshotId])
  const next = first.headers.get('x-next-token')
  assert.ok(next)
  const second = await apiFetch(`/snapshots?sandboxID=${src.sandboxId}&limit=1&nextToken=${next}`)
  assert.deepEqual((await second.json()).map((s) => s.snapshotID), [a.snapshotId])
  assert.equal(second.headers.get('x-next-token'), null)
  // the snapshot holds the ticks up to its moment, in a sandbox whose loop does not run
  const copy = await fromSnapshot(t, a.snapshotId)
  const ticks = Number((await copy.commands.run('wc -l < /tmp/ticks')).stdout)
  assert.ok(ticks >= 3 && ticks <= n0, `${ticks} ticks in the copy, ${n0} at the snapshot`)
  const loop = 'ps -eo args | grep "[s]leep 0.02"'
  assert.equal((await sh(src, loop)).code, 0, 'the loop runs in the source')
  assert.equal((await sh(copy, loop)).code, 1, 'processes are not copied: a snapshot is the file system')
  // delete: true, then false
  assert.equal(await Sandbox.deleteSnapshot(a.snapshotId), true)
  assert.equal(await Sandbox.deleteSnapshot(a.snapshotId), false)
  assert.deepEqual((await snapshotsOf(src.sandboxId)).map((s) => s.snapshotID), [b.snapshotId])
  // a sandbox made from a deleted snapshot keeps working on its layers
  assert.equal(Number((await copy.commands.run('wc -l < /tmp/ticks')).stdout), ticks)
  await assert.rejects(Sandbox.create(a.snapshotId, { timeoutMs: 30_000 }), (e) => e instanceof SandboxError && /^404: template .* not found/.test(e.message))
})

test('a named snapshot is a template: Sandbox.create(name); the name taken again moves to the new state', T, async (t) => {
  const name = uniq('snap-')
  t.after(() => deleteQuietly(name))
  const one = await newSandbox(t)
  await one.files.write('/home/user/which', 'one')
  const s1 = await one.createSnapshot({ name })
  assert.deepEqual(s1, { snapshotId: `${name}:default`, names: [name] })
  const c1 = await fromSnapshot(t, name)
  assert.equal(await c1.files.read('/home/user/which'), 'one')
  assert.equal((await c1.getInfo()).name, name)
  // names are E2B's: trimmed and lower-cased, ":default" is the one tag
  const upper = await fromSnapshot(t, `  ${name.toUpperCase()}:default `)
  assert.equal(await upper.files.read('/home/user/which'), 'one')

  const two = await newSandbox(t)
  await two.files.write('/home/user/which', 'two')
  const s2 = await two.createSnapshot({ name })
  assert.equal(s2.snapshotId, s1.snapshotId)
  const c2 = await fromSnapshot(t, `${name}:default`)
  assert.equal(await c2.files.read('/home/user/which'), 'two')
  assert.equal(await c1.files.read('/home/user/which'), 'one', 'a sandbox of the earlier state keeps it')
  const listed = await (await apiFetch(`/snapshots?name=${name}`)).json()
  assert.deepEqual(listed, [{ snapshotID: `${name}:default`, names: [name] }])
  assert.deepEqual(await snapshotsOf(one.sandboxId), [], 'the template now holds the second sandbox\'s state')
  if (SDK_V2) assert.deepEqual((await Sandbox.listSnapshots({ name }).nextItems()).map((s) => s.snapshotId), [`${name}:default`])
  // list filters by template id as well
  const tplId = (await c2.getInfo()).templateId
  assert.deepEqual((await (await apiFetch(`/v2/sandboxes?template=${name}`)).json()).map((s) => s.sandboxID).sort(), [c1, upper, c2].map((s) => s.sandboxId).sort())
  assert.deepEqual((await (await apiFetch(`/v2/sandboxes?template=${tplId}`)).json()).length, 3)
  assert.equal(await Sandbox.deleteSnapshot(`${name}:default`), true)
  assert.deepEqual(await (await apiFetch(`/snapshots?name=${name}`)).json(), [])
})

test('snapshots of sandboxes made from snapshots stack layers; deleting the lower snapshot leaves the upper whole', T, async (t) => {
  const a = await newSandbox(t)
  await a.files.write('/home/user/one', '1')
  const s1 = await a.createSnapshot()
  t.after(() => deleteQuietly(s1.snapshotId))
  const b = await fromSnapshot(t, s1.snapshotId)
  await b.files.write('/home/user/two', '2')
  await b.commands.run('rm /home/user/one')
  await b.files.write('/home/user/three', '3')
  const s2 = await b.createSnapshot()
  t.after(() => deleteQuietly(s2.snapshotId))
  assert.equal(await Sandbox.deleteSnapshot(s1.snapshotId), true)
  const c = await fromSnapshot(t, s2.snapshotId)
  assert.equal((await c.commands.run('ls /home/user')).stdout, 'three\ntwo\n')
  assert.equal((await c.getInfo()).templateId, s2.snapshotId.split(':')[0])
})

test('bad input: paused, killed and unknown sandboxes, unknown snapshots, bad names and fields', T, async (t) => {
  const sbx = await newSandbox(t)
  // names: E2B's syntax; what sandboxd has no notion of is refused naming it
  for (const [name, why] of [['has space', /a-z, 0-9/], ['team/name', /namespace/], ['name:v2', /tag 'v2'/], ['base', /'base'/], ['x'.repeat(129), /1 to 128/], ['', /1 to 128/]]) {
    const body = await assertApiError(await postJson(`/sandboxes/${sbx.sandboxId}/snapshots`, { name }), 400, `name ${JSON.stringify(name)}`)
    assert.match(body.message, /^field 'name': /)
    assert.match(body.message, why)
  }
  await assertApiError(await postJson(`/sandboxes/${sbx.sandboxId}/snapshots`, { name: 7 }), 400, 'numeric name')
  const extra = await assertApiError(await postJson(`/sandboxes/${sbx.sandboxId}/snapshots`, { memory: true }), 400, 'unknown field')
  assert.match(extra.message, /'memory'/)
  await assertApiError(await postJson(`/sandboxes/${sbx.sandboxId}/snapshots`, '[1]'), 400, 'not an object')
  // a name that is another snapshot's id
  const s = await sbx.createSnapshot()
  t.after(() => deleteQuietly(s.snapshotId))
  const id = s.snapshotId.split(':')[0]
  const clash = await assertApiError(await postJson(`/sandboxes/${sbx.sandboxId}/snapshots`, { name: id }), 409, 'name = an id')
  assert.match(clash.message, /id of another snapshot/)
  // unknown sandbox, killed sandbox: the SDK's SandboxNotFoundError
  await assert.rejects(Sandbox.createSnapshot('nosuchsandbox0'), SandboxNotFoundError)
  const gone = await newSandbox(t)
  await gone.kill()
  await assert.rejects(gone.createSnapshot(), SandboxNotFoundError)
  // paused: refused, naming the state
  const p = await newSandbox(t)
  await p.pause()
  const paused = await assertApiError(await postJson(`/sandboxes/${p.sandboxId}/snapshots`, {}), 409, 'paused')
  assert.match(paused.message, /paused/)
  await assert.rejects(p.createSnapshot(), (e) => e instanceof SandboxError && /^409: /.test(e.message))
  // unknown snapshot: 404 on create (E2B's "template 'x' not found") and delete; 'base' is not deletable
  const missing = await assertApiError(await postJson('/sandboxes', { templateID: 'abcdefghij0123456789', timeout: 30 }), 404, 'unknown snapshot')
  assert.match(missing.message, /^template 'abcdefghij0123456789' not found/)
  assert.equal(await Sandbox.deleteSnapshot('abcdefghij0123456789'), false)
  await assertApiError(await apiFetch('/templates/base', { method: 'DELETE' }), 400, 'delete base')
  await assertApiError(await apiFetch('/templates/has%20space', { method: 'DELETE' }), 400, 'malformed delete')
  // list: bad parameters
  for (const q of ['limit=0', 'limit=x', 'nextToken=zz', 'sandboxID=Not-An-Id', 'name=a/b', 'other=1']) {
    const body = await assertApiError(await apiFetch(`/snapshots?${q}`), 400, q)
    assert.ok(body.message.includes(`'${q.split('=')[0]}'`), body.message)
  }
  // the API key is checked before anything
  await assertApiError(await apiFetch('/snapshots', { headers: { 'X-API-KEY': undefined } }), 401, 'no key')
})

test('fork: count sandboxes of one capture, with the source\'s file system and envVars; bad input', T, async (t) => {
  const src = await newSandbox(t, { envs: { FORKED_FROM: 'src' } })
  await src.files.write('/home/user/state', 'before fork')
  const res = await postJson(`/sandboxes/${src.sandboxId}/fork`, { count: 2 })
  const forks = await res.json()
  assert.equal(res.status, 201, JSON.stringify(forks))
  assert.equal(forks.length, 2)
  for (const f of forks) t.after(() => apiFetch(`/sandboxes/${f.sandbox?.sandboxID}`, { method: 'DELETE' }))
  for (const f of forks) {
    assert.ok(f.sandbox, JSON.stringify(f))
    assert.match(f.sandbox.sandboxID, /^[a-z0-9]+$/)
    assert.notEqual(f.sandbox.sandboxID, src.sandboxId)
    const info = await (await apiFetch(`/sandboxes/${f.sandbox.sandboxID}`)).json()
    const lease = Date.parse(info.endAt) - Date.parse(info.startedAt)
    assert.ok(lease >= 14_000 && lease <= 16_000, `default fork lease ${lease} ms (E2B's 15 s)`)
    assert.deepEqual(info.metadata, (await src.getInfo()).metadata)
  }
  // the source goes on; forks do not see its later writes
  await src.files.write('/home/user/state', 'after fork')
  const conn = await Sandbox.connect(forks[0].sandbox.sandboxID, { timeoutMs: 120_000 })
  assert.equal(await conn.files.read('/home/user/state'), 'before fork')
  assert.equal((await conn.commands.run('echo $FORKED_FROM')).stdout, 'src\n')
  if (SDK_V2) {
    const [viaSdk] = await src.fork({ timeoutMs: 120_000 })
    assert.ok(viaSdk instanceof Sandbox, String(viaSdk))
    t.after(() => killQuietly(viaSdk))
    assert.equal(await viaSdk.files.read('/home/user/state'), 'after fork')
    await assert.rejects(Sandbox.fork('nosuchsandbox0'), SandboxNotFoundError)
  }
  // forks are in no catalogue
  assert.deepEqual(await snapshotsOf(src.sandboxId), [])
  for (const [body, field] of [[{ count: 0 }, 'count'], [{ count: 101 }, 'count'], [{ count: 'two' }, 'count'], [{ timeout: -1 }, 'timeout'], [{ memory: true }, 'memory']]) {
    const b = await assertApiError(await postJson(`/sandboxes/${src.sandboxId}/fork`, body), 400, JSON.stringify(body))
    assert.ok(b.message.includes(`'${field}'`), b.message)
  }
  await assertApiError(await postJson('/sandboxes/nosuchsandbox0/fork', {}), 404, 'unknown sandbox')
})

test('layers are shared, never copied, and removed with the last snapshot and sandbox using them; snapshots survive a restart', T, async (t) => {
  let s = await startSandboxd()
  t.after(async () => {
    await stopSandboxd(s)
    rmSync(s.stateDir, { recursive: true, force: true })
  })
  const layers = () => readdirSync(path.join(s.stateDir, 'layers')).sort()
  const o = { ...s.opts, timeoutMs: 180_000 }
  const src = await Sandbox.create('base', o)
  await src.commands.run('head -c 4000000 /dev/urandom > /home/user/blob && sha256sum /home/user/blob > /home/user/blob.sum')
  const snap = await src.createSnapshot({ ...s.opts, name: 'kept' })
  assert.equal(layers().length, 1, 'one layer per snapshot')
  const [layer] = layers()
  const copies = []
  for (let i = 0; i < 3; i++) copies.push(await Sandbox.create('kept', o))
  assert.deepEqual(layers(), [layer], 'sandboxes of a snapshot share its layer')
  // mounted as a lower layer, not copied into the sandbox: its upper layer stays empty of the blob
  for (const c of copies) {
    const pid = readFileSync(path.join(s.stateDir, 'sandboxes', c.sandboxId, 'init.pid'), 'utf8').split(' ')[0]
    const mounts = readFileSync(`/proc/${pid}/mountinfo`, 'utf8').split('\n').filter((l) => l.includes(` overlay overlay `) && l.includes(layer))
    assert.ok(mounts.length >= 2, `each copy mounts the layer under / and /usr: ${mounts.join('\n')}`)
  }
  const up = path.join(s.stateDir, 'sandboxes', copies[0].sandboxId, 'upper', 'home', 'user', 'blob')
  assert.equal(existsSync(up), false, 'the blob is not in the copy\'s own layer')
  assert.equal((await sh(copies[0], 'sha256sum -c /home/user/blob.sum')).code, 0)
  // delete it while in use: gone from the catalogue, its layer stays for the sandboxes
  assert.equal(await Sandbox.deleteSnapshot('kept', s.opts), true)
  assert.deepEqual(layers(), [layer])
  for (const c of copies.slice(1)) await c.kill()
  assert.deepEqual(layers(), [layer], 'one sandbox still uses it')
  await copies[0].kill()
  assert.deepEqual(layers(), [], 'the last user gone, the layer is removed')

  // a restart keeps snapshots
  const keep = await src.createSnapshot({ ...s.opts, name: 'survivor' })
  const drop = await src.createSnapshot(s.opts)
  assert.equal(layers().length, 2)
  await stopSandboxd(s)
  s = await startSandboxd({ stateDir: s.stateDir })
  const after = await Sandbox.listSnapshots(s.opts).nextItems()
  assert.deepEqual(after.map((x) => x.snapshotId).sort(), [keep.snapshotId, drop.snapshotId].sort())
  const back = await Sandbox.create('survivor', { ...s.opts, timeoutMs: 180_000 })
  assert.equal((await sh(back, 'sha256sum -c /home/user/blob.sum')).code, 0)
  await back.kill()
  assert.equal(layers().length, 2)
  // a layer nothing refers to (its snapshot dropped from the catalogue while sandboxd was down) is
  // removed at the next start
  await stopSandboxd(s)
  const catalogue = path.join(s.stateDir, 'snapshots.json')
  const cat = JSON.parse(readFileSync(catalogue, 'utf8'))
  cat.snapshots = cat.snapshots.filter((x) => x.name === 'survivor')
  writeFileSync(catalogue, JSON.stringify(cat))
  s = await startSandboxd({ stateDir: s.stateDir })
  assert.deepEqual((await Sandbox.listSnapshots(s.opts).nextItems()).map((x) => x.snapshotId), [keep.snapshotId])
  assert.equal(layers().length, 1)
  assert.match(s.log(), /removed 1 snapshot layer nothing refers to/)
  // a catalogue sandboxd cannot read: it refuses to start rather than lose snapshots
  await stopSandboxd(s)
  writeFileSync(catalogue, '{"version": 1, "snapshots": ')
  await assert.rejects(startSandboxd({ stateDir: s.stateDir }), /snapshots\.json/)
  writeFileSync(catalogue, JSON.stringify(cat))
  s = await startSandboxd({ stateDir: s.stateDir })
  assert.equal(await Sandbox.deleteSnapshot('survivor', s.opts), true)
  assert.deepEqual(layers(), [])
  assert.equal(snap.snapshotId, 'kept:default')
})
