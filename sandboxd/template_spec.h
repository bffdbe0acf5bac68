/* template_spec.h — a template build as E2B's SDK sends it (POST /v2/templates/{id}/builds/{id},
 * TemplateBuildStartV2): the base (fromTemplate; fromImage naming E2B's base image, or any other
 * image reference with fromImageRegistry's credentials of type `registry`), the steps
 * (RUN, COPY, ENV, WORKDIR, USER, each with its args), the start and ready commands, `force`.
 * Parsed strictly: an unknown field, a wrong type, a string holding a NUL byte or a step sandboxd
 * cannot run is refused with a message naming it (`steps[3].args`); a message quotes what was sent
 * cut between characters (it goes into a JSON reply). Pure: jansson, libc and errbuf, no I/O (a C unit
 * test drives it; fuzz/fuzz_sbx_template_request.c checks its claims). */
#ifndef SANDBOXD_TEMPLATE_SPEC_H
#define SANDBOXD_TEMPLATE_SPEC_H
#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#define TS_MAX_STEPS 256               /* steps in one build */
#define TS_MAX_ARGS 1024               /* args of one step (ENV holds pairs) */
#define TS_MAX_ARG_BYTES (64u << 10)   /* one arg (a RUN's command) */
#define TS_HASH_LEN 64                 /* a COPY's filesHash: sha256, lower-case hex */
#define TS_BASE_IMAGE "e2bdev/base"    /* E2B's base image (the SDK's default and fromBaseImage()) */
#define TS_MAX_IMAGE_REF 255            /* an image reference, as Docker bounds a name */
#define TS_MAX_CRED_BYTES 4096          /* a registry user name or password */

typedef enum { TS_RUN, TS_COPY, TS_ENV, TS_WORKDIR, TS_USER } ts_kind;

/* One step; its strings point into the parsed body (alive as long as the spec). */
typedef struct {
  ts_kind kind;
  const char *const *args;             /* nargs strings */
  size_t nargs;
  /* RUN: args[0] the command, user (NULL: the build's current user).
   * COPY: src, dest, user (NULL: the current user), mode (has_mode), hash. */
  const char *cmd, *src, *dest, *user, *hash;
  unsigned mode;
  bool has_mode, force;
} ts_step;

typedef struct {
  json_t *body;                        /* a reference: every string points into it */
  const char *from_template;           /* "base" when fromImage names E2B's base image; NULL with from_image */
  const char *from_image;              /* an image to pull (ts_valid_image_ref), else NULL */
  const char *reg_user, *reg_pass;     /* fromImageRegistry {type: "registry"}: both, or both NULL */
  const char *start_cmd, *ready_cmd;   /* NULL when absent */
  bool force;
  ts_step *steps;
  const char **argv;                   /* every step's args, one array */
  size_t nsteps;
} ts_spec;

/* 0 and *out (ts_free it), or -1 with err naming the field and what is wrong. */
int ts_parse(json_t *body, ts_spec *out, char *err, size_t errlen);
void ts_free(ts_spec *s);
/* An image reference as Docker writes one: [HOST[:PORT]/]NAME[:TAG][@sha256:HEX], NAME lower-case
 * path components ([a-z0-9] runs joined by '.', '_', '__' or '-'), HOST a DNS name, `localhost` or
 * an IPv4 address. true, or false with err saying what is wrong. */
bool ts_valid_image_ref(const char *ref, char *err, size_t errlen);
/* TS_HASH_LEN characters of [0-9a-f]. */
bool ts_valid_hash(const char *h);
/* A step as the build log names it: `RUN echo hi` (cut to cap). */
void ts_describe(const ts_step *s, char *out, size_t cap);
const char *ts_kind_name(ts_kind k);
#endif
