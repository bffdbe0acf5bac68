/* secrets.c — the secret store (see secrets.h). The table is an array of immutable entries: a
 * writer (serialised by wmu) builds the next array, writes the catalogue from it, and only then
 * swaps it in under mu, so a reader holding mu never waits for the disk. */
#include "secrets.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "b64.h"
#include "clocks.h"
#include "ids.h"
#include "statefile.h"

#define KEY_LEN 32
#define NONCE_LEN 12
#define TAG_LEN 16
#define SEAL_OVERHEAD (NONCE_LEN + TAG_LEN)
#define SEALED_MAX (SECRETS_VALUE_MAX + SEAL_OVERHEAD)
#define KEYCHECK_AAD "sandboxd secrets key check v1"
#define CIPHER_NAME "aes-256-gcm"
#define AAD_MAX 96

typedef struct {
  char id[SECRETS_ID_LEN + 1];
  char name[SECRETS_NAME_MAX + 1];
  char scope[SECRETS_SCOPE_MAX + 1];
  uint64_t seq;
  int64_t version, created_ms, updated_ms;
  json_t *metadata;
  unsigned char *sealed;           /* nonce || ciphertext || tag */
  size_t sealed_len;
} entry;

static struct {
  pthread_mutex_t mu;              /* the table, the key */
  pthread_mutex_t wmu;             /* one writer at a time, held while the catalogue is written */
  bool open;
  char dir[4096], path[4200], tmp[4210], keypath[4200];
  unsigned char key[KEY_LEN];
  bool have_key;
  unsigned char check[SEAL_OVERHEAD];   /* the catalogue's key check: the key seals "" with KEYCHECK_AAD */
  bool have_check;
  entry **all;                     /* oldest first (ascending seq) */
  size_t n;
  uint64_t next_seq;
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .wmu = PTHREAD_MUTEX_INITIALIZER};

/* The message into msg (when there is room for one); returns status. */
__attribute__((format(printf, 4, 5))) static int fail(char *msg, size_t msglen, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (msg && msglen) vsnprintf(msg, msglen, fmt, ap);
  va_end(ap);
  return status;
}
#define FAIL(status, ...) fail(msg, msglen, (status), __VA_ARGS__)
#define ERR(...) fail(err, errlen, -1, __VA_ARGS__)

static void entry_free(entry *e) {
  if (!e) return;
  json_decref(e->metadata);
  free(e->sealed);
  free(e);
}

/* ---- sealing (AES-256-GCM) ---- */

/* The additional data that binds a sealed value to its secret and version. */
static const char *value_aad(const char *id, int64_t version, char out[AAD_MAX]) {
  snprintf(out, AAD_MAX, "sandboxd secret v1\n%s\n%" PRId64, id, version);
  return out;
}

/* pt (ptlen bytes, may be 0) sealed into out (ptlen + SEAL_OVERHEAD bytes). 0 or -1. */
static int seal(const unsigned char *key, const unsigned char *pt, size_t ptlen, const char *aad, unsigned char *out) {
  unsigned char *nonce = out, *ct = out + NONCE_LEN, *tag = out + NONCE_LEN + ptlen;
  if (ptlen > SECRETS_VALUE_MAX || RAND_bytes(nonce, NONCE_LEN) != 1) return -1;
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  int l = 0, f = 0;
  bool ok = c && EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) == 1 &&
            EVP_EncryptInit_ex(c, NULL, NULL, key, nonce) == 1 &&
            EVP_EncryptUpdate(c, NULL, &l, (const unsigned char *)aad, (int)strlen(aad)) == 1;
  l = 0;
  if (ok && ptlen) ok = EVP_EncryptUpdate(c, ct, &l, pt, (int)ptlen) == 1 && l >= 0 && (size_t)l <= ptlen;
  ok = ok && EVP_EncryptFinal_ex(c, ct + l, &f) == 1 && (size_t)l + (size_t)f == ptlen &&
       EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) == 1;
  EVP_CIPHER_CTX_free(c);                /* wipes the key schedule */
  if (!ok) OPENSSL_cleanse(out, ptlen + SEAL_OVERHEAD);
  return ok ? 0 : -1;
}

/* in (inlen bytes: nonce, ciphertext, tag) opened into out (inlen - SEAL_OVERHEAD bytes) when it
 * authenticates under key and aad. 0 or -1 (out wiped). */
static int unseal(const unsigned char *key, const unsigned char *in, size_t inlen, const char *aad, unsigned char *out) {
  if (inlen < SEAL_OVERHEAD || inlen > SEALED_MAX) return -1;
  size_t n = inlen - SEAL_OVERHEAD;
  unsigned char tag[TAG_LEN];
  memcpy(tag, in + NONCE_LEN + n, TAG_LEN);
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  int l = 0, f = 0;
  bool ok = c && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
            EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) == 1 &&
            EVP_DecryptInit_ex(c, NULL, NULL, key, in) == 1 &&
            EVP_DecryptUpdate(c, NULL, &l, (const unsigned char *)aad, (int)strlen(aad)) == 1;
  l = 0;
  if (ok && n) ok = EVP_DecryptUpdate(c, out, &l, in + NONCE_LEN, (int)n) == 1 && l >= 0 && (size_t)l <= n;
  ok = ok && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) == 1 &&
       EVP_DecryptFinal_ex(c, out + l, &f) > 0 && (size_t)l + (size_t)f == n;
  EVP_CIPHER_CTX_free(c);
  if (!ok && n) OPENSSL_cleanse(out, n);
  return ok ? 0 : -1;
}

