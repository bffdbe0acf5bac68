/* apikey.h — where sandboxd's API key comes from. Never a command line (every local user reads
 * /proc/PID/cmdline and could then drive sandboxd): a file only its owner can read
 * (--api-key-file), a descriptor its starter passes (--api-key-fd: moonbox's launcher hands it a
 * pipe), or the one kept in <state>/api-key, made on first start. A leaf: no global state. */
#ifndef SANDBOXD_APIKEY_H
#define SANDBOXD_APIKEY_H
#include <stdbool.h>
#include <stddef.h>

#define APIKEY_MAX 200        /* bytes of the key, e2b_ included */
#define APIKEY_READ_MAX 256   /* bytes read from a file or descriptor at most */

/* e2b_ and lowercase hex, shorter than APIKEY_MAX: what the E2B SDK accepts. */
bool apikey_valid(const char *k);

/* The key in file path: one line (a final newline allowed). The file must be a regular file or a
 * pipe, owned by sandboxd's effective user or root, and give group and others no access at all
 * (mode & 077 == 0, as ssh asks of a private key); otherwise it is refused and err says why and
 * how to fix it. 0, or -1 with err set. */
int apikey_from_file(const char *path, char *key, size_t len, char *err, size_t errlen);

/* The key read from descriptor fd up to its first newline or its end, then fd closed (0..2 are
 * pointed at /dev/null instead, so stdio stays open). 0, or -1 with err set. */
int apikey_from_fd(int fd, char *key, size_t len, char *err, size_t errlen);

/* <state_dir>/api-key (checked as apikey_from_file), or a new random key written there (0600)
 * when it does not exist; *made says which. 0, or -1 with err set. */
int apikey_load_or_make(const char *state_dir, char *key, size_t len, bool *made, char *err, size_t errlen);
#endif
