/* secrets.h — the secret store, as E2B's Secret API has it (SDK 2.51: /secrets): named values
 * that are written and never read back by any client, for the egress proxy to put into a
 * sandbox's requests as they leave (`${e2b.secrets.NAME}` in a network rule's header).
 *
 * A secret is an id (`sec_` + 20 of [a-z0-9]), a name (lower-cased; 1..SECRETS_NAME_MAX of
 * [a-z0-9._-]; the `sec_` prefix is the ids'), a version (1 at creation, +1 per update: only the
 * current value is kept), customer metadata (E2B's limits) and its value. Values are 1..
 * SECRETS_VALUE_MAX bytes of tab and visible characters (a value is sent in an HTTP header).
 *
 * Storage: <state>/secrets.json (0600, written whole: temp file, fsync, rename, fsync of the
 * directory) holds each value sealed with AES-256-GCM (OpenSSL EVP; a random 96-bit nonce per
 * value; the secret's id and version as additional data, so a sealed value moved to another entry
 * or version does not open) under a key of 32 random bytes in <state>/secrets.key (0600, made
 * with the first secret). The catalogue records a check of the key: a key file that is missing
 * while secrets exist, malformed, readable by others or not the catalogue's key, and a value that
 * does not open, are refused at secrets_init with a message naming the file.
 *
 * In memory only the sealed values are kept; a value is opened into a fresh buffer when
 * secrets_value asks for it (and when secrets_init checks that every value opens), and every
 * buffer that held one is wiped (OPENSSL_cleanse) when let go.
 *
 * Scoped secrets (a sandboxd extension): metadata SECRETS_SCOPE_KEY = a sandbox id makes a secret
 * usable by that sandbox only (secrets_value with another sandbox, or none, finds nothing). It is
 * listed like any other, its scope cannot change, and it is deleted when that sandbox ends
 * (secrets_sandbox_gone, called from main.c's death hook) or, at start, when the sandbox no longer
 * exists (secrets_sweep_scoped). Whether the sandbox exists when the secret is created is the
 * caller's to check (the store knows no sandbox).
 *
 * No function here logs, returns or puts into a message any value. Thread-safe; readers
 * (secrets_value, get, list) are never held up by a writer's disk I/O. */
#ifndef SANDBOXD_SECRETS_H
#define SANDBOXD_SECRETS_H
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SECRETS_MAX 1000                 /* secrets in the store */
#define SECRETS_VALUE_MAX (64u << 10)    /* bytes of one value */
#define SECRETS_NAME_MAX 128
#define SECRETS_ID_PREFIX "sec_"
#define SECRETS_ID_LEN 24                /* "sec_" + 20 */
#define SECRETS_SCOPE_KEY "sandboxd.sandbox"
#define SECRETS_SCOPE_MAX 64             /* a sandbox id (registry.h: 1..64 of [a-z0-9]) */
/* E2B's SecretMetadata limits. */
#define SECRETS_META_ENTRIES 32
#define SECRETS_META_KEY_MAX 128
#define SECRETS_META_VALUE_MAX 1024
#define SECRETS_META_TOTAL_MAX 8192      /* bytes of every key and value together */
#define SECRETS_FILE_MAX (256u << 20)    /* the catalogue file, read whole at start (1000 secrets of the
                                          * largest values and escaped metadata stay below it) */

/* Opens (or starts) the store under state_dir. 0, or -1 with err naming the file and what is
 * wrong (the store then stays closed: every call below fails or finds nothing). */
int   secrets_init(const char *state_dir, char *err, size_t errlen);
void  secrets_shutdown(void);            /* forgets the store and wipes the key in memory */

/* The current value of the secret `name` (a name, lower-cased by the caller, or an id) as the
 * sandbox `sandbox_id` may use it, into a new buffer (*len bytes, NUL-terminated); NULL when
 * there is none (unknown, or scoped to another sandbox). Free with secrets_free_value (wipes). */
char *secrets_value(const char *name, const char *sandbox_id, size_t *len);
void  secrets_free_value(char *v, size_t len);
/* A sandbox ended: its scoped secrets are deleted. */
void  secrets_sandbox_gone(const char *sandbox_id);
/* At start: the scoped secrets of sandboxes for which alive(id) is false are deleted. How many. */
size_t secrets_sweep_scoped(bool (*alive)(const char *sandbox_id));

/* What the control plane reports of a secret (never its value). */
typedef struct {
  char id[SECRETS_ID_LEN + 1];
  char name[SECRETS_NAME_MAX + 1];
  char scope[SECRETS_SCOPE_MAX + 1];     /* "" when every sandbox may use it */
  int64_t version, created_ms, updated_ms;
  uint64_t seq;                          /* creation order: larger is newer */
  json_t *metadata;                      /* an object of strings (own copy): secret_info_free */
} secret_info;
void secret_info_free(secret_info *in);

/* The control plane's operations; each returns 0, or an HTTP status with msg (which names the
 * field at fault, never a value). `ref` is an id (sec_…) or a name (lower-cased here).
 * metadata: NULL or null for none (create) or to keep the current one (update); the scope key
 * cannot be added, changed or dropped by an update. */
int secrets_create(const char *name, const char *value, size_t vlen, json_t *metadata, secret_info *out, char *msg, size_t msglen);
int secrets_update(const char *ref, const char *value, size_t vlen, json_t *metadata, secret_info *out, char *msg, size_t msglen);
int secrets_get(const char *ref, secret_info *out, char *msg, size_t msglen);
int secrets_delete(const char *ref, char *msg, size_t msglen);
/* Newest first: at most `limit` secrets created before `before` (a seq; 0: from the newest), and
 * *next the seq to pass on for the next page (0: none). NULL only when out of memory. */
secret_info *secrets_list(uint64_t before, size_t limit, size_t *n, uint64_t *next);
void secrets_list_free(secret_info *v, size_t n);

/* Checks of a request's fields, as create and update make them: 0, or 400 with msg. */
int secrets_check_name(const char *name, char out[SECRETS_NAME_MAX + 1], char *msg, size_t msglen);
int secrets_check_value(const char *value, size_t vlen, char *msg, size_t msglen);
int secrets_check_metadata(json_t *metadata, char *msg, size_t msglen);

/* The catalogue's parser on its own, for tests and the fuzzer: the text of a secrets.json checked
 * as secrets_init checks it, but for the values, which need the key. 0 and *count, or -1 with err. */
int secrets_parse_catalogue(const char *text, size_t len, size_t *count, char *err, size_t errlen);
#endif
