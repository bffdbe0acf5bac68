// The control plane the current SDK speaks (e2b ≥ 2.30: POST /v2/sandboxes, /v2/sandboxes/{id}/connect,
// pause and connect with `memory`, list with order/template/startedAfter; fork: snapshots.test.mjs):
// on the wire (raw fetch, whichever SDK runs the suite) and through the SDK under test. What sandboxd
// cannot honour is refused with the SDK's error shape and a message naming the field.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import {
  T,
  newSandbox,
  apiFetch,
  postJson,
  assertApiError,
  uniq,
  killQuietly,
  SDK_V2,
  SDK_VERSION,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
} from './helpers.mjs'

/** Creates over the wire; returns the 201 body (and kills the sandbox when the test ends). */
async function createV2(t, body) {
  const res = await postJson('/v2/sandboxes', { templateID: 'base', ...body })
  const j = await res.json()
  assert.equal(res.status, 201, JSON.stringify(j))
  t.after(() => apiFetch(`/sandboxes/${j.sandboxID}`, { method: 'DELETE' }))
  return j
}

test('POST /v2/sandboxes with what the current SDK sends by default: a secure sandbox with a 300 s lease', T, async (t) => {
  const before = Date.now()
  const made = await createV2(t, { metadata: { moonboxTest: uniq('t') } })   // no timeout, no secure, no internet flag
  assert.match(made.sandboxID, /^[a-z0-9]+$/)
  assert.match(made.envdVersion, /^\d+\.\d+\.\d+$/)
  assert.ok(made.envdAccessToken, 'always secure: an access token')
  const info = await (await apiFetch(`/sandboxes/${made.sandboxID}`)).json()
  const lease = Date.parse(info.endAt) - Date.parse(info.startedAt)
  assert.ok(lease >= 299_000 && lease <= 301_000, `lease ${lease} ms`)
  assert.equal(info.allowInternetAccess, true, 'internet access is the default')
  assert.ok(Date.parse(info.startedAt) >= before - 2000)
  // envd takes its token, refuses a request without it
  const health = await fetch(`${process.env.E2B_SANDBOX_URL}/process.Process/List`, {
    method: 'POST',
    headers: { 'E2b-Sandbox-Id': made.sandboxID, 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' },
    body: '{}',
  })
  assert.equal(health.status, 401)
})

test('POST /v2/sandboxes: fields sandboxd cannot honour → 400 naming the field; the no-op forms are taken', T, async (t) => {
  const refused = [
    ['secure', { secure: false }],
    ['network.rules', { network: { rules: { 'api.example.com': [{ transform: { headers: { Authorization: 'Bearer ${e2b.identity.tokens.aws}' } } }] } } }],
    ['network.allowPublicTraffic', { network: { allowPublicTraffic: 'no' } }],
    ['iam', { iam: { tokens: { gh: { audience: 'x', tokenType: 'y' } } } }],
    ['autoPauseMemory', { autoPause: true, autoPauseMemory: false }],
    ['volumeMounts[0].name', { volumeMounts: [{ name: 'no-such-volume-v2', path: '/data' }] }],
    ['mcp', { mcp: { 'some-server': {} } }],
    ['autoResume', { autoPause: true, autoResume: { enabled: 'yes' } }],
  ]
  for (const [field, extra] of refused) {
    for (const path of ['/v2/sandboxes', '/sandboxes']) {
      if (field === 'secure' && path === '/sandboxes') continue   // the old API has it
      const res = await postJson(path, { templateID: 'base', timeout: 30, ...extra })
      if (res.ok) {
        await apiFetch(`/sandboxes/${(await res.json()).sandboxID}`, { method: 'DELETE' })
        assert.fail(`${path}: '${field}' was accepted`)
      }
      const body = await assertApiError(res, 400, `${path} ${field}`)
      assert.ok(body.message.includes(`'${field}'`), `${path}: the message names '${field}': ${body.message}`)
    }
  }
  // asking for nothing is fine
  const ok = await createV2(t, { timeout: 30, network: {}, volumeMounts: [], autoPause: true, autoPauseMemory: true, secure: true })
  assert.ok(ok.sandboxID)
})

test('POST /v2/sandboxes/{id}/connect: extends the lease, resumes a paused sandbox; memory: false and unknown ids refused', T, async (t) => {
  const made = await createV2(t, { timeout: 30 })
  let res = await postJson(`/v2/sandboxes/${made.sandboxID}/connect`, { timeout: 120 })
  assert.equal(res.status, 200)
  const j = await res.json()
  assert.equal(j.sandboxID, made.sandboxID)
  assert.equal(j.envdAccessToken, made.envdAccessToken, 'the same token comes back')
  const info = await (await apiFetch(`/sandboxes/${made.sandboxID}`)).json()
  assert.ok(Date.parse(info.endAt) - Date.now() > 100_000, 'lease extended')
  // paused → 201 resumed
  assert.equal((await postJson(`/sandboxes/${made.sandboxID}/pause`, {})).status, 204)
  res = await postJson(`/v2/sandboxes/${made.sandboxID}/connect`, { timeout: 60 })
  assert.equal(res.status, 201)
  await res.arrayBuffer()
  // onResume: 'reboot' sends memory: false
  const bad = await assertApiError(await postJson(`/v2/sandboxes/${made.sandboxID}/connect`, { memory: false }), 400, 'memory: false')
  assert.match(bad.message, /'memory'/)
  assert.match((await assertApiError(await postJson(`/v2/sandboxes/${made.sandboxID}/connect`, { timeout: 60, other: 1 }), 400, 'unknown field')).message, /'other'/)
  await assertApiError(await postJson('/v2/sandboxes/nosuchsandbox0/connect', {}), 404, 'unknown id')
  await assertApiError(await postJson(`/v2/sandboxes/${made.sandboxID}/pause`, {}), 404, 'v2 has only connect')
})

test('pause with memory: false (keepMemory: false) → 400 naming the field; memory: true pauses', T, async (t) => {
  const made = await createV2(t, { timeout: 60 })
  const bad = await assertApiError(await postJson(`/sandboxes/${made.sandboxID}/pause`, { memory: false }), 400, 'memory: false')
  assert.match(bad.message, /'memory'/)
  assert.equal((await (await apiFetch(`/sandboxes/${made.sandboxID}`)).json()).state, 'running', 'not paused by the refused request')
  assert.equal((await postJson(`/sandboxes/${made.sandboxID}/pause`, { memory: true })).status, 204)
  assert.equal((await (await apiFetch(`/sandboxes/${made.sandboxID}`)).json()).state, 'paused')
})

test('GET /v2/sandboxes: order, template and startedAfter filter and sort; pagination follows the order', T, async (t) => {
  const tag = uniq('ord')
  const ids = []
  for (let i = 0; i < 3; i++) {
    ids.push((await createV2(t, { timeout: 60, metadata: { ord: tag } })).sandboxID)
    await new Promise((r) => setTimeout(r, 5))
  }
  const q = `metadata=${encodeURIComponent(`ord=${tag}`)}`
  const list = async (extra) => {
    const res = await apiFetch(`/v2/sandboxes?${q}&${extra}`)
    assert.equal(res.status, 200, await res.clone().text())
    return { items: (await res.json()).map((s) => s.sandboxID), next: res.headers.get('x-next-token') }
  }
  assert.deepEqual((await list('order=desc')).items, [...ids].reverse())
  assert.deepEqual((await list('order=asc')).items, ids)
  // pages of one, oldest first
  let page = await list('order=asc&limit=1')
  const seen = [...page.items]
  while (page.next) {
    page = await list(`order=asc&limit=1&nextToken=${page.next}`)
    seen.push(...page.items)
  }
  assert.deepEqual(seen, ids)
  assert.deepEqual((await list('template=base')).items.length, 3)
  assert.deepEqual((await list('template=no-such-template')).items, [])
  const second = await (await apiFetch(`/sandboxes/${ids[1]}`)).json()
  assert.deepEqual((await list(`order=asc&startedAfter=${encodeURIComponent(second.startedAt)}`)).items, [ids[2]])
  for (const [param, value] of [['order', 'sideways'], ['startedAfter', 'yesterday'], ['noSuchParam', '1']]) {
    const body = await assertApiError(await apiFetch(`/v2/sandboxes?${param}=${value}`), 400, param)
    assert.ok(body.message.includes(`'${param}'`), body.message)
  }
})

test(`the SDK under test (e2b@${SDK_VERSION}): create, connect, list, pause and its refused options`, T, async (t) => {
  const sbx = await newSandbox(t)
  assert.equal((await sbx.commands.run('echo via-sdk')).stdout, 'via-sdk\n')
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 120_000 })
  assert.equal((await again.commands.run('echo again')).stdout, 'again\n')
  await assert.rejects(Sandbox.connect('nosuchsandbox0', { timeoutMs: 60_000 }), SandboxNotFoundError)
  const listed = await Sandbox.list({ query: { metadata: { moonboxTest: sbx.mbTag } } }).nextItems()
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId])
  if (!SDK_V2) {
    // 2.29.1: secure is an option, and without it there is no access token
    const plain = await newSandbox(t, { secure: false })
    assert.equal(plain.envdAccessToken, undefined)
    return
  }
  assert.ok(sbx.envdAccessToken, 'the current SDK\'s sandboxes are secure')
  const ordered = await Sandbox.list({ query: { metadata: { moonboxTest: sbx.mbTag } }, order: 'asc' }).nextItems()
  assert.deepEqual(ordered.map((s) => s.sandboxId), [sbx.sandboxId])
  // options sandboxd cannot honour: the SDK's error, naming the field
  const refused = [
    [{ network: { rules: { 'api.example.com': [{ transform: { headers: { Authorization: 'Bearer ${e2b.identity.tokens.aws}' } } }] } } }, /'network\.rules'/],
    [{ lifecycle: { onTimeout: { action: 'pause', keepMemory: false } } }, /'autoPauseMemory'/],
    [{ volumeMounts: { '/data': 'no-such-volume' } }, /'volumeMounts\[0\]\.name': volume 'no-such-volume' not found/],
  ]
  for (const [opts, field] of refused) {
    const made = Sandbox.create('base', { timeoutMs: 30_000, ...opts })
    await assert.rejects(made, (e) => e instanceof SandboxError && /^400: /.test(e.message) && field.test(e.message), JSON.stringify(opts))
  }
  const keep = await newSandbox(t, { lifecycle: { onTimeout: { action: 'pause', keepMemory: true } } })
  assert.equal((await keep.getInfo()).lifecycle.onTimeout, 'pause')
  await assert.rejects(sbx.pause({ keepMemory: false }), (e) => e instanceof SandboxError && /'memory'/.test(e.message))
  assert.equal(await sbx.pause(), true)
  assert.equal(await sbx.pause(), false, 'already paused')
  // forks (snapshots.test.mjs) of a paused sandbox: refused, naming the state
  await assert.rejects(Sandbox.fork(sbx.sandboxId, { timeoutMs: 60_000 }), (e) => e instanceof SandboxError && /^409: .*paused/.test(e.message))
  await assert.rejects(Sandbox.fork('nosuchsandbox0'), SandboxNotFoundError)
  await killQuietly(keep)
})
