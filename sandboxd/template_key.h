/* template_key.h — a template build step's cache key: what decides a step's result, hashed. A
 * step whose key is in the build cache (template_cache.h) is not run again: its layer is reused.
 *
 * Keys chain: the key before the first step names the template the build starts from (its top
 * layer's id, or "base") and what that template sets (user, workdir, envs); each step's key hashes
 * its parent's key, the step (kind, every arg, its user, a COPY's files hash as the SDK computed
 * it over the copied files' names, modes and contents) and what the steps before it set (user,
 * workdir, envs); the final key adds the start and ready commands. SHA-256 over length-prefixed
 * fields (no two inputs give the same bytes), lower-case hex. A field that changes what a step
 * does must be hashed here. Pure: libcrypto and libc, no I/O (tests/c/test_sbx_template_key.c). */
#ifndef SANDBOXD_TEMPLATE_KEY_H
#define SANDBOXD_TEMPLATE_KEY_H
#include <stddef.h>

#include "template_spec.h"

#define TK_KEY_LEN 64

/* What the build has set when a step runs. */
typedef struct {
  const char *user;                    /* the current USER */
  const char *workdir;                 /* "": the user's home */
  const char *const *envs;             /* "NAME=VALUE", in the order they were set */
  size_t nenvs;
} tk_ctx;

/* The key before the first step: from_layer the id of the top layer of the template the build
 * starts from, NULL for base. out: TK_KEY_LEN + 1 bytes. 0, or -1 (libcrypto failed). */
int tk_base(const char *from_layer, const tk_ctx *c, char *out);
/* The key of step s after the key `parent`, with c what is set when it runs. */
int tk_step(const char *parent, const ts_step *s, const tk_ctx *c, char *out);
/* The key of the template's final state: the last step's key, the start and ready commands (NULL:
 * none). */
int tk_final(const char *last, const char *start_cmd, const char *ready_cmd, char *out);
#endif
