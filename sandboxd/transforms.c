/* transforms.c — per-host request transforms and their placeholders (transforms.h). */
#include "transforms.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sniff.h"

#define PH_OPEN "${e2b."
#define PH_SECRET "${e2b.secrets."

int transforms_fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (err && errlen) vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* RFC 9110 token characters. */
static bool token(const char *s) {
  if (!*s) return false;
  for (; *s; s++)
    if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s))) return false;
  return true;
}

/* A header a rule may not set: framing, routing and connection management stay the request's. */
static bool reserved(const char *name) {
  static const char *const R[] = {"host", "content-length", "transfer-encoding", "connection", "upgrade", "te",
                                  "trailer", "keep-alive", "proxy-connection", "proxy-authorization", "proxy-authenticate",
                                  "expect", NULL};
  for (size_t i = 0; R[i]; i++)
    if (!strcasecmp(name, R[i])) return true;
  return false;
}

/* The placeholders of v: every `${e2b.` must be `${e2b.secrets.NAME}`. 0, or -1 with err. */
static int check_value(const char *v, const char *host, const char *name, char *err, size_t errlen) {
  size_t n = strlen(v);
  if (n > TRANSFORM_VALUE_MAX)
    return transforms_fail(err, errlen, "\"%.80s\": header \"%.80s\": the value is longer than %d bytes", host, name, TRANSFORM_VALUE_MAX);
  for (const char *p = v; *p; p++)
    if ((unsigned char)*p < 0x20 ? *p != '\t' : *p == 0x7f)
      return transforms_fail(err, errlen, "\"%.80s\": header \"%.80s\": the value holds a control character", host, name);
  for (const char *p = strstr(v, PH_OPEN); p; p = strstr(p + 1, PH_OPEN)) {
    if (!strncmp(p, "${e2b.identity.tokens.", 22))
      return transforms_fail(err, errlen, "\"%.80s\": header \"%.80s\": ${e2b.identity.tokens.…} (workload identity tokens) is not "
                  "supported by sandboxd", host, name);
    if (strncmp(p, PH_SECRET, strlen(PH_SECRET)) != 0)
      return transforms_fail(err, errlen, "\"%.80s\": header \"%.80s\": unknown placeholder \"%.40s…\" (sandboxd fills ${e2b.secrets.NAME})",
                  host, name, p);
    const char *s = p + strlen(PH_SECRET), *end = strchr(s, '}');
    if (!end || end == s || (size_t)(end - s) > TRANSFORM_SECRET_NAME_MAX || memchr(s, '{', (size_t)(end - s)))
      return transforms_fail(err, errlen, "\"%.80s\": header \"%.80s\": a ${e2b.secrets.NAME} placeholder needs a name of 1..%d "
                  "characters without '{' and a closing '}'", host, name, TRANSFORM_SECRET_NAME_MAX);
  }
  return 0;
}

static transform_host *find_key(transforms *t, const char *key) {
  for (size_t i = 0; i < t->nhosts; i++)
    if (!strcmp(t->hosts[i].host, key)) return &t->hosts[i];
  return NULL;
}

int transforms_add(transforms *t, const char *host, const char *const *names, const char *const *values, size_t n,
                   char *err, size_t errlen) {
  char key[SNIFF_NAME_MAX + 3];
  bool wild = host && !strncmp(host, "*.", 2);
  char name[SNIFF_NAME_MAX + 1];
  if (!host || sniff_hostname(wild ? host + 2 : host, strlen(wild ? host + 2 : host), name) != 0)
    return transforms_fail(err, errlen, "\"%.80s\": not a host name or *.wildcard (a bare \"*\" is not allowed)", host ? host : "");
  snprintf(key, sizeof key, "%s%s", wild ? "*." : "", name);
  for (size_t i = 0; i < n; i++) {
    if (!names[i] || !token(names[i])) return transforms_fail(err, errlen, "\"%s\": \"%.80s\" is not a header name", key, names[i] ? names[i] : "");
    if (reserved(names[i])) return transforms_fail(err, errlen, "\"%s\": header \"%s\" cannot be set by a rule", key, names[i]);
    if (!values[i]) return transforms_fail(err, errlen, "\"%s\": header \"%s\": the value must be a string", key, names[i]);
    if (check_value(values[i], key, names[i], err, errlen) != 0) return -1;
  }
  transform_host *h = find_key(t, key);
  if (!h) {
    if (t->nhosts == TRANSFORM_MAX_HOSTS) return transforms_fail(err, errlen, "at most %d hosts have rules", TRANSFORM_MAX_HOSTS);
    transform_host *grown = realloc(t->hosts, (t->nhosts + 1) * sizeof *grown);
    if (!grown) return transforms_fail(err, errlen, "out of memory");
    t->hosts = grown;
    h = &t->hosts[t->nhosts++];
    memset(h, 0, sizeof *h);
    memcpy(h->host, key, sizeof h->host);
    h->wildcard = wild;
  }
  for (size_t i = 0; i < n; i++) {
    transform_header *slot = NULL;
    for (size_t k = 0; k < h->nheaders && !slot; k++)
      if (!strcasecmp(h->headers[k].name, names[i])) slot = &h->headers[k];   /* a later rule replaces it */
    if (!slot) {
      if (h->nheaders == TRANSFORM_MAX_HEADERS) return transforms_fail(err, errlen, "\"%s\": at most %d headers", key, TRANSFORM_MAX_HEADERS);
      transform_header *grown = realloc(h->headers, (h->nheaders + 1) * sizeof *grown);
      if (!grown) return transforms_fail(err, errlen, "out of memory");
      h->headers = grown;
      slot = &h->headers[h->nheaders++];
      slot->name = slot->value = NULL;
    }
    char *nn = strdup(names[i]), *vv = strdup(values[i]);
    if (!nn || !vv) { free(nn); free(vv); return transforms_fail(err, errlen, "out of memory"); }
    free(slot->name);
    free(slot->value);
    slot->name = nn;
    slot->value = vv;
  }
  return 0;
}