/* Does e's sealed value open under the key? (A scratch buffer holds the value meanwhile.) */
static bool opens(const unsigned char *key, const entry *e) {
  char aad[AAD_MAX];
  unsigned char *buf = malloc(e->sealed_len);
  if (!buf) return false;
  bool ok = unseal(key, e->sealed, e->sealed_len, value_aad(e->id, e->version, aad), buf) == 0;
  OPENSSL_cleanse(buf, e->sealed_len);
  free(buf);
  return ok;
}

/* ---- the fields ---- */

static bool alnum_lower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

int secrets_check_name(const char *name, char out[SECRETS_NAME_MAX + 1], char *msg, size_t msglen) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > SECRETS_NAME_MAX)
    return FAIL(400, "field 'name': a secret name is 1 to %d characters of a-z, 0-9, '_', '-' and '.', starting with a "
                "letter or digit (A-Z are lower-cased)%s", SECRETS_NAME_MAX, n ? "; this one is longer" : "");
  for (size_t i = 0; i < n; i++) {
    char c = name[i] >= 'A' && name[i] <= 'Z' ? (char)(name[i] - 'A' + 'a') : name[i];
    if (!alnum_lower(c) && (i == 0 || (c != '_' && c != '-' && c != '.'))) {
      if ((unsigned char)c >= ' ' && (unsigned char)c < 0x7f)
        return FAIL(400, "field 'name': '%c' (character %zu) is not allowed: a secret name is 1 to %d characters of a-z, 0-9, "
                    "'_', '-' and '.', starting with a letter or digit", c, i + 1, SECRETS_NAME_MAX);
      return FAIL(400, "field 'name': byte 0x%02x (at %zu) is not allowed: a secret name is 1 to %d characters of a-z, 0-9, "
                  "'_', '-' and '.', starting with a letter or digit", (unsigned char)c, i + 1, SECRETS_NAME_MAX);
    }
    out[i] = c;
  }
  out[n] = '\0';
  if (!strncmp(out, SECRETS_ID_PREFIX, strlen(SECRETS_ID_PREFIX)))
    return FAIL(400, "field 'name': the prefix '" SECRETS_ID_PREFIX "' is reserved for secret ids");
  return 0;
}

int secrets_check_value(const char *value, size_t vlen, char *msg, size_t msglen) {
  if (!value || vlen == 0) return FAIL(400, "field 'value' must not be empty");
  if (vlen > SECRETS_VALUE_MAX) return FAIL(400, "field 'value' is %zu bytes: at most %u", vlen, SECRETS_VALUE_MAX);
  bool control = false;
  for (size_t i = 0; i < vlen; i++) {              /* no early exit: the same work whatever the value */
    unsigned char c = (unsigned char)value[i];
    control |= (c < 0x20 && c != '\t') || c == 0x7f;
  }
  if (control)
    return FAIL(400, "field 'value' holds a control character (a line break, NUL, ...): a value is sent in an HTTP header, "
                "where only tab, space and visible characters are allowed");
  return 0;
}

/* A sandbox id as registry.h has them: 1..64 of [a-z0-9]. */
static bool valid_scope(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > SECRETS_SCOPE_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (!alnum_lower(s[i])) return false;
  return true;
}

int secrets_check_metadata(json_t *md, char *msg, size_t msglen) {
  if (!md || json_is_null(md)) return 0;
  if (!json_is_object(md)) return FAIL(400, "field 'metadata' must be an object of strings");
  if (json_object_size(md) > SECRETS_META_ENTRIES)
    return FAIL(400, "field 'metadata': at most %d entries (it has %zu)", SECRETS_META_ENTRIES, json_object_size(md));
  size_t total = 0;
  const char *k;
  json_t *v;
  json_object_foreach(md, k, v) {
    size_t kl = strlen(k);
    if (kl == 0) return FAIL(400, "field 'metadata': a key cannot be empty");
    if (kl > SECRETS_META_KEY_MAX) return FAIL(400, "field 'metadata': the key '%.40s...' is longer than %d bytes", k, SECRETS_META_KEY_MAX);
    if (!json_is_string(v)) return FAIL(400, "field 'metadata.%s' must be a string", k);
    size_t vl = json_string_length(v);
    if (vl > SECRETS_META_VALUE_MAX) return FAIL(400, "field 'metadata.%s' is longer than %d bytes", k, SECRETS_META_VALUE_MAX);
    if (!strcmp(k, SECRETS_SCOPE_KEY) && !valid_scope(json_string_value(v)))
      return FAIL(400, "field 'metadata." SECRETS_SCOPE_KEY "' must be a sandbox id (1 to %d of a-z, 0-9)", SECRETS_SCOPE_MAX);
    total += kl + vl;
  }
  if (total > SECRETS_META_TOTAL_MAX)
    return FAIL(400, "field 'metadata': its keys and values are %zu bytes together: at most %d", total, SECRETS_META_TOTAL_MAX);
  return 0;
}

static const char *scope_of(json_t *md) {
  const char *s = md ? json_string_value(json_object_get(md, SECRETS_SCOPE_KEY)) : NULL;
  return s ? s : "";
}

static bool valid_id(const char *id) {
  size_t pl = strlen(SECRETS_ID_PREFIX);
  if (strlen(id) != SECRETS_ID_LEN || strncmp(id, SECRETS_ID_PREFIX, pl) != 0) return false;
  for (size_t i = pl; i < SECRETS_ID_LEN; i++)
    if (!alnum_lower(id[i])) return false;
  return true;
}

