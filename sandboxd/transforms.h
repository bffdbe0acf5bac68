/* transforms.h — E2B's per-host request transforms (`network.rules`): which headers an allowed
 * request to a host gets, with `${e2b.secrets.NAME}` placeholders that the egress proxy fills in
 * as the request leaves, so that the value never exists inside the sandbox.
 *
 * E2B's semantics, kept: keys are exact host names or one leading wildcard `*.example.com`
 * (subdomains at any depth, never the apex; a bare `*` is invalid), lower-cased; an exact key wins,
 * then the longest matching wildcard; matching rule sets are not merged. A host's rules apply in
 * order (a later rule's header replaces an earlier one of the same name). Rules grant no access:
 * allowOut decides that. A placeholder is `${e2b.secrets.` + the secret's name up to the next
 * `}` + `}`; `${e2b.identity.tokens.…}` (workload identity) and any other `${e2b.` kind are
 * refused when the rules are parsed; other text is literal. */
#ifndef SANDBOXD_TRANSFORMS_H
#define SANDBOXD_TRANSFORMS_H
#include <stdbool.h>
#include <stddef.h>

#define TRANSFORM_MAX_HOSTS 256
#define TRANSFORM_MAX_HEADERS 32          /* per host */
#define TRANSFORM_VALUE_MAX 8192          /* a header value as given, and as filled in */
#define TRANSFORM_SECRET_NAME_MAX 256

typedef struct {
  char *name;                             /* as given (compared case-insensitively) */
  char *value;                            /* as given: placeholders unresolved */
} transform_header;

typedef struct {
  char host[256];                         /* the key, lower-cased ("*." + a name of at most 253) */
  bool wildcard;
  const char *suffix;                     /* wildcard: host + 2 */
  transform_header *headers;
  size_t nheaders;
} transform_host;

typedef struct transforms {
  transform_host *hosts;
  size_t nhosts;
} transforms;

/* Adds the headers of one rule for host (the rules of a host are added in order). names[i] /
 * values[i]. 0, or -1 with err naming what is wrong (`"api.x": header "Authorization": ...`). */
int  transforms_add(transforms *t, const char *host, const char *const *names, const char *const *values, size_t n,
                    char *err, size_t errlen);
void transforms_free(transforms *t);
/* err (errlen bytes) = printf(fmt, ...) when err is given; → -1. The parsers' failure (here and
 * in egress_rules.c). */
int  transforms_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The rules for a request to host (lower-case, no final dot), or NULL. */
const transform_host *transforms_for(const transforms *t, const char *host);

/* value with every placeholder filled in by lookup(cls, secret name) (which returns a value and
 * its length, or NULL when there is none; release(cls, value, len) wipes and frees it) into out.
 * The length, or -1 with err naming the secret (never a value) when one is unknown or the result
 * does not fit. */
typedef char *(*transform_lookup)(void *cls, const char *name, size_t *len);
typedef void (*transform_release)(void *cls, char *value, size_t len);
long transforms_fill(const char *value, transform_lookup lookup, transform_release release, void *cls, char *out,
                     size_t cap, char *err, size_t errlen);
/* Does value name secrets? Calls each(cls, name) for every placeholder (names only). */
void transforms_each_secret(const char *value, void (*each)(void *cls, const char *name), void *cls);
#endif
