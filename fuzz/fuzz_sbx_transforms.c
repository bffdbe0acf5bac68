/* fuzz_sbx_transforms.c — libFuzzer target for sandboxd/transforms.c: per-host rules as a
 * request's JSON would give them and the placeholders filled in as the egress proxy does.
 *
 * Input: [host]\0[header name]\0[value template]\0[secret value] (missing parts are empty).
 * Properties checked:
 *  - transforms_add succeeds only for a valid key, a token header name that is not reserved and a
 *    value without control characters whose every `${e2b.` is a well-formed secrets placeholder;
 *    after success the key is found again for itself (an exact key) or for a subdomain (a wildcard);
 *  - transforms_fill of the value against a store holding every name (the last part as each
 *    value): either -1 (and the error never holds the secret's bytes when they are long enough to
 *    tell), or exactly the template with each placeholder replaced, computed here independently,
 *    and then never a CR, LF or NUL from a value. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transforms.h"

static const char *secret;
static size_t secret_len;

static char *lookup(void *cls, const char *name, size_t *len) {
  (void)cls;
  if (!strcmp(name, "missing")) return NULL;
  char *v = malloc(secret_len + 1);
  if (!v) abort();
  memcpy(v, secret, secret_len);
  v[secret_len] = 0;
  *len = secret_len;
  return v;
}
static void release(void *cls, char *v, size_t len) { (void)cls; memset(v, 0, len); free(v); }

/* The same expansion, written plainly: every "${e2b.secrets.NAME}" → the secret (or -1). */
static long reference(const char *t, char *out, size_t cap) {
  static const char P[] = "${e2b.secrets.";
  size_t n = 0;
  while (*t) {
    if (!strncmp(t, P, sizeof P - 1)) {
      const char *end = strchr(t + sizeof P - 1, '}');
      if (!end || end == t + sizeof P - 1) return -1;
      char name[300];
      size_t k = (size_t)(end - t) - (sizeof P - 1);
      if (k >= sizeof name) return -1;
      for (size_t i = 0; i < k; i++) name[i] = (char)((t[sizeof P - 1 + i] >= 'A' && t[sizeof P - 1 + i] <= 'Z') ? t[sizeof P - 1 + i] + 32 : t[sizeof P - 1 + i]);
      name[k] = 0;
      if (!strcmp(name, "missing") || n + secret_len >= cap) return -1;
      if (memchr(secret, '\r', secret_len) || memchr(secret, '\n', secret_len) || memchr(secret, 0, secret_len)) return -1;
      memcpy(out + n, secret, secret_len);
      n += secret_len;
      t = end + 1;
      continue;
    }
    if (n + 1 >= cap) return -1;
    out[n++] = *t++;
  }
  out[n] = 0;
  return (long)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 4);
  if (!buf) return 0;
  memcpy(buf, data, size);
  memset(buf + size, 0, 4);
  const char *part[4];
  size_t off = 0;
  for (int i = 0; i < 4; i++) {
    part[i] = buf + (off < size ? off : size);
    off += strnlen(part[i], size + 1 - (size_t)(part[i] - buf)) + 1;
  }
  secret = part[3];
  secret_len = strlen(secret);
  transforms t = {0};
  char err[512];
  const char *names[] = {part[1]}, *values[] = {part[2]};
  if (transforms_add(&t, part[0], names, values, 1, err, sizeof err) == 0) {
    if (t.nhosts != 1 || t.hosts[0].nheaders != 1) abort();
    const transform_host *h = &t.hosts[0];
    char probe[300];
    if (h->wildcard) snprintf(probe, sizeof probe, "a.%s", h->host + 2);
    else snprintf(probe, sizeof probe, "%s", h->host);
    if (strlen(probe) <= 253 && transforms_for(&t, probe) != h) abort();
    if (h->wildcard && transforms_for(&t, h->host + 2) != NULL) abort();   /* never the apex */
    static char out[TRANSFORM_VALUE_MAX + 1], want[TRANSFORM_VALUE_MAX + 1];
    long got = transforms_fill(h->headers[0].value, lookup, release, NULL, out, sizeof out, err, sizeof err);
    long ref = reference(h->headers[0].value, want, sizeof want);
    if ((got < 0) != (ref < 0)) abort();
    if (got >= 0 && (got != ref || memcmp(out, want, (size_t)got + 1) != 0)) abort();
    if (got < 0 && secret_len >= 8 && memmem(err, strlen(err), secret, secret_len)) abort();
  }
  transforms_free(&t);
  free(buf);
  return 0;
}
