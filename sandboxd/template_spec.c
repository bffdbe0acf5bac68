/* template_spec.c — see template_spec.h. */
#include "template_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "users.h"

/* seterr (errbuf.h) for the functions that answer false. */
#define refuse(...) (seterr(__VA_ARGS__), false)

bool ts_valid_hash(const char *h) {
  if (!h || strlen(h) != TS_HASH_LEN) return false;
  for (const char *p = h; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

const char *ts_kind_name(ts_kind k) {
  switch (k) {
    case TS_RUN: return "RUN";
    case TS_COPY: return "COPY";
    case TS_ENV: return "ENV";
    case TS_WORKDIR: return "WORKDIR";
    case TS_USER: return "USER";
  }
  return "?";
}

void ts_describe(const ts_step *s, char *out, size_t cap) {
  size_t o = (size_t)snprintf(out, cap, "%s", ts_kind_name(s->kind));
  for (size_t i = 0; i < s->nargs && o < cap; i++) {
    if (!s->args[i][0]) continue;
    o += (size_t)snprintf(out + o, cap - o, " %s", s->args[i]);
  }
  if (cap > 4 && o >= cap) {   /* cut on a character's start (the log is JSON: UTF-8 only) */
    size_t p = cap - 4;
    while (p > 0 && ((unsigned char)out[p] & 0xC0) == 0x80) p--;   /* out[p] continues a character */
    memcpy(out + p, "...", 4);
  }
}

static bool env_name(const char *k) {
  if (!((*k >= 'A' && *k <= 'Z') || (*k >= 'a' && *k <= 'z') || *k == '_')) return false;
  for (const char *p = k + 1; *p; p++)
    if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_')) return false;
  return true;
}

/* "name" or "name:group", each a user the sandbox has. */
static bool valid_user(const char *u) {
  uid_t uid;
  gid_t gid;
  const char *home;
  char name[32];
  const char *colon = strchr(u, ':');
  size_t n = colon ? (size_t)(colon - u) : strlen(u);
  if (n == 0 || n >= sizeof name) return false;
  memcpy(name, u, n);
  name[n] = '\0';
  if (users_lookup(name, &uid, &gid, &home) != 0) return false;
  return !colon || users_lookup(colon + 1, &uid, &gid, &home) == 0;
}

/* A COPY source as the SDK checks it: relative, never above the build context ("a/../b" is). */
static bool context_path(const char *p) {
  if (p[0] == '/') return false;
  long depth = 0;
  for (const char *c = p; *c;) {
    size_t n = strcspn(c, "/");
    if (n == 2 && c[0] == '.' && c[1] == '.') {
      if (--depth < 0) return false;
    } else if (n && !(n == 1 && c[0] == '.')) depth++;
    c += n;
    while (*c == '/') c++;
  }
  return true;
}

/* "0644", "755": 1..4 octal digits. */
static bool parse_mode(const char *s, unsigned *mode) {
  size_t n = strlen(s);
  if (n == 0 || n > 4) return false;
  unsigned v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '7') return false;
    v = v * 8 + (unsigned)(s[i] - '0');
  }
  *mode = v;
  return true;
}

/* An optional string field: NULL when absent or null. -1 when it is another type or holds a NUL
 * byte (read as a C string it would mean less than was sent). */
static int opt_string(json_t *o, const char *field, const char **out, const char *where, char *err, size_t errlen) {
  json_t *v = json_object_get(o, field);
  *out = NULL;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_string(v)) return seterr(err, errlen, "%s'%s' must be a string", where, field);
  if (strlen(json_string_value(v)) != json_string_length(v)) return seterr(err, errlen, "%s'%s' holds a NUL byte", where, field);
  *out = json_string_value(v);
  return 0;
}

static int opt_bool(json_t *o, const char *field, bool *out, const char *where, char *err, size_t errlen) {
  json_t *v = json_object_get(o, field);
  *out = false;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_boolean(v)) return seterr(err, errlen, "%s'%s' must be a boolean", where, field);
  *out = json_is_true(v);
  return 0;
}

