/* template_build.h — template builds (E2B's Template builder): requests, the COPY files they
 * upload, the build itself and what a built template adds to the sandboxes made from it.
 *
 * A build runs on a thread of its own. Each step that changes files (RUN, COPY, WORKDIR) runs in a
 * build sandbox of its own on the layer the previous step left (as a Dockerfile's RUN runs in a
 * new container): through its process table as E2B runs them (RUN with bash as the step's user,
 * in the current workdir, with the envs set so far; COPY by extracting the uploaded archive inside
 * the sandbox, then chown/chmod; ENV, WORKDIR, USER change what follows), output into the build's
 * log; then the sandbox's upper layer is captured as the step's layer and recorded in the build
 * cache under the step's key (template_key.h, template_cache.h). A build first reuses the longest
 * prefix of its steps whose keys are cached (logged "CACHED [n/m] ..."), unless forced (`force`,
 * a step's `force`: from that step on). The last layer (after the start command, when there is
 * one) is recorded in the snapshot catalogue under the template's name as a build with the tags
 * requested (Sandbox.create('<name>[:tag]'), GET /templates); past TB_MAX_CHAIN layers the build's layers are merged into one. The
 * template's envs, workdir, limits and start command are kept in <state>/template-defaults.json,
 * and applied to every sandbox created from it (tb_defaults, tb_run_start_cmd). No HTTP here: template_api.c serves the routes.
 *
 * Bounded: TB_MAX_BUILDS builds remembered (finished ones forgotten oldest first), TB_MAX_RUNNING
 * at once, TB_MAX_LOG entries a build (messages cut to TB_MAX_LINE bytes), TB_MAX_FILES uploads
 * per template of at most the upload cap each, a step's processes killed after TB_STEP_TIMEOUT_MS. */
#ifndef SANDBOXD_TEMPLATE_BUILD_H
#define SANDBOXD_TEMPLATE_BUILD_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <jansson.h>

#include "snapshots.h"
#include "template_spec.h"

#define TB_MAX_BUILDS 256
#define TB_MAX_RUNNING 4
#define TB_MAX_LOG 10000
#define TB_MAX_LINE 4096
#define TB_MAX_FILES 256
#define TB_STEP_TIMEOUT_MS (60LL * 60 * 1000)
#define TB_TOKEN_LEN 40
#define TB_ID_LEN 20
#define TB_MAX_ENVS 256                 /* envs a template keeps */
#define TB_READY_TIMEOUT_MS (300LL * 1000)   /* a start command's ready command: how long it may fail (default) */
#define TB_MAX_CHAIN 16                 /* layers a built template stacks (merged past it: ly_flatten) */

/* Reads <state>/template-defaults.json; makes <state>/template-files. 0, or -1 with err. */
int tb_init(const char *state_dir, char *err, size_t errlen);
/* How long a start command's ready command may fail (and each attempt may take) before the
 * build fails or create answers anyway: ms in [1000, 3600000]; TB_READY_TIMEOUT_MS until set
 * (sandboxd --template-ready-timeout). Call before serving. */
void tb_set_ready_timeout(int64_t ms);
/* Stops running builds (their sandboxes killed) and waits for them; forgets everything in memory.
 * Call before the registry shuts down. */
void tb_shutdown(void);

/* POST /v3/templates: a build of template `name` (canonical, snapshots.h) that takes `tags`
 * (canonical, at most SNAP_TAGS_PER_REQUEST; 0: "default") once it is done, moving them from the
 * template's other builds. The template keeps its id when it exists (a snapshot or an earlier
 * build of the name). 0 and the ids, or an HTTP status with err (409: a build of the name is
 * running; 429: too many builds; 500). cpu_count, memory_mb: the limits of the build sandbox and
 * of the template's sandboxes (0: sandboxd's). */
int tb_request(const char *name, const char (*tags)[SNAP_TAG_MAX + 1], size_t ntags, int cpu_count, long memory_mb, char *template_id,
               char *build_id, char *err, size_t errlen);

/* The COPY handshake. `present`: the template has the upload with that hash; else *token is a
 * one-time credential for tb_upload_* of it. 0, or an HTTP status with err (404 unknown template). */
int tb_file_link(const char *template_id, const char *hash, bool *present, char *token, size_t tokcap, char *err, size_t errlen);
/* An upload of (template_id, hash) with its token: begin (0, or a status with err: 401 token,
 * 404), write pieces, finish (renamed into place once whole; 0 or a status) or abort. */
typedef struct tb_upload tb_upload;
tb_upload *tb_upload_begin(const char *template_id, const char *hash, const char *token, int *status, char *err, size_t errlen);
int tb_upload_write(tb_upload *u, const void *data, size_t len, char *err, size_t errlen);
int tb_upload_finish(tb_upload *u, char *err, size_t errlen);
void tb_upload_abort(tb_upload *u);

/* Starts build (template_id, build_id) with spec (taken over: freed by the build). 0, or an
 * HTTP status with err (404 unknown, 409 started already, 400 a COPY without its upload). */
int tb_start(const char *template_id, const char *build_id, ts_spec *spec, char *err, size_t errlen);

/* GET .../builds/{id}/status: E2B's TemplateBuildInfo with log entries from `offset`, or NULL
 * with *status (404) and err. */
json_t *tb_status(const char *template_id, const char *build_id, size_t offset, int *status, char *err, size_t errlen);

/* What a built template adds to a sandbox made from it: envs ("NAME=VALUE", NULL-terminated,
 * free with tb_defaults_free), the default working directory of its commands ("": home), its
 * limits (0: sandboxd's). */
typedef struct {
  char **envs;
  char workdir[1024];
  int cpu_count;
  long memory_mb;
  char *start_cmd, *ready_cmd;    /* NULL: none */
  char user[32];                  /* the build's last USER: its start command's */
} tb_template_defaults;
/* 0 when build (snap_info.build_id: a template build's id, or for one of before tags its
 * template's id) has defaults, -1 when it has none. */
int tb_defaults(const char *build_id, tb_template_defaults *out);
void tb_defaults_free(tb_template_defaults *d);
/* A built template's start command in a sandbox made from it: started detached (bash -c, as the
 * build's last USER, in its workdir, with the sandbox's envs), then its ready command run until
 * it exits 0 (every TB_READY_POLL_MS, for at most tb_set_ready_timeout's time). 0 (also without a start
 * command), or -1 with err: the start command ended first, or never got ready. */
struct sbx;
int tb_run_start_cmd(struct sbx *s, const tb_template_defaults *d, char *err, size_t errlen);

/* The template was deleted: its builds' defaults (each also goes as its build leaves the
 * catalogue) and uploads go, and the build cache entries only its builds made or reused
 * (template_cache.h). */
void tb_forget(const char *template_id);
/* Whether a build of template_id (a snapshot id) was made by a template build (it has defaults). */
bool tb_is_built(const char *template_id);
#endif
