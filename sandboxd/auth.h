/* auth.h — the credentials sandboxd checks, each parsed by exactly one strict function here:
 * the control plane's API key, envd's access token, HTTP Basic authorization (envd's user), and
 * E2B's v1 URL signatures. Pure functions (no I/O, no global state). */
#ifndef SANDBOXD_AUTH_H
#define SANDBOXD_AUTH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUTH_USER_MAX 64   /* longest user name taken from an Authorization header */

/* Secret comparison whose time depends on the expected secret's length only. */
bool auth_secret_eq(const char *given, const char *expected);

/* "Basic base64(user[:password])" → user (the password is ignored, as envd does). Strict:
 * scheme "Basic" (any case), one space, canonical standard base64 (OpenSSL through core's
 * mb_b64_decode), no NUL, user 1..AUTH_USER_MAX bytes. 0, or -1 with *why set. */
int auth_basic_user(const char *header, char user[AUTH_USER_MAX + 1], const char **why);

/* E2B's v1 signature for path/op/user with token and expiry (0: none) equals sig; and, when
 * now_s is given (> 0), the expiry is not past. */
typedef enum { AUTH_SIG_OK = 0, AUTH_SIG_BAD, AUTH_SIG_EXPIRED } auth_sig;
auth_sig auth_signature(const char *path, const char *op, const char *user, const char *token, int64_t exp,
                        const char *sig, int64_t now_s);
#endif