static int only_fields(json_t *o, const char *const *allowed, const char *where, char *err, size_t errlen) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    const char *const *a = allowed;
    while (*a && strcmp(*a, k) != 0) a++;
    if (!*a) {
      size_t used = 0;
      char list[256] = "";
      for (a = allowed; *a && used < sizeof list; a++) used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", a == allowed ? "" : ", ", *a);
      return seterr(err, errlen, "%sfield '%.*s' is not supported by sandboxd (%s are)", where, err_upto(k, 100), k, list);
    }
  }
  return 0;
}

/* [a-z0-9]+ runs joined by one '.', one or two '_', or any number of '-' (Docker's path component). */
static bool ref_component(const char *p, size_t n) {
  size_t i = 0;
  for (;;) {
    size_t run = 0;
    while (i < n && ((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9'))) { i++; run++; }
    if (run == 0) return false;
    if (i == n) return true;
    size_t sep = 0;
    char c = p[i];
    while (i < n && p[i] == c && (c == '.' || c == '_' || c == '-')) { i++; sep++; }
    if (sep == 0 || (c == '.' && sep > 1) || (c == '_' && sep > 2) || i == n) return false;
  }
}

/* A registry host: DNS labels ([A-Za-z0-9-], not starting or ending in '-') joined by '.', an
 * optional :PORT (1..65535). */
static bool ref_host(const char *p, size_t n) {
  const char *colon = memchr(p, ':', n);
  size_t hn = colon ? (size_t)(colon - p) : n;
  if (hn == 0 || hn > 253) return false;
  size_t label = 0;
  for (size_t i = 0; i < hn; i++) {
    char c = p[i];
    if (c == '.') {
      if (label == 0 || p[i - 1] == '-') return false;
      label = 0;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || (c == '-' && label > 0)) {
      if (++label > 63) return false;
    } else {
      return false;
    }
  }
  if (label == 0 || p[hn - 1] == '-') return false;
  if (!colon) return true;
  size_t pn = n - hn - 1;
  if (pn == 0 || pn > 5) return false;
  unsigned long port = 0;
  for (size_t i = hn + 1; i < n; i++) {
    if (p[i] < '0' || p[i] > '9') return false;
    port = port * 10 + (unsigned long)(p[i] - '0');
  }
  return port >= 1 && port <= 65535 && p[hn + 1] != '0';
}

bool ts_valid_image_ref(const char *ref, char *err, size_t errlen) {
  size_t n = strlen(ref);
  if (n == 0) return refuse(err, errlen, "it is empty");
  if (n > TS_MAX_IMAGE_REF) return refuse(err, errlen, "longer than %d bytes", TS_MAX_IMAGE_REF);
  const char *at = strchr(ref, '@');
  size_t namelen = at ? (size_t)(at - ref) : n;
  if (at) {
    const char *d = at + 1;
    if (strncmp(d, "sha256:", 7) != 0 || !ts_valid_hash(d + 7))
      return refuse(err, errlen, "a digest is @sha256: and 64 lower-case hex digits");
  }
  /* the tag: after the last ':' that follows the last '/' */
  const char *slash = NULL;
  for (const char *p = ref; p < ref + namelen; p++) if (*p == '/') slash = p;
  const char *colon = NULL;
  for (const char *p = slash ? slash : ref; p < ref + namelen; p++) if (*p == ':') colon = p;
  size_t repolen = colon ? (size_t)(colon - ref) : namelen;
  if (colon) {
    size_t tn = namelen - repolen - 1;
    const char *t = colon + 1;
    if (tn == 0 || tn > 128) return refuse(err, errlen, "a tag is 1 to 128 characters");
    for (size_t i = 0; i < tn; i++) {
      char c = t[i];
      bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || (i > 0 && (c == '.' || c == '-'));
      if (!ok) return refuse(err, errlen, "the tag may hold letters, digits, '_', '.' and '-' (not first)");
    }
  }
  /* the first component is a host when it has a '.' or a ':', or is localhost */
  const char *first_end = memchr(ref, '/', repolen);
  size_t off = 0;
  if (first_end) {
    size_t fn = (size_t)(first_end - ref);
    bool host = memchr(ref, '.', fn) || memchr(ref, ':', fn) || (fn == 9 && !strncmp(ref, "localhost", 9));
    if (host) {
      if (!ref_host(ref, fn)) return refuse(err, errlen, "'%.*s' is not a registry host (a DNS name or IPv4 address, an optional :PORT)", err_upto(ref, fn > 80 ? 80 : fn), ref);
      off = fn + 1;
    }
  }
  if (off >= repolen) return refuse(err, errlen, "the image's name is missing");
  for (size_t i = off; i < repolen;) {
    const char *e = memchr(ref + i, '/', repolen - i);
    size_t cn = e ? (size_t)(e - (ref + i)) : repolen - i;
    if (!ref_component(ref + i, cn))
      return refuse(err, errlen, "name components are lower-case letters and digits, joined by '.', '_', '__' or '-'");
    i += cn + 1;
    if (e && i >= repolen) return refuse(err, errlen, "the name ends in '/'");
  }
  return true;
}

/* fromImageRegistry: {type: "registry", username, password}; AWS's and GCP's kinds are refused by name. */
static int parse_registry(json_t *reg, ts_spec *out, char *err, size_t errlen) {
  const char *where = "fromImageRegistry.";
  if (!json_is_object(reg)) return seterr(err, errlen, "field 'fromImageRegistry' must be an object");
  const char *type;
  if (opt_string(reg, "type", &type, where, err, errlen) != 0) return -1;
  if (!type) return seterr(err, errlen, "fromImageRegistry.type is required ('registry': a user name and password)");
  if (!strcmp(type, "aws") || !strcmp(type, "gcp"))
    return seterr(err, errlen, "fromImageRegistry.type '%s' (%s) is not supported by sandboxd: give the registry's user name and "
                "password as type 'registry' (fromImage(image, {username, password}))", type, type[0] == 'a' ? "AWS ECR" : "GCP Artifact Registry");
  if (strcmp(type, "registry") != 0)
    return seterr(err, errlen, "fromImageRegistry.type '%.*s' is not one sandboxd knows ('registry' is)", err_upto(type, 40), type);
  static const char *const fields[] = {"type", "username", "password", NULL};
  if (only_fields(reg, fields, where, err, errlen) != 0) return -1;
  const char *u, *p;
  if (opt_string(reg, "username", &u, where, err, errlen) != 0 || opt_string(reg, "password", &p, where, err, errlen) != 0) return -1;
  if (!u || !u[0] || !p || !p[0]) return seterr(err, errlen, "fromImageRegistry: both 'username' and 'password' are required");
  json_t *uj = json_object_get(reg, "username"), *pj = json_object_get(reg, "password");
  if (json_string_length(uj) > TS_MAX_CRED_BYTES || json_string_length(pj) > TS_MAX_CRED_BYTES)
    return seterr(err, errlen, "fromImageRegistry: 'username' and 'password' are at most %d bytes", TS_MAX_CRED_BYTES);
  if (strchr(u, ':')) return seterr(err, errlen, "fromImageRegistry.username may not hold ':' (HTTP Basic authentication joins it to the password with one)");
  out->reg_user = u;
  out->reg_pass = p;
  return 0;
}

static int parse_step(json_t *j, size_t i, ts_step *s, const char **argv, char *err, size_t errlen) {
  char where[48];
  snprintf(where, sizeof where, "steps[%zu].", i);
  if (!json_is_object(j)) return seterr(err, errlen, "steps[%zu] must be an object", i);
  /* forceUpload, resolveSymlinks and gzip: what the SDK's copy() sends along (its client-side options) */
  static const char *const fields[] = {"type", "args", "force", "filesHash", "forceUpload", "resolveSymlinks", "gzip", NULL};
  if (only_fields(j, fields, where, err, errlen) != 0) return -1;
  const char *type, *hash;
  bool unused;
  if (opt_string(j, "type", &type, where, err, errlen) != 0 || opt_string(j, "filesHash", &hash, where, err, errlen) != 0 ||
      opt_bool(j, "force", &s->force, where, err, errlen) != 0 || opt_bool(j, "forceUpload", &unused, where, err, errlen) != 0 ||
      opt_bool(j, "resolveSymlinks", &unused, where, err, errlen) != 0 || opt_bool(j, "gzip", &unused, where, err, errlen) != 0)
    return -1;
  if (!type) return seterr(err, errlen, "%stype is required", where);
  if (!strcmp(type, "RUN")) s->kind = TS_RUN;
  else if (!strcmp(type, "COPY")) s->kind = TS_COPY;
  else if (!strcmp(type, "ENV")) s->kind = TS_ENV;
  else if (!strcmp(type, "WORKDIR")) s->kind = TS_WORKDIR;
  else if (!strcmp(type, "USER")) s->kind = TS_USER;
  else return seterr(err, errlen, "%stype '%.*s' is not a step sandboxd runs (RUN, COPY, ENV, WORKDIR, USER are)", where, err_upto(type, 40), type);
  json_t *args = json_object_get(j, "args");
  if (args && !json_is_null(args) && !json_is_array(args)) return seterr(err, errlen, "%sargs must be an array of strings", where);
  size_t n = args ? json_array_size(args) : 0;
  if (n > TS_MAX_ARGS) return seterr(err, errlen, "%sargs: more than %d", where, TS_MAX_ARGS);
  for (size_t a = 0; a < n; a++) {
    json_t *v = json_array_get(args, a);
    if (!json_is_string(v)) return seterr(err, errlen, "%sargs[%zu] must be a string", where, a);
    if (json_string_length(v) > TS_MAX_ARG_BYTES) return seterr(err, errlen, "%sargs[%zu]: more than %u bytes", where, a, TS_MAX_ARG_BYTES);
    if (strlen(json_string_value(v)) != json_string_length(v)) return seterr(err, errlen, "%sargs[%zu] holds a NUL byte", where, a);
    argv[a] = json_string_value(v);
  }
  s->args = argv;
  s->nargs = n;
  if (hash && s->kind != TS_COPY) return seterr(err, errlen, "%sfilesHash: only COPY steps have one", where);
  switch (s->kind) {
    case TS_RUN:
      if (n < 1 || n > 2 || !argv[0][0]) return seterr(err, errlen, "%sargs: RUN takes [command, user?]", where);
      s->cmd = argv[0];
      s->user = n > 1 && argv[1][0] ? argv[1] : NULL;
      break;
    case TS_COPY:
      if (n < 2 || n > 4 || !argv[0][0] || !argv[1][0]) return seterr(err, errlen, "%sargs: COPY takes [src, dest, user?, mode?]", where);
      if (!context_path(argv[0]))
        return seterr(err, errlen, "%sargs[0]: COPY source '%.*s' is not inside the build context (a relative path that stays in it)", where,
                    err_upto(argv[0], 100), argv[0]);
      s->src = argv[0];
      s->dest = argv[1];
      s->user = n > 2 && argv[2][0] ? argv[2] : NULL;
      if (n > 3 && argv[3][0]) {
        if (!parse_mode(argv[3], &s->mode)) return seterr(err, errlen, "%sargs[3]: mode '%.*s' is not an octal mode", where, err_upto(argv[3], 20), argv[3]);
        s->has_mode = true;
      }
      if (!ts_valid_hash(hash)) return seterr(err, errlen, "%sfilesHash: COPY needs the sha256 (64 lower-case hex) its upload is stored under", where);
      s->hash = hash;
      break;
    case TS_ENV:
      if (n < 2 || n % 2) return seterr(err, errlen, "%sargs: ENV takes [name, value, ...] pairs", where);
      for (size_t a = 0; a < n; a += 2)
        if (!env_name(argv[a])) return seterr(err, errlen, "%sargs[%zu]: '%.*s' is not an environment variable name", where, a, err_upto(argv[a], 60), argv[a]);
      break;
    case TS_WORKDIR:
      if (n != 1 || !argv[0][0]) return seterr(err, errlen, "%sargs: WORKDIR takes [path]", where);
      break;
    case TS_USER:
      if (n != 1 || !argv[0][0]) return seterr(err, errlen, "%sargs: USER takes [user]", where);
      s->user = argv[0];
      break;
  }
  if (s->user && !valid_user(s->user)) return seterr(err, errlen, "%sargs: user '%.*s' is not one the sandbox has (root, user)", where, err_upto(s->user, 40), s->user);
  return 0;
}

int ts_parse(json_t *body, ts_spec *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (!json_is_object(body)) return seterr(err, errlen, "the body must be a JSON object");
  static const char *const fields[] = {"fromTemplate", "fromImage", "fromImageRegistry", "steps", "force", "startCmd", "readyCmd", NULL};
  if (only_fields(body, fields, "", err, errlen) != 0) return -1;
  const char *tpl, *img;
  if (opt_string(body, "fromTemplate", &tpl, "", err, errlen) != 0 || opt_string(body, "fromImage", &img, "", err, errlen) != 0 ||
      opt_string(body, "startCmd", &out->start_cmd, "", err, errlen) != 0 ||
      opt_string(body, "readyCmd", &out->ready_cmd, "", err, errlen) != 0 || opt_bool(body, "force", &out->force, "", err, errlen) != 0)
    return -1;
  if (tpl && !tpl[0]) tpl = NULL;
  if (img && !img[0]) img = NULL;
  if (!tpl == !img) return seterr(err, errlen, "exactly one of 'fromTemplate' and 'fromImage' must be given and non-empty");
  json_t *reg = json_object_get(body, "fromImageRegistry");
  if (reg && json_is_null(reg)) reg = NULL;
  if (img) {
    size_t bl = strlen(TS_BASE_IMAGE);
    char why[160];
    if (!strncmp(img, TS_BASE_IMAGE, bl) && (!img[bl] || img[bl] == ':')) {
      if (reg) return seterr(err, errlen, "field 'fromImageRegistry': '%.*s' is sandboxd's base template, pulled from no registry", err_upto(img, 100), img);
      tpl = "base";
    } else if (!ts_valid_image_ref(img, why, sizeof why)) {
      return seterr(err, errlen, "field 'fromImage': '%.*s' is not an image reference: %s", err_upto(img, 100), img, why);
    } else {
      out->from_image = img;
    }
  } else if (reg) {
    return seterr(err, errlen, "field 'fromImageRegistry': registry credentials go with 'fromImage', not 'fromTemplate'");
  }
  if (reg && parse_registry(reg, out, err, errlen) != 0) return -1;
  out->from_template = tpl;
  if (out->start_cmd && !out->start_cmd[0]) out->start_cmd = NULL;
  if (out->ready_cmd && !out->ready_cmd[0]) out->ready_cmd = NULL;
  json_t *steps = json_object_get(body, "steps");
  if (steps && !json_is_null(steps) && !json_is_array(steps)) return seterr(err, errlen, "field 'steps' must be an array");
  size_t n = steps ? json_array_size(steps) : 0, nargs = 0;
  if (n > TS_MAX_STEPS) return seterr(err, errlen, "field 'steps': %zu steps, at most %d", n, TS_MAX_STEPS);
  for (size_t i = 0; i < n; i++) {
    json_t *a = json_object_get(json_array_get(steps, i), "args");
    if (json_is_array(a)) nargs += json_array_size(a) > TS_MAX_ARGS ? TS_MAX_ARGS + 1 : json_array_size(a);
  }
  out->steps = calloc(n ? n : 1, sizeof *out->steps);
  out->argv = calloc(nargs ? nargs : 1, sizeof *out->argv);
  if (!out->steps || !out->argv) { ts_free(out); return seterr(err, errlen, "out of memory"); }
  size_t used = 0;
  for (size_t i = 0; i < n; i++) {
    if (parse_step(json_array_get(steps, i), i, &out->steps[i], out->argv + used, err, errlen) != 0) { ts_free(out); return -1; }
    used += out->steps[i].nargs;
  }
  out->nsteps = n;
  out->body = json_incref(body);
  return 0;
}

void ts_free(ts_spec *s) {
  free(s->steps);
  free(s->argv);
  json_decref(s->body);
  memset(s, 0, sizeof *s);
}