void transforms_free(transforms *t) {
  for (size_t i = 0; i < t->nhosts; i++) {
    for (size_t k = 0; k < t->hosts[i].nheaders; k++) { free(t->hosts[i].headers[k].name); free(t->hosts[i].headers[k].value); }
    free(t->hosts[i].headers);
  }
  free(t->hosts);
  memset(t, 0, sizeof *t);
}

const transform_host *transforms_for(const transforms *t, const char *host) {
  const transform_host *best = NULL;
  size_t n = strlen(host), best_len = 0;
  for (size_t i = 0; i < t->nhosts; i++) {
    const transform_host *h = &t->hosts[i];
    if (!h->wildcard) {
      if (!strcmp(h->host, host)) return h;             /* an exact key wins */
      continue;
    }
    size_t k = strlen(h->host + 2);                    /* a subdomain at any depth, never the apex */
    if (n > k + 1 && host[n - k - 1] == '.' && !strcmp(host + n - k, h->host + 2) && k > best_len) {
      best = h;
      best_len = k;
    }
  }
  return best;
}

void transforms_each_secret(const char *value, void (*each)(void *cls, const char *name), void *cls) {
  for (const char *p = strstr(value, PH_SECRET); p; p = strstr(p + 1, PH_SECRET)) {
    const char *s = p + strlen(PH_SECRET), *end = strchr(s, '}');
    if (!end) return;
    char name[TRANSFORM_SECRET_NAME_MAX + 1];
    size_t k = (size_t)(end - s) < sizeof name - 1 ? (size_t)(end - s) : sizeof name - 1;
    memcpy(name, s, k);
    name[k] = 0;
    each(cls, name);
  }
}

long transforms_fill(const char *value, transform_lookup lookup, transform_release release, void *cls, char *out,
                     size_t cap, char *err, size_t errlen) {
  size_t n = 0;
  const char *p = value;
  while (*p) {
    const char *ph = strstr(p, PH_SECRET);
    size_t lit = ph ? (size_t)(ph - p) : strlen(p);
    if (n + lit >= cap) return transforms_fail(err, errlen, "the header is longer than %zu bytes", cap - 1);
    memcpy(out + n, p, lit);
    n += lit;
    if (!ph) break;
    const char *s = ph + strlen(PH_SECRET), *end = strchr(s, '}');
    char name[TRANSFORM_SECRET_NAME_MAX + 1];
    size_t k = end ? (size_t)(end - s) : 0;
    if (!end || k == 0 || k > TRANSFORM_SECRET_NAME_MAX) {
      memset(out, 0, n);
      return transforms_fail(err, errlen, "a malformed ${e2b.secrets.…} placeholder");
    }
    for (size_t i = 0; i < k; i++) name[i] = (char)tolower((unsigned char)s[i]);   /* names are stored lower-cased */
    name[k] = 0;
    size_t vlen = 0;
    char *v = lookup(cls, name, &vlen);
    if (!v) {
      memset(out, 0, n);                   /* no part of an earlier value stays behind */
      return transforms_fail(err, errlen, "secret \"%s\" is not known to sandboxd (or not to this sandbox)", name);
    }
    bool bad = n + vlen >= cap || memchr(v, '\r', vlen) || memchr(v, '\n', vlen) || memchr(v, 0, vlen);
    if (!bad) memcpy(out + n, v, vlen);
    release(cls, v, vlen);
    if (bad) {
      memset(out, 0, n);                   /* no part of a value stays behind */
      return transforms_fail(err, errlen, n + vlen >= cap ? "secret \"%s\" makes the header longer than the limit"
                                               : "secret \"%s\" holds a line break or NUL, which a header cannot carry", name);
    }
    n += vlen;
    p = end + 1;
  }
  out[n] = 0;
  return (long)n;
}
