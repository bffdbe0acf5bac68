// A relative --state-dir is resolved once at start-up: sandboxes keep absolute layer paths, so
// creating one must work whatever the daemon's working directory is.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { existsSync } from 'node:fs'
import { resolve } from 'node:path'
import { startSandboxd } from './support.mjs'

const BIN = resolve(process.env.MB_BUILD_DIR || 'build', 'bin/sandboxd')

test('a relative --state-dir works for creating and deleting sandboxes', { skip: !existsSync(BIN) && 'no sandboxd binary' }, async () => {
  const srv = await startSandboxd({ bin: BIN, prefix: 'sbxd-rel-', stateDir: 'rel/state' })
  try {
    const h = { 'X-API-KEY': srv.key, 'content-type': 'application/json' }
    const r = await fetch(srv.url + '/sandboxes', { method: 'POST', headers: h, body: JSON.stringify({ templateID: 'base', timeout: 30 }) })
    const body = await r.json()
    assert.equal(r.status, 201, JSON.stringify(body))
    const d = await fetch(`${srv.url}/sandboxes/${body.sandboxID}`, { method: 'DELETE', headers: h })
    assert.equal(d.status, 204)
  } finally {
    await srv.stop()
  }
})