/* ---- the catalogue file ---- */

static json_t *entry_json(const entry *e) {
  size_t cap = mb_b64_encoded_len(e->sealed_len) + 1;
  char *b = malloc(cap);
  if (!b) return NULL;
  mb_b64_encode(e->sealed, e->sealed_len, b);
  json_t *j = json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:O,s:s}", "id", e->id, "name", e->name, "seq", (json_int_t)e->seq,
                        "version", (json_int_t)e->version, "createdMs", (json_int_t)e->created_ms, "updatedMs",
                        (json_int_t)e->updated_ms, "metadata", e->metadata, "value", b);
  free(b);
  return j;
}

static char *serialize(entry *const *all, size_t n, uint64_t next_seq) {
  json_t *arr = json_array();
  json_t *root = json_pack("{s:i,s:s,s:I,s:o}", "version", 1, "cipher", CIPHER_NAME, "nextSeq", (json_int_t)next_seq, "secrets", arr);
  if (!root) return NULL;
  if (g.have_check) {
    char b[64];
    mb_b64_encode(g.check, SEAL_OVERHEAD, b);
    json_object_set_new(root, "keyCheck", json_string(b));
  }
  for (size_t i = 0; i < n; i++) {
    json_t *o = entry_json(all[i]);
    if (!o || json_array_append_new(arr, o) != 0) { json_decref(root); return NULL; }
  }
  char *text = json_dumps(root, JSON_INDENT(1) | JSON_SORT_KEYS);
  json_decref(root);
  return text;
}

/* text to the store's file (statefile.h). 0, or 500 with msg. */
static int write_atomic(const char *text, char *msg, size_t msglen) {
  return statefile_write(g.path, text, msg, msglen) == 0 ? 0 : 500;
}

/* With wmu held: `arr` (n entries, malloc'ed) becomes the store once it is on disk; the old
 * table's entries that arr does not hold are freed. 0 (arr is the store's), or 500 with msg
 * (arr still the caller's). */
static int commit(entry **arr, size_t n, uint64_t next_seq, char *msg, size_t msglen) {
  char *text = serialize(arr, n, next_seq);
  if (!text) return FAIL(500, "out of memory");
  int rc = write_atomic(text, msg, msglen);
  free(text);
  if (rc) return rc;
  pthread_mutex_lock(&g.mu);
  entry **old = g.all;
  size_t oldn = g.n;
  g.all = arr;
  g.n = n;
  g.next_seq = next_seq;
  pthread_mutex_unlock(&g.mu);
  /* No reader holds an old entry now: readers use entries only while they hold mu. */
  for (size_t i = 0; i < oldn; i++) {
    bool kept = false;
    for (size_t j = 0; j < n && !kept; j++) kept = arr[j] == old[i];
    if (!kept) entry_free(old[i]);
  }
  free(old);
  return 0;
}

