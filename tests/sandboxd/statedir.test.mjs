// A relative --state-dir is resolved once at start-up: sandboxes keep absolute layer paths, so
// creating one must work whatever the daemon's working directory is.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, existsSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'

const BIN = resolve(process.env.MB_BUILD_DIR || 'build', 'bin/sandboxd')
const KEY = 'e2b_' + '0'.repeat(40)

test('a relative --state-dir works for creating and deleting sandboxes', { skip: !existsSync(BIN) && 'no sandboxd binary' }, async () => {
  const cwd = mkdtempSync(join(tmpdir(), 'sbxd-rel-'))
  const proc = spawn(BIN, ['--listen', '127.0.0.1:0', '--api-key', KEY, '--state-dir', 'rel/state'], { cwd })
  try {
    const url = await new Promise((ok, fail) => {
      let out = ''
      proc.stdout.on('data', (d) => { out += d; const m = out.match(/listening on (http:\/\/[\d.]+:\d+)/); if (m) ok(m[1]) })
      proc.on('exit', (c) => fail(new Error(`sandboxd exited ${c}: ${out}`)))
    })
    const h = { 'X-API-KEY': KEY, 'content-type': 'application/json' }
    const r = await fetch(url + '/sandboxes', { method: 'POST', headers: h, body: JSON.stringify({ templateID: 'base', timeout: 30 }) })
    const body = await r.json()
    assert.equal(r.status, 201, JSON.stringify(body))
    const d = await fetch(`${url}/sandboxes/${body.sandboxID}`, { method: 'DELETE', headers: h })
    assert.equal(d.status, 204)
  } finally {
    const exited = new Promise((ok) => proc.once('exit', ok))
    proc.kill('SIGTERM')
    await exited
    rmSync(cwd, { recursive: true, force: true })
  }
})
