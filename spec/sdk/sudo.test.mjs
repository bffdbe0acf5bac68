// sudo in the base template (issue 10 item 4): as in E2B's base template, `user` runs anything as
// root without a password; sudo finds the sandbox's host name; other PAM services stay closed.
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { T, newSandbox, sh } from './helpers.mjs'

test('user has passwordless sudo: root for the command, quietly (the host name resolves)', T, async (t) => {
  const sbx = await newSandbox(t)
  const r = await sbx.commands.run('id -u; sudo -n id -u; sudo -n sh -c "echo secret > /root/made-by-sudo; stat -c %U:%G /root/made-by-sudo"')
  assert.equal(r.stdout, '1000\n0\nroot:root\n')
  assert.equal(r.stderr, '', 'no "unable to resolve host" or other warning')
  assert.equal((await sh(sbx, 'cat /root/made-by-sudo')).code, 1, 'without sudo, user still cannot read root\'s files')
  assert.equal((await sbx.commands.run('sudo -n -u user id -un')).stdout, 'user\n')
  assert.equal((await sbx.commands.run(`getent hosts ${sbx.sandboxId} | awk '{print $1}'`)).stdout, '127.0.1.1\n')
  // sudoers is root's and read-only, as sudo requires
  assert.equal((await sbx.commands.run('stat -c "%a %U" /etc/sudoers', { user: 'root' })).stdout, '440 root\n')
  // su has no PAM service: denied even for a user who could sudo
  const su = await sh(sbx, 'su -c true root </dev/null')
  assert.notEqual(su.code, 0, su.out)
})