/* The catalogue's text into a table (the values still sealed). 0, or -1 with err. */
static int parse(const char *text, size_t len, entry ***out, size_t *nout, uint64_t *next_seq, unsigned char check[SEAL_OVERHEAD],
                 bool *has_check, char *err, size_t errlen) {
  *out = NULL;
  *nout = 0;
  *has_check = false;
  json_error_t je;
  json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
  if (!root) return ERR("not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
  int rc = -1;
  entry **all = NULL;
  size_t n = 0;
  char m[300];
  json_t *arr = json_object_get(root, "secrets"), *ver = json_object_get(root, "version"), *ns = json_object_get(root, "nextSeq");
  json_t *kc = json_object_get(root, "keyCheck");
  const char *k;
  json_t *v;
  if (!json_is_object(root)) { ERR("not a sandboxd secret catalogue (an object)"); goto out; }
  json_object_foreach(root, k, v)
    if (strcmp(k, "version") && strcmp(k, "cipher") && strcmp(k, "nextSeq") && strcmp(k, "keyCheck") && strcmp(k, "secrets")) {
      ERR("unknown field '%.60s'", k);
      goto out;
    }
  if (!json_is_integer(ver) || json_integer_value(ver) != 1) { ERR("not a sandboxd secret catalogue of version 1"); goto out; }
  if (!json_is_string(json_object_get(root, "cipher")) || strcmp(json_string_value(json_object_get(root, "cipher")), CIPHER_NAME)) {
    ERR("field 'cipher' must be \"" CIPHER_NAME "\"");
    goto out;
  }
  if (!json_is_integer(ns) || json_integer_value(ns) < 1 || json_integer_value(ns) > ((json_int_t)1 << 53)) {
    ERR("field 'nextSeq' must be an integer from 1 to 2^53");
    goto out;
  }
  *next_seq = (uint64_t)json_integer_value(ns);
  if (kc) {
    size_t got = 0;
    unsigned char buf[SEAL_OVERHEAD + 3];
    if (!json_is_string(kc) || json_string_length(kc) > 64 ||
        mb_b64_decode(json_string_value(kc), json_string_length(kc), buf, sizeof buf, &got, NULL) != 0 || got != SEAL_OVERHEAD) {
      ERR("field 'keyCheck' must be the base64 of %d bytes", SEAL_OVERHEAD);
      goto out;
    }
    memcpy(check, buf, SEAL_OVERHEAD);
    *has_check = true;
  }
  if (!json_is_array(arr) || json_array_size(arr) > SECRETS_MAX) { ERR("field 'secrets' must be an array of at most %d", SECRETS_MAX); goto out; }
  if (json_array_size(arr) && !*has_check) { ERR("it holds secrets but no key check"); goto out; }
  all = calloc(json_array_size(arr) + 1, sizeof *all);
  if (!all) { ERR("out of memory"); goto out; }
  size_t i;
  json_t *o;
  uint64_t last_seq = 0;
  json_array_foreach(arr, i, o) {
    static const char *const FIELDS[] = {"id", "name", "seq", "version", "createdMs", "updatedMs", "metadata", "value"};
    const size_t NF = sizeof FIELDS / sizeof FIELDS[0];
    if (!json_is_object(o) || json_object_size(o) != NF) { ERR("secret %zu: must be an object of exactly the fields id, name, seq, "
                                                               "version, createdMs, updatedMs, metadata, value", i); goto out; }
    for (size_t f = 0; f < NF; f++)
      if (!json_object_get(o, FIELDS[f])) { ERR("secret %zu: field '%s' is missing", i, FIELDS[f]); goto out; }
    const char *id = json_string_value(json_object_get(o, "id")), *name = json_string_value(json_object_get(o, "name"));
    const char *val = json_string_value(json_object_get(o, "value"));
    json_t *seq = json_object_get(o, "seq"), *version = json_object_get(o, "version"), *cr = json_object_get(o, "createdMs");
    json_t *up = json_object_get(o, "updatedMs"), *md = json_object_get(o, "metadata");
    char canon[SECRETS_NAME_MAX + 1];
    if (!id || !valid_id(id)) { ERR("secret %zu: field 'id' must be " SECRETS_ID_PREFIX " and 20 of a-z, 0-9", i); goto out; }
    if (!name || secrets_check_name(name, canon, m, sizeof m) != 0 || strcmp(canon, name) != 0) {
      ERR("secret %zu (%s): field 'name' is not a lower-cased secret name", i, id);
      goto out;
    }
    if (!json_is_integer(seq) || json_integer_value(seq) < 1 || (uint64_t)json_integer_value(seq) <= last_seq ||
        (uint64_t)json_integer_value(seq) >= *next_seq) {
      ERR("secret %zu (%s): field 'seq' must grow along the list and stay below nextSeq", i, id);
      goto out;
    }
    if (!json_is_integer(version) || json_integer_value(version) < 1 || json_integer_value(version) > ((json_int_t)1 << 53)) {
      ERR("secret %zu (%s): field 'version' must be an integer from 1 to 2^53", i, id);
      goto out;
    }
    if (!json_is_integer(cr) || !json_is_integer(up) || json_integer_value(cr) < 0 || json_integer_value(up) < json_integer_value(cr)) {
      ERR("secret %zu (%s): fields 'createdMs' and 'updatedMs' must be times, updated no earlier than created", i, id);
      goto out;
    }
    if (!json_is_object(md) || secrets_check_metadata(md, m, sizeof m) != 0) { ERR("secret %zu (%s): %s", i, id, json_is_object(md) ? m : "field 'metadata' must be an object"); goto out; }
    size_t vl = val ? json_string_length(json_object_get(o, "value")) : 0;
    if (!val || vl == 0 || vl > mb_b64_encoded_len(SEALED_MAX)) {
      ERR("secret %zu (%s): field 'value' must be the base64 of a sealed value of 1 to %u bytes", i, id, SECRETS_VALUE_MAX);
      goto out;
    }
    for (size_t j = 0; j < n; j++)
      if (!strcmp(all[j]->id, id) || !strcmp(all[j]->name, name)) { ERR("secret %zu (%s): its id or name is repeated", i, id); goto out; }
    entry *e = calloc(1, sizeof *e);
    if (!e || !(e->sealed = malloc(mb_b64_decoded_max(vl) + 1))) { free(e); ERR("out of memory"); goto out; }
    all[n++] = e;
    snprintf(e->id, sizeof e->id, "%s", id);
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->scope, sizeof e->scope, "%s", scope_of(md));
    e->seq = last_seq = (uint64_t)json_integer_value(seq);
    e->version = json_integer_value(version);
    e->created_ms = json_integer_value(cr);
    e->updated_ms = json_integer_value(up);
    e->metadata = json_deep_copy(md);
    if (!e->metadata) { ERR("out of memory"); goto out; }
    if (mb_b64_decode(val, vl, e->sealed, mb_b64_decoded_max(vl) + 1, &e->sealed_len, NULL) != 0 ||
        e->sealed_len <= SEAL_OVERHEAD || e->sealed_len > SEALED_MAX) {
      ERR("secret %zu (%s): field 'value' must be the base64 of a sealed value of 1 to %u bytes", i, id, SECRETS_VALUE_MAX);
      goto out;
    }
  }
  *out = all;
  *nout = n;
  all = NULL;
  rc = 0;
out:
  if (all) {
    for (size_t j = 0; j < n; j++) entry_free(all[j]);
    free(all);
  }
  json_decref(root);
  return rc;
}

int secrets_parse_catalogue(const char *text, size_t len, size_t *count, char *err, size_t errlen) {
  entry **all;
  size_t n;
  uint64_t next;
  unsigned char check[SEAL_OVERHEAD];
  bool has;
  if (parse(text, len, &all, &n, &next, check, &has, err, errlen) != 0) return -1;
  for (size_t i = 0; i < n; i++) entry_free(all[i]);
  free(all);
  *count = n;
  return 0;
}

/* The key file: 32 bytes, a regular file of sandboxd's user, private to it. 0 (*exists false
 * when there is none), or -1 with err. */
