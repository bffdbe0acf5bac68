// How every Node test and bench hands sandboxd its API key: on the child's fd 3 (spawned with a
// 'pipe' as its fourth stdio entry) and `--api-key-fd 3` — never on a command line, where every
// local user could read it (tests/secrets checks).
export const KEY_FD_ARGS = ['--api-key-fd', '3']

/** Writes `key` (and a newline) to proc's fd 3 and closes it. */
export function passKey(proc, key) {
  proc.stdio[3].on('error', () => {})   // a sandboxd that exits without reading it
  proc.stdio[3].end(key + '\n')
}
