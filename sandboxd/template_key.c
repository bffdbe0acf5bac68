/* template_key.c — a template build step's cache key (see template_key.h). */
#include "template_key.h"

#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define DOMAIN "sandboxd template cache v1"

/* One field: 1 tag byte, its length (8 bytes, big-endian), its bytes; NULL is tag 0 alone. */
static int field(EVP_MD_CTX *h, const char *s, size_t n) {
  unsigned char hdr[9] = {s ? 1 : 0};
  if (!s) return EVP_DigestUpdate(h, hdr, 1) == 1 ? 0 : -1;
  for (int i = 0; i < 8; i++) hdr[1 + i] = (unsigned char)((uint64_t)n >> (56 - 8 * i));
  return EVP_DigestUpdate(h, hdr, 9) == 1 && (n == 0 || EVP_DigestUpdate(h, s, n) == 1) ? 0 : -1;
}
static int str(EVP_MD_CTX *h, const char *s) { return field(h, s, s ? strlen(s) : 0); }
static int num(EVP_MD_CTX *h, unsigned long long v) {
  char b[24];
  int n = snprintf(b, sizeof b, "%llu", v);
  return field(h, b, (size_t)n);
}

static EVP_MD_CTX *begin(const char *what) {
  EVP_MD_CTX *h = EVP_MD_CTX_new();
  if (!h) return NULL;
  if (EVP_DigestInit_ex(h, EVP_sha256(), NULL) != 1 || str(h, DOMAIN) != 0 || str(h, what) != 0) {
    EVP_MD_CTX_free(h);
    return NULL;
  }
  return h;
}

static int finish(EVP_MD_CTX *h, int rc, char *out) {
  unsigned char md[32];
  unsigned len = 0;
  if (rc == 0 && (EVP_DigestFinal_ex(h, md, &len) != 1 || len != sizeof md)) rc = -1;
  EVP_MD_CTX_free(h);
  if (rc != 0) return -1;
  static const char hex[] = "0123456789abcdef";
  for (size_t i = 0; i < sizeof md; i++) {
    out[2 * i] = hex[md[i] >> 4];
    out[2 * i + 1] = hex[md[i] & 15];
  }
  out[TK_KEY_LEN] = 0;
  return 0;
}

static int ctx(EVP_MD_CTX *h, const tk_ctx *c) {
  int rc = str(h, c->user) | str(h, c->workdir) | num(h, c->nenvs);
  for (size_t i = 0; i < c->nenvs && rc == 0; i++) rc = str(h, c->envs[i]);
  return rc;
}

int tk_base(const char *from_layer, const tk_ctx *c, char *out) {
  EVP_MD_CTX *h = begin("base");
  if (!h) return -1;
  return finish(h, str(h, from_layer) | ctx(h, c), out);
}

int tk_step(const char *parent, const ts_step *s, const tk_ctx *c, char *out) {
  EVP_MD_CTX *h = begin("step");
  if (!h) return -1;
  int rc = str(h, parent) | str(h, ts_kind_name(s->kind)) | num(h, s->nargs);
  for (size_t i = 0; i < s->nargs && rc == 0; i++) rc = str(h, s->args[i]);
  rc |= str(h, s->user) | str(h, s->kind == TS_COPY ? s->hash : NULL) | num(h, s->has_mode ? s->mode + 1u : 0u) | ctx(h, c);
  return finish(h, rc, out);
}

int tk_final(const char *last, const char *start_cmd, const char *ready_cmd, char *out) {
  EVP_MD_CTX *h = begin("final");
  if (!h) return -1;
  return finish(h, str(h, last) | str(h, start_cmd) | str(h, ready_cmd), out);
}