static int read_key(unsigned char key[KEY_LEN], bool *exists, char *err, size_t errlen) {
  *exists = false;
  int fd = open(g.keypath, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return 0;
  if (fd < 0) return ERR("%s: %s", g.keypath, errno == ELOOP ? "is a symbolic link (refused)" : strerror(errno));
  struct stat st;
  int rc = -1;
  if (fstat(fd, &st) != 0) ERR("%s: %s", g.keypath, strerror(errno));
  else if (!S_ISREG(st.st_mode)) ERR("%s: is not a regular file", g.keypath);
  else if (st.st_uid != geteuid())
    ERR("%s: is owned by uid %u, not by sandboxd's user (%u)", g.keypath, (unsigned)st.st_uid, (unsigned)geteuid());
  else if (st.st_mode & 077) ERR("%s: others may read or write it (mode %04o): chmod 600 %s", g.keypath, (unsigned)(st.st_mode & 07777), g.keypath);
  else if (st.st_size != KEY_LEN)
    ERR("%s: is %lld bytes, not a key (%d bytes): it is damaged; restore it, or remove it and secrets.json (their secrets are lost)",
        g.keypath, (long long)st.st_size, KEY_LEN);
  else {
    size_t off = 0;
    while (off < KEY_LEN) {
      ssize_t r = read(fd, key + off, KEY_LEN - off);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      off += (size_t)r;
    }
    if (off == KEY_LEN) { rc = 0; *exists = true; }
    else { OPENSSL_cleanse(key, KEY_LEN); ERR("%s: cannot be read whole", g.keypath); }
  }
  close(fd);
  return rc;
}

/* With wmu held: the store's first key, made and written (0600, exclusively), its check computed.
 * 0, or 500 with msg. */
static int make_key(char *msg, size_t msglen) {
  unsigned char k[KEY_LEN], check[SEAL_OVERHEAD];
  if (RAND_bytes(k, KEY_LEN) != 1 || seal(k, NULL, 0, KEYCHECK_AAD, check) != 0) return FAIL(500, "OpenSSL: no random bytes for a key");
  int fd = open(g.keypath, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  int rc = 0;
  if (fd < 0) rc = FAIL(500, "creating %s: %s", g.keypath, strerror(errno));
  else {
    ssize_t w = fchmod(fd, 0600) == 0 ? write(fd, k, KEY_LEN) : -1;
    if (w != KEY_LEN || fsync(fd) != 0) rc = FAIL(500, "writing %s: %s", g.keypath, w < 0 ? strerror(errno) : "short write");
    if (close(fd) != 0 && !rc) rc = FAIL(500, "writing %s: %s", g.keypath, strerror(errno));
    if (rc) unlink(g.keypath);
    else if (statefile_sync_dir(g.dir) != 0) rc = FAIL(500, "fsync %s: %s", g.dir, strerror(errno));
  }
  if (!rc) {
    pthread_mutex_lock(&g.mu);
    memcpy(g.key, k, KEY_LEN);
    memcpy(g.check, check, SEAL_OVERHEAD);
    g.have_key = g.have_check = true;
    pthread_mutex_unlock(&g.mu);
  }
  OPENSSL_cleanse(k, KEY_LEN);
  return rc;
}

static void close_locked(void) {
  for (size_t i = 0; i < g.n; i++) entry_free(g.all[i]);
  free(g.all);
  g.all = NULL;
  g.n = 0;
  g.next_seq = 1;
  OPENSSL_cleanse(g.key, KEY_LEN);
  g.have_key = g.have_check = false;
  g.open = false;
}

/* The catalogue's text, whole (at most SECRETS_FILE_MAX). 0 with *text (NULL when there is no
 * file), or -1 with err. */
static int read_catalogue(char **text, size_t *len, char *err, size_t errlen) {
  *text = NULL;
  *len = 0;
  int fd = open(g.path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0 && errno == ENOENT) return 0;
  if (fd < 0) return ERR("%s: %s", g.path, errno == ELOOP ? "is a symbolic link (refused)" : strerror(errno));
  struct stat st;
  int rc = -1;
  char *buf = NULL;
  if (fstat(fd, &st) != 0) ERR("%s: %s", g.path, strerror(errno));
  else if (!S_ISREG(st.st_mode)) ERR("%s: is not a regular file", g.path);
  else if (st.st_size > (off_t)SECRETS_FILE_MAX) ERR("%s: is larger than %u MiB", g.path, SECRETS_FILE_MAX >> 20);
  else if (!(buf = malloc((size_t)st.st_size + 1))) ERR("out of memory");
  else {
    size_t off = 0, want = (size_t)st.st_size;
    while (off < want) {
      ssize_t r = read(fd, buf + off, want - off);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      off += (size_t)r;
    }
    if (off == want) { buf[off] = '\0'; *text = buf; *len = off; buf = NULL; rc = 0; }
    else ERR("%s: cannot be read whole", g.path);
  }
  free(buf);
  close(fd);
  return rc;
}

int secrets_init(const char *state_dir, char *err, size_t errlen) {
  pthread_mutex_lock(&g.wmu);
  pthread_mutex_lock(&g.mu);
  close_locked();
  int rc = -1;
  char *text = NULL;
  size_t len = 0, n = 0;
  entry **all = NULL;
  uint64_t next_seq = 1;
  unsigned char key[KEY_LEN], check[SEAL_OVERHEAD];
  bool has_check = false, has_key = false;
  if (snprintf(g.dir, sizeof g.dir, "%s", state_dir) >= (int)sizeof g.dir ||
      snprintf(g.path, sizeof g.path, "%s/secrets.json", state_dir) >= (int)sizeof g.path ||
      snprintf(g.tmp, sizeof g.tmp, "%s.tmp", g.path) >= (int)sizeof g.tmp ||
      snprintf(g.keypath, sizeof g.keypath, "%s/secrets.key", state_dir) >= (int)sizeof g.keypath) {
    ERR("secrets: the state dir's path is too long");
    goto out;
  }
  (void)unlink(g.tmp);                   /* what a write a crash interrupted left (statefile.h) */
  if (read_catalogue(&text, &len, err, errlen) != 0) goto out;
  if (text && parse(text, len, &all, &n, &next_seq, check, &has_check, err, errlen) != 0) {
    char why[400];
    snprintf(why, sizeof why, "%s", err);
    ERR("%s: %s", g.path, why);
    goto out;
  }
  if (read_key(key, &has_key, err, errlen) != 0) goto out;
  if (!has_key && n) {
    ERR("%s holds %zu secret%s but %s is missing: their values cannot be opened. Restore %s, or remove %s (its secrets are lost)",
        g.path, n, n == 1 ? "" : "s", g.keypath, g.keypath, g.path);
    goto out;
  }
  if (has_key && has_check) {
    unsigned char none[1];
    if (unseal(key, check, SEAL_OVERHEAD, KEYCHECK_AAD, none) != 0) {
      ERR("%s is not the key of %s (the catalogue's key check does not open with it): restore the right key, or remove both files "
          "(their secrets are lost)", g.keypath, g.path);
      goto out;
    }
  }
  for (size_t i = 0; i < n; i++)
    if (!opens(key, all[i])) {
      ERR("%s: the value of secret '%s' (%s) does not open with %s: the file was altered", g.path, all[i]->name, all[i]->id, g.keypath);
      goto out;
    }
  if (has_key) {
    memcpy(g.key, key, KEY_LEN);
    (void)mlock(g.key, KEY_LEN);         /* best effort: kept out of swap */
    g.have_key = true;
    if (has_check) memcpy(g.check, check, SEAL_OVERHEAD);
    else if (seal(g.key, NULL, 0, KEYCHECK_AAD, g.check) != 0) { ERR("OpenSSL: cannot seal the key check"); goto out; }
    g.have_check = true;
  }
  g.all = all;
  g.n = n;
  g.next_seq = next_seq;
  all = NULL;
  g.open = true;
  rc = 0;
out:
  if (all) {
    for (size_t i = 0; i < n; i++) entry_free(all[i]);
    free(all);
  }
  OPENSSL_cleanse(key, KEY_LEN);
  free(text);
  if (rc) close_locked();
  pthread_mutex_unlock(&g.mu);
  pthread_mutex_unlock(&g.wmu);
  return rc;
}

void secrets_shutdown(void) {
  pthread_mutex_lock(&g.wmu);
  pthread_mutex_lock(&g.mu);
  close_locked();
  pthread_mutex_unlock(&g.mu);
  pthread_mutex_unlock(&g.wmu);
}

/* ---- lookups (with mu or wmu held) ---- */

static entry *find(const char *ref) {
  if (!ref) return NULL;
  if (!strncmp(ref, SECRETS_ID_PREFIX, strlen(SECRETS_ID_PREFIX))) {
    for (size_t i = 0; i < g.n; i++)
      if (!strcmp(g.all[i]->id, ref)) return g.all[i];
    return NULL;
  }
  char name[SECRETS_NAME_MAX + 1];
  size_t n = strlen(ref);
  if (n == 0 || n > SECRETS_NAME_MAX) return NULL;
  for (size_t i = 0; i <= n; i++) name[i] = ref[i] >= 'A' && ref[i] <= 'Z' ? (char)(ref[i] - 'A' + 'a') : ref[i];
  for (size_t i = 0; i < g.n; i++)
    if (!strcmp(g.all[i]->name, name)) return g.all[i];
  return NULL;
}

static int info_of(const entry *e, secret_info *out, char *msg, size_t msglen) {
  memset(out, 0, sizeof *out);
  snprintf(out->id, sizeof out->id, "%s", e->id);
  snprintf(out->name, sizeof out->name, "%s", e->name);
  snprintf(out->scope, sizeof out->scope, "%s", e->scope);
  out->version = e->version;
  out->created_ms = e->created_ms;
  out->updated_ms = e->updated_ms;
  out->seq = e->seq;
  out->metadata = json_deep_copy(e->metadata);
  return out->metadata ? 0 : FAIL(500, "out of memory");
}

void secret_info_free(secret_info *in) {
  json_decref(in->metadata);
  in->metadata = NULL;
}

char *secrets_value(const char *name, const char *sandbox_id, size_t *len) {
  size_t dummy;
  if (!len) len = &dummy;
  *len = 0;
  char *out = NULL;
  pthread_mutex_lock(&g.mu);
  entry *e = g.open && g.have_key ? find(name) : NULL;
  if (e && e->scope[0] && (!sandbox_id || strcmp(e->scope, sandbox_id) != 0)) e = NULL;
  if (e && (out = malloc(e->sealed_len - SEAL_OVERHEAD + 1))) {
    char aad[AAD_MAX];
    size_t n = e->sealed_len - SEAL_OVERHEAD;
    if (unseal(g.key, e->sealed, e->sealed_len, value_aad(e->id, e->version, aad), (unsigned char *)out) == 0) {
      out[n] = '\0';
      *len = n;
    } else {
      fprintf(stderr, "sandboxd: secrets: the value of secret '%s' (%s) does not open with the key in memory\n", e->name, e->id);
      free(out);
      out = NULL;
    }
  }
  pthread_mutex_unlock(&g.mu);
  return out;
}

void secrets_free_value(char *v, size_t len) {
  if (!v) return;
  OPENSSL_cleanse(v, len + 1);
  free(v);
}

/* ---- writers ---- */

static int not_open(char *msg, size_t msglen) { return FAIL(503, "the secret store is not open (see sandboxd's start-up messages)"); }

/* A sealed copy of value for secret id at version: 0, or 500 with msg. */
static int seal_value(entry *e, const char *value, size_t vlen, char *msg, size_t msglen) {
  char aad[AAD_MAX];
  e->sealed_len = vlen + SEAL_OVERHEAD;
  if (!(e->sealed = malloc(e->sealed_len))) return FAIL(500, "out of memory");
  pthread_mutex_lock(&g.mu);             /* the key */
  int rc = seal(g.key, (const unsigned char *)value, vlen, value_aad(e->id, e->version, aad), e->sealed);
  pthread_mutex_unlock(&g.mu);
  return rc ? FAIL(500, "OpenSSL: sealing the value failed") : 0;
}

/* g.all without the entries drop(e, cls) chooses, as a new array; NULL when out of memory. */
static entry **without(bool (*drop)(const entry *e, const void *cls), const void *cls, size_t *n) {
  entry **arr = malloc((g.n + 1) * sizeof *arr);
  *n = 0;
  if (!arr) return NULL;
  for (size_t i = 0; i < g.n; i++)
    if (!drop(g.all[i], cls)) arr[(*n)++] = g.all[i];
  return arr;
}

/* The table `arr` (n entries) put in force (commit takes it: *arr becomes NULL), then e's info for
 * the caller (e belongs to the table then: *e becomes NULL). */
static int commit_entry(entry ***arr, size_t n, uint64_t next_seq, entry **e, secret_info *out, char *msg, size_t msglen) {
  int rc = commit(*arr, n, next_seq, msg, msglen);
  if (rc) return rc;
  *arr = NULL;
  rc = info_of(*e, out, msg, msglen);
  *e = NULL;
  return rc;
}

int secrets_create(const char *name, const char *value, size_t vlen, json_t *metadata, secret_info *out, char *msg, size_t msglen) {
  char canon[SECRETS_NAME_MAX + 1];
  int rc;
  if ((rc = secrets_check_name(name, canon, msg, msglen)) || (rc = secrets_check_value(value, vlen, msg, msglen)) ||
      (rc = secrets_check_metadata(metadata, msg, msglen)))
    return rc;
  pthread_mutex_lock(&g.wmu);
  entry *e = NULL;
  entry **arr = NULL;
  if (!g.open) { rc = not_open(msg, msglen); goto out; }
  if (find(canon)) { rc = FAIL(409, "secret '%s' already exists", canon); goto out; }
  if (g.n >= SECRETS_MAX) { rc = FAIL(400, "sandboxd keeps at most %d secrets: delete some first", SECRETS_MAX); goto out; }
  if (!g.have_key && (rc = make_key(msg, msglen))) goto out;
  if (!(e = calloc(1, sizeof *e)) || !(e->metadata = metadata && !json_is_null(metadata) ? json_deep_copy(metadata) : json_object())) {
    rc = FAIL(500, "out of memory");
    goto out;
  }
  memcpy(e->id, SECRETS_ID_PREFIX, strlen(SECRETS_ID_PREFIX));
  do {
    if (ids_random(e->id + strlen(SECRETS_ID_PREFIX), SECRETS_ID_LEN - strlen(SECRETS_ID_PREFIX)) != 0) {
      rc = FAIL(500, "getrandom: %s", strerror(errno));
      goto out;
    }
  } while (find(e->id));
  snprintf(e->name, sizeof e->name, "%s", canon);
  snprintf(e->scope, sizeof e->scope, "%s", scope_of(e->metadata));
  e->seq = g.next_seq;
  e->version = 1;
  e->created_ms = e->updated_ms = wall_ms();
  if ((rc = seal_value(e, value, vlen, msg, msglen))) goto out;
  if (!(arr = malloc((g.n + 1) * sizeof *arr))) { rc = FAIL(500, "out of memory"); goto out; }
  if (g.n) memcpy(arr, g.all, g.n * sizeof *arr);
  arr[g.n] = e;
  rc = commit_entry(&arr, g.n + 1, e->seq + 1, &e, out, msg, msglen);
out:
  free(arr);
  entry_free(e);
  pthread_mutex_unlock(&g.wmu);
  return rc;
}

static bool is_entry(const entry *e, const void *cls) { return e == cls; }

int secrets_update(const char *ref, const char *value, size_t vlen, json_t *metadata, secret_info *out, char *msg, size_t msglen) {
  int rc;
  bool keep = !metadata || json_is_null(metadata);
  if ((rc = secrets_check_value(value, vlen, msg, msglen)) || (!keep && (rc = secrets_check_metadata(metadata, msg, msglen)))) return rc;
  pthread_mutex_lock(&g.wmu);
  entry *e = NULL, *old;
  entry **arr = NULL;
  size_t n;
  if (!g.open) { rc = not_open(msg, msglen); goto out; }
  if (!(old = find(ref))) { rc = FAIL(404, "secret '%.200s' not found", ref); goto out; }
  if (!keep && strcmp(scope_of(metadata), old->scope) != 0) {
    rc = old->scope[0] ? FAIL(400, "field 'metadata." SECRETS_SCOPE_KEY "': secret '%s' is scoped to sandbox '%s' for its whole life "
                              "(an update keeps the key as it is)", old->name, old->scope)
                       : FAIL(400, "field 'metadata." SECRETS_SCOPE_KEY "': secret '%s' is usable by every sandbox; a scope is given "
                              "only when a secret is created", old->name);
    goto out;
  }
  if (!(e = calloc(1, sizeof *e)) || !(e->metadata = json_deep_copy(keep ? old->metadata : metadata))) {
    rc = FAIL(500, "out of memory");
    goto out;
  }
  memcpy(e->id, old->id, sizeof e->id);
  memcpy(e->name, old->name, sizeof e->name);
  memcpy(e->scope, old->scope, sizeof e->scope);
  e->seq = old->seq;
  e->version = old->version + 1;
  e->created_ms = old->created_ms;
  e->updated_ms = wall_ms();
  if (e->updated_ms < e->created_ms) e->updated_ms = e->created_ms;   /* the clock went back */
  if ((rc = seal_value(e, value, vlen, msg, msglen))) goto out;
  if (!(arr = without(is_entry, NULL, &n))) { rc = FAIL(500, "out of memory"); goto out; }   /* a copy of the table */
  for (size_t i = 0; i < n; i++)
    if (arr[i] == old) arr[i] = e;
  rc = commit_entry(&arr, n, g.next_seq, &e, out, msg, msglen);
out:
  free(arr);
  entry_free(e);
  pthread_mutex_unlock(&g.wmu);
  return rc;
}

int secrets_delete(const char *ref, char *msg, size_t msglen) {
  pthread_mutex_lock(&g.wmu);
  int rc;
  entry *e = g.open ? find(ref) : NULL;
  entry **arr = NULL;
  size_t n;
  if (!g.open) rc = not_open(msg, msglen);
  else if (!e) rc = FAIL(404, "secret '%.200s' not found", ref);
  else if (!(arr = without(is_entry, e, &n))) rc = FAIL(500, "out of memory");
  else if ((rc = commit(arr, n, g.next_seq, msg, msglen))) free(arr);
  pthread_mutex_unlock(&g.wmu);
  return rc;
}

int secrets_get(const char *ref, secret_info *out, char *msg, size_t msglen) {
  pthread_mutex_lock(&g.mu);
  entry *e = g.open ? find(ref) : NULL;
  int rc = !g.open ? not_open(msg, msglen) : !e ? FAIL(404, "secret '%.200s' not found", ref) : info_of(e, out, msg, msglen);
  pthread_mutex_unlock(&g.mu);
  return rc;
}

secret_info *secrets_list(uint64_t before, size_t limit, size_t *n, uint64_t *next) {
  *n = 0;
  *next = 0;
  if (limit == 0) limit = SIZE_MAX;
  pthread_mutex_lock(&g.mu);
  secret_info *out = calloc(limit && limit < g.n ? limit : g.n + 1, sizeof *out);
  for (size_t i = g.n; out && i-- > 0;) {          /* newest first */
    entry *e = g.all[i];
    if (before && e->seq >= before) continue;
    if (*n == limit) { *next = out[*n - 1].seq; break; }
    if (info_of(e, &out[*n], NULL, 0) != 0) { secrets_list_free(out, *n); out = NULL; break; }
    (*n)++;
  }
  pthread_mutex_unlock(&g.mu);
  if (!out) *n = 0;
  return out;
}

void secrets_list_free(secret_info *v, size_t n) {
  for (size_t i = 0; v && i < n; i++) secret_info_free(&v[i]);
  free(v);
}

static bool scoped_to(const entry *e, const void *cls) { return e->scope[0] && !strcmp(e->scope, cls); }

void secrets_sandbox_gone(const char *sandbox_id) {
  if (!sandbox_id) return;
  pthread_mutex_lock(&g.wmu);
  size_t n;
  entry **arr = g.open ? without(scoped_to, sandbox_id, &n) : NULL;
  char msg[300];
  if (arr && n == g.n) free(arr);                   /* none of its own */
  else if (!arr && g.open) fprintf(stderr, "sandboxd: secrets: cannot delete the secrets of sandbox %s: out of memory\n", sandbox_id);
  else if (arr && commit(arr, n, g.next_seq, msg, sizeof msg) != 0) {
    fprintf(stderr, "sandboxd: secrets: cannot delete the secrets of sandbox %s (they go at the next start): %s\n", sandbox_id, msg);
    free(arr);
  }
  pthread_mutex_unlock(&g.wmu);
}

static bool orphan(const entry *e, const void *cls) {
  bool (*alive)(const char *) = *(bool (*const *)(const char *))cls;
  return e->scope[0] && !alive(e->scope);
}

size_t secrets_sweep_scoped(bool (*alive)(const char *sandbox_id)) {
  pthread_mutex_lock(&g.wmu);
  size_t n, before = g.n, gone = 0;
  entry **arr = g.open ? without(orphan, &alive, &n) : NULL;
  char msg[300];
  if (arr && n == before) free(arr);
  else if (arr && commit(arr, n, g.next_seq, msg, sizeof msg) != 0) {
    fprintf(stderr, "sandboxd: secrets: cannot delete the secrets of sandboxes that are gone: %s\n", msg);
    free(arr);
  } else if (arr) {
    gone = before - n;
  }
  pthread_mutex_unlock(&g.wmu);
  return gone;
}
