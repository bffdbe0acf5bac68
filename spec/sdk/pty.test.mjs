// PTY conformance: pty.create/sendInput/resize/kill/connect through the SDK.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { T, newSandbox, waitFor, CommandExitError, SandboxError } from './helpers.mjs'

const enc = (s) => new TextEncoder().encode(s)

/** Creates a PTY whose output accumulates in the returned `out()` string. */
async function openPty(sbx, opts = {}) {
  const dec = new TextDecoder()
  let text = ''
  const h = await sbx.pty.create({ cols: 80, rows: 24, timeoutMs: 0, onData: (d) => (text += dec.decode(d, { stream: true })), ...opts })
  return { h, out: () => text }
}

test('pty.create runs an interactive login shell on a terminal; envs reach it', T, async (t) => {
  const sbx = await newSandbox(t)
  const { h, out } = await openPty(sbx, { envs: { ABC: 'pty-env-value' } })
  assert.ok(h.pid > 0)
  // markers are built by the shell so the echoed input never matches them
  await sbx.pty.sendInput(h.pid, enc('echo "M1[$ABC]"; [ -t 0 ] && echo "TT""Y:yes"; echo "T=$TERM"\n'))
  await waitFor(() => out().includes('M1[pty-env-value]'), { what: 'env echo' })
  await waitFor(() => out().includes('TTY:yes'), { what: 'stdin is a terminal' })
  await waitFor(() => out().includes('T=xterm-256color'), { what: 'TERM default' })
  await sbx.pty.sendInput(h.pid, enc('exit\n'))
  const r = await h.wait()
  assert.equal(r.exitCode, 0)
})

test('sendInput "exit" ends the shell with exit code 0; exit 5 gives CommandExitError', T, async (t) => {
  const sbx = await newSandbox(t)
  const a = await openPty(sbx)
  await sbx.pty.sendInput(a.h.pid, enc('exit\n'))
  assert.equal((await a.h.wait()).exitCode, 0)
  const b = await openPty(sbx)
  await sbx.pty.sendInput(b.h.pid, enc('exit 5\n'))
  await assert.rejects(b.h.wait(), (e) => e instanceof CommandExitError && e.exitCode === 5)
})

test('resize changes the terminal size seen inside (tput cols 80 → 100)', T, async (t) => {
  const sbx = await newSandbox(t)
  const { h, out } = await openPty(sbx)
  await sbx.pty.sendInput(h.pid, enc('echo "C1=$(tput cols)x$(tput lines)="\n'))
  await waitFor(() => out().includes('C1=80x24='), { what: 'initial size 80x24' })
  await sbx.pty.resize(h.pid, { cols: 100, rows: 30 })
  await sbx.pty.sendInput(h.pid, enc('echo "C2=$(tput cols)x$(tput lines)="\n'))
  await waitFor(() => out().includes('C2=100x30='), { what: 'resized size 100x30' })
  await sbx.pty.sendInput(h.pid, enc('exit\n'))
  assert.equal((await h.wait()).exitCode, 0)
})

test('pty.kill ends the shell (kill -0 then fails); unknown pid → false', T, async (t) => {
  const sbx = await newSandbox(t)
  const { h } = await openPty(sbx)
  await sbx.commands.run(`kill -0 ${h.pid}`)
  assert.equal(await sbx.pty.kill(h.pid), true)
  await assert.rejects(h.wait(), (e) => e instanceof CommandExitError || e instanceof SandboxError)
  await assert.rejects(sbx.commands.run(`kill -0 ${h.pid}`), CommandExitError)
  assert.equal(await sbx.pty.kill(h.pid), false)
  assert.equal(await sbx.pty.kill(999999), false)
})

test('pty.connect after disconnect sees new output of the same pid', T, async (t) => {
  const sbx = await newSandbox(t)
  const { h } = await openPty(sbx)
  await h.disconnect()
  const dec = new TextDecoder()
  let text = ''
  const c = await sbx.pty.connect(h.pid, { onData: (d) => (text += dec.decode(d, { stream: true })), timeoutMs: 0 })
  assert.equal(c.pid, h.pid)
  await sbx.pty.sendInput(h.pid, enc('echo "re-$((40+2))-connected"\n'))
  await waitFor(() => text.includes('re-42-connected'), { what: 'output on the reconnected stream' })
  await sbx.pty.sendInput(h.pid, enc('exit\n'))
  assert.equal((await c.wait()).exitCode, 0)
})
