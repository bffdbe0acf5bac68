// Secure sandboxes: envd access token, signed /files URLs (fetched without any routing header).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { T, newSandbox, envdFetch, getSignature } from './helpers.mjs'

const HOME = '/home/user'

async function upload(url, content) {
  const form = new FormData()
  form.append('file', content)
  return fetch(url, { method: 'POST', body: form })
}

test('a secure sandbox has an access token and works through the SDK', T, async (t) => {
  const sbx = await newSandbox(t, { secure: true })
  assert.equal(typeof sbx.envdAccessToken, 'string')
  assert.ok(sbx.envdAccessToken.length >= 16)
  assert.equal((await sbx.commands.run('echo secure')).stdout, 'secure\n')
  await sbx.files.write('s.txt', 'secret-ish')
  assert.equal(await sbx.files.read('s.txt'), 'secret-ish')
})

test('signed downloadUrl returns the file; with expiration in the future too', T, async (t) => {
  const sbx = await newSandbox(t, { secure: true })
  await sbx.files.write('hello.txt', 'hello signed')
  const url = await sbx.downloadUrl('hello.txt')
  assert.match(url, /[?&]signature=v1_/)
  const res = await fetch(url)
  assert.equal(res.status, 200)
  assert.equal(await res.text(), 'hello signed')

  const url2 = await sbx.downloadUrl('hello.txt', { useSignatureExpiration: 120 })
  assert.match(url2, /signature_expiration=\d+/)
  const res2 = await fetch(url2)
  assert.equal(res2.status, 200)
  assert.equal(await res2.text(), 'hello signed')
})

test('signed uploadUrl writes the file (user and root) and answers the exact WriteInfo list', T, async (t) => {
  const sbx = await newSandbox(t, { secure: true })
  const res = await upload(await sbx.uploadUrl('up.txt'), 'file content')
  assert.equal(res.status, 200)
  assert.deepEqual(await res.json(), [{ path: `${HOME}/up.txt`, name: 'up.txt', type: 'file' }])
  assert.equal(await sbx.files.read('up.txt'), 'file content')
  assert.equal((await sbx.files.getInfo('up.txt')).owner, 'user')

  const rres = await upload(await sbx.uploadUrl('/root/up-root.txt', { user: 'root', useSignatureExpiration: 120 }), 'root content')
  assert.equal(rres.status, 200)
  assert.deepEqual(await rres.json(), [{ path: '/root/up-root.txt', name: 'up-root.txt', type: 'file' }])
  const dres = await fetch(await sbx.downloadUrl('/root/up-root.txt', { user: 'root' }))
  assert.equal(dres.status, 200)
  assert.equal(await dres.text(), 'root content')
  assert.equal((await sbx.files.getInfo('/root/up-root.txt', { user: 'root' })).owner, 'root')
})

test('expired signatures → 401 {code:401, message:"signature is already expired"}', T, async (t) => {
  const sbx = await newSandbox(t, { secure: true })
  await sbx.files.write('exp.txt', 'x')
  const d = await fetch(await sbx.downloadUrl('exp.txt', { useSignatureExpiration: -120 }))
  assert.equal(d.status, 401)
  assert.deepEqual(await d.json(), { code: 401, message: 'signature is already expired' })
  const u = await upload(await sbx.uploadUrl('exp2.txt', { useSignatureExpiration: -120 }), 'late')
  assert.equal(u.status, 401)
  assert.deepEqual(await u.json(), { code: 401, message: 'signature is already expired' })
  assert.equal(await sbx.files.exists('exp2.txt'), false)
})

test('wrong token, tampered or mismatched signatures → 401', T, async (t) => {
  const sbx = await newSandbox(t, { secure: true })
  await sbx.files.write('a.txt', 'AAA')
  await sbx.files.write('b.txt', 'BBB')
  const base = new URL(await sbx.downloadUrl('a.txt'))

  const wrong = await getSignature({ path: 'a.txt', operation: 'read', envdAccessToken: 'not-the-token-' + sbx.envdAccessToken })
  const w = new URL(base)
  w.searchParams.set('signature', wrong.signature)
  const wr = await fetch(w)
  assert.equal(wr.status, 401)
  const body = await wr.json()
  assert.equal(body.code, 401)
  assert.equal(typeof body.message, 'string')

  // signature for a.txt used for b.txt
  const other = new URL(base)
  other.searchParams.set('path', 'b.txt')
  assert.equal((await fetch(other)).status, 401)

  // a read signature used for a write
  const asWrite = await upload(base, 'overwrite attempt')
  assert.equal(asWrite.status, 401)
  assert.equal(await sbx.files.read('a.txt'), 'AAA')

  // no signature at all
  const none = new URL(base)
  none.searchParams.delete('signature')
  assert.equal((await fetch(none)).status, 401)

  // an extended expiration that was not signed
  const ext = new URL(await sbx.downloadUrl('a.txt', { useSignatureExpiration: 60 }))
  ext.searchParams.set('signature_expiration', String(Number(ext.searchParams.get('signature_expiration')) + 3600))
  assert.equal((await fetch(ext)).status, 401)
})

test('signed URLs reach the right sandbox when several are secure', T, async (t) => {
  const a = await newSandbox(t, { secure: true })
  const b = await newSandbox(t, { secure: true })
  await a.files.write('same.txt', 'from A')
  await b.files.write('same.txt', 'from B')
  assert.equal(await (await fetch(await a.downloadUrl('same.txt'))).text(), 'from A')
  assert.equal(await (await fetch(await b.downloadUrl('same.txt'))).text(), 'from B')
})

test('envd with a wrong or missing X-Access-Token → 401 JSON, health stays open', T, async (t) => {
  const sbx = await newSandbox(t, { secure: true })
  for (const token of [null, 'wrong-token']) {
    const r = await envdFetch(
      sbx,
      '/filesystem.Filesystem/Stat',
      { method: 'POST', headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' }, body: '{"path":"/"}' },
      { token },
    )
    assert.equal(r.status, 401, `token ${token}`)
    const f = await envdFetch(sbx, '/files?path=.bashrc', {}, { token })
    assert.equal(f.status, 401)
    const fb = await f.json()
    assert.equal(fb.code, 401)
    assert.ok(fb.message)
  }
  const ok = await envdFetch(sbx, '/filesystem.Filesystem/Stat', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'Connect-Protocol-Version': '1' },
    body: '{"path":"/"}',
  })
  assert.equal(ok.status, 200)
  const h = await envdFetch(sbx, '/health', {}, { token: null })
  assert.equal(h.status, 204)
})
