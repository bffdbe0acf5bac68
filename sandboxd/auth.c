/* auth.c — see auth.h. */
#include "auth.h"

#include <string.h>
#include <strings.h>

#include "b64.h"
#include "errors.h"

bool auth_secret_eq(const char *given, const char *expected) {
  if (!given || !expected) return false;
  size_t lg = strlen(given), le = strlen(expected);
  unsigned char d = lg != le;
  for (size_t i = 0; i < le; i++) d |= (unsigned char)(expected[i] ^ (i < lg ? given[i] : 0));
  return d == 0;
}

int auth_basic_user(const char *header, char user[AUTH_USER_MAX + 1], const char **why) {
  if (!header || strncasecmp(header, "Basic ", 6) != 0) { *why = "only Basic authorization is supported"; return -1; }
  const char *b = header + 6;
  size_t n = strlen(b);
  unsigned char dec[3 * AUTH_USER_MAX + 3];
  size_t len;
  if (n == 0) { *why = "the credentials are empty"; return -1; }
  if (n > 4 * (sizeof dec / 3)) { *why = "the credentials are too long"; return -1; }
  *why = NULL;
  int rc = mb_b64_decode(b, n, dec, sizeof dec, &len, why);
  if (rc != MB_OK) {
    if (rc == MB_E_TOO_LARGE) *why = "the credentials are too long";
    else if (!*why) *why = "the credentials are not base64";
    return -1;
  }
  if (memchr(dec, '\0', len)) { *why = "the user name contains NUL"; return -1; }
  const unsigned char *colon = memchr(dec, ':', len);
  size_t ul = colon ? (size_t)(colon - dec) : len;
  if (ul == 0) { *why = "the user name is empty"; return -1; }
  if (ul > AUTH_USER_MAX) { *why = "the user name is too long"; return -1; }
  memcpy(user, dec, ul);
  user[ul] = '\0';
  return 0;
}

auth_sig auth_signature(const char *path, const char *op, const char *user, const char *token, int64_t exp,
                        const char *sig, int64_t now_s) {
  char want[MB_SIGN_V1_LEN + 1];
  if (!sig || mb_sign_v1(path, op, user, token, exp, want) != MB_OK || !auth_secret_eq(sig, want)) return AUTH_SIG_BAD;
  if (now_s > 0 && exp && exp < now_s) return AUTH_SIG_EXPIRED;
  return AUTH_SIG_OK;
}
