// lifecycle.autoResume (issue 10 item 4): a paused sandbox created with autoResume resumes on its
// next envd request (commands, files, /health), with the lease it was created with; one without
// stays paused (envd answers 502). Memory survives: the processes go on where they stopped.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { T, apiFetch, postJson, envdFetch, waitFor, uniq, SDK_V2, Sandbox } from './helpers.mjs'

/** Creates over the wire (both SDKs' create bodies carry autoResume) and connects the SDK. */
async function create(t, body) {
  const res = await postJson('/sandboxes', { templateID: 'base', secure: true, metadata: { moonboxTest: uniq('t') }, ...body })
  const made = await res.json()
  assert.equal(res.status, 201, JSON.stringify(made))
  t.after(() => apiFetch(`/sandboxes/${made.sandboxID}`, { method: 'DELETE' }))
  return Sandbox.connect(made.sandboxID, { timeoutMs: (body.timeout ?? 300) * 1000 })
}

const stateOf = async (id) => (await (await apiFetch(`/sandboxes/${id}`)).json()).state

test('autoResume: a paused sandbox resumes on its next command, file access or /health, its processes where they were', T, async (t) => {
  const sbx = await create(t, { timeout: 120, autoPause: true, autoResume: { enabled: true } })
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
  // the counter is replaced whole (rename), so a read never sees it half written
  await sbx.commands.run('n=0; while :; do n=$((n+1)); echo $n > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done', { background: true, timeoutMs: 0 })
  await waitFor(async () => Number((await sbx.files.read('/tmp/count')).trim()) > 3, { what: 'the counter' })
  await Sandbox.pause(sbx.sandboxId)
  assert.equal(await stateOf(sbx.sandboxId), 'paused')
  // a command wakes it: the counter goes on from where it stopped (memory kept)
  const before = Date.now()
  const out = (await sbx.commands.run('cat /tmp/count')).stdout.trim()
  assert.equal(await stateOf(sbx.sandboxId), 'running')
  assert.ok(Number(out) > 3)
  const info = await (await apiFetch(`/sandboxes/${sbx.sandboxId}`)).json()
  const lease = Date.parse(info.endAt) - before
  assert.ok(lease > 100_000 && lease <= 121_000, `the create's lease again: ${lease} ms`)
  await waitFor(async () => Number((await sbx.files.read('/tmp/count')).trim()) > Number(out) + 3, { what: 'the counter going on' })
  // /files and envd's /health wake it too
  await Sandbox.pause(sbx.sandboxId)
  assert.equal(await sbx.files.read('/tmp/count').then(() => 'read'), 'read')
  assert.equal(await stateOf(sbx.sandboxId), 'running')
  await Sandbox.pause(sbx.sandboxId)
  assert.equal((await envdFetch(sbx, '/health')).status, 204)
  assert.equal(await stateOf(sbx.sandboxId), 'running')
})

test('autoResume with autoPause: the lease ends, the sandbox pauses, and the next request resumes it', T, async (t) => {
  const sbx = await create(t, { timeout: 2, autoPause: true, autoResume: { enabled: true } })
  await sbx.files.write('/home/user/kept', 'across the pause')
  await waitFor(async () => (await stateOf(sbx.sandboxId)) === 'paused', { timeoutMs: 30_000, what: 'the auto-pause' })
  assert.equal(await sbx.files.read('/home/user/kept'), 'across the pause')
  assert.equal(await stateOf(sbx.sandboxId), 'running')
})

test('without autoResume a paused sandbox stays paused: envd answers 502 until it is connected', T, async (t) => {
  const sbx = await create(t, { timeout: 120, autoPause: true, autoResume: { enabled: false } })
  assert.equal((await sbx.getInfo()).lifecycle.autoResume, false)
  await Sandbox.pause(sbx.sandboxId)
  assert.equal((await envdFetch(sbx, '/health')).status, 502)
  assert.equal(await stateOf(sbx.sandboxId), 'paused')
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 60_000 })
  assert.equal(await stateOf(sbx.sandboxId), 'running')
})

test('the current SDK\'s lifecycle option: onTimeout pause with autoResume', T, async (t) => {
  if (!SDK_V2) return t.skip('2.29.1 has no lifecycle option (its create body always says autoResume: false)')
  const sbx = await Sandbox.create('base', { timeoutMs: 60_000, lifecycle: { onTimeout: 'pause', autoResume: true }, metadata: { moonboxTest: uniq('t') } })
  t.after(() => sbx.kill().catch(() => {}))
  assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: 'pause', autoResume: true })
  await sbx.pause()
  assert.equal((await sbx.commands.run('echo awake')).stdout, 'awake\n')
})
