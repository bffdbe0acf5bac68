/* ids.c — random identifiers (see ids.h). */
#include "ids.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>

int ids_random(char *out, size_t n) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
  size_t i = 0;
  while (i < n) {
    unsigned char buf[64];
    ssize_t got = getrandom(buf, sizeof buf, 0);
    if (got < 0) { if (errno == EINTR) continue; return -1; }
    /* rejection sampling: 252 = 7 * 36 keeps every character equally likely */
    for (ssize_t k = 0; k < got && i < n; k++)
      if (buf[k] < 252) out[i++] = alphabet[buf[k] % 36];
  }
  out[n] = '\0';
  return 0;
}

bool ids_alnum(const char *s, size_t max) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > max) return false;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9'))) return false;
  return true;
}
