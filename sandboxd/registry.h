/* registry.h — the table of live sandboxes: ids, envd tokens, lease expiry, pause state.
 * One mutex guards the table; an entry is reference-counted so a sandbox that is being killed is
 * never used after it is freed: reg_kill marks it dying (reg_get no longer returns it), tells the
 * `dying` hook (sandboxd ends its streams), stops it, waits for every other holder to let go,
 * destroys it, unlinks it, and tells the `gone` hook.
 *
 * The registry knows sandboxes only through the backend main.c gives it (sandbox.c there; fakes in
 * the unit tests), and the HTTP layer not at all: its hooks are main.c's too. */
#ifndef SANDBOXD_REGISTRY_H
#define SANDBOXD_REGISTRY_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <jansson.h>

typedef struct reg_entry reg_entry;
typedef struct sbx sbx_t;       /* the backend's sandbox (opaque here) */

#define REG_TEMPLATE_MAX 160
struct layer;                   /* the backend's snapshot layer (opaque here) */
struct sbx_mount;               /* the backend's volume mounts (opaque here) */

typedef struct {
  int64_t timeout_s;            /* lease length from now */
  json_t *metadata;             /* object of strings (borrowed; copied) */
  const char *const *envs;      /* NULL-terminated "NAME=VALUE" (borrowed) */
  bool secure, internet, auto_pause;
  bool auto_resume;             /* a paused sandbox resumes on its next envd request (reg_wake), for timeout_s */
  const char *template_id;      /* what the control plane reports as its template (NULL: "base") */
  const char *template_alias;   /* and as its alias (NULL: the same) */
  struct layer *layer;          /* passed to the backend: the snapshot it starts from, or NULL */
  const struct sbx_mount *mounts;   /* passed to the backend: volumes to mount */
  size_t nmounts;
  json_t *volume_mounts;        /* what the control plane reports of them: [{name, path}] (borrowed; copied) */
  json_t *network;              /* what it reports as `network` (borrowed; copied), NULL: nothing */
  struct egress_rules *egress;  /* passed to the backend: the sandbox's egress rules, or NULL */
  bool traffic_token;           /* allowPublicTraffic: false: its ports need a traffic access token */
  const char *workdir;          /* passed to the backend: its commands' default working directory, or NULL */
  int cpu_count;                /* passed to the backend: its limits (a built template's), 0: sandboxd's */
  long memory_mb;
} reg_create_opts;

/* Snapshot of an entry for the control plane (no pointers into the entry). */
#define REG_TRAFFIC_TOKEN_LEN 40
typedef struct {
  char id[32], token[40];
  char traffic_token[REG_TRAFFIC_TOKEN_LEN + 1];   /* "" when its ports are public */
  char template_id[REG_TEMPLATE_MAX], template_alias[REG_TEMPLATE_MAX];
  bool secure, internet, auto_pause, auto_resume, paused;
  bool dying;                   /* a kill started: reported by list until it is gone, never by GET */
  int64_t started_ms, end_ms;  /* wall_ms() (clocks.h): times reported to clients */
  uint64_t seq;                 /* creation order: larger is newer */
  json_t *metadata;             /* new references: reg_info_free */
  json_t *network;              /* NULL when the sandbox has no network options */
} reg_info;
void reg_info_free(reg_info *in);

/* What a sandbox is, to the registry. create boots one named id (a fresh reg_new_id), or hands
 * out one it has ready under another id it got from reg_new_id, which it then writes into id
 * (idcap bytes); stop kills every process and ends every process stream (the entry is still held
 * then); destroy frees it. */
typedef struct {
  int  (*create)(char *id, size_t idcap, const reg_create_opts *o, sbx_t **out, char *err, size_t errlen);
  void (*stop)(sbx_t *s);
  void (*destroy)(sbx_t *s);
  int  (*pause)(sbx_t *s);
  int  (*resume)(sbx_t *s);
} reg_backend;
/* Deaths, as they happen (any thread, no registry lock held). dying: a kill started, and again
 * while it waits for holders (streams opened meanwhile); gone: destruction is complete. */
typedef struct {
  void (*dying)(const reg_entry *e);
  void (*gone)(const reg_entry *e);
} reg_hooks;

/* Ids: "i" + 20 of [a-z0-9] are issued; any 1..64 of [a-z0-9] is a well-formed id. */
bool reg_valid_id(const char *id);

int  reg_init(const reg_backend *backend, const reg_hooks *hooks);   /* starts the expiry thread */
void reg_shutdown(void);                        /* kills every sandbox, stops the thread */

/* A fresh sandbox id: "i" and 20 of [a-z0-9] (cap ≥ 22). 0, or -1 with errno. */
int  reg_new_id(char *out, size_t cap);
/* 0 and *info filled, or -1 with err (sbx_create's reason). */
int  reg_create(const reg_create_opts *o, reg_info *info, char *err, size_t errlen);
reg_entry *reg_get(const char *id);             /* new reference or NULL (unknown or dying) */
void reg_put(reg_entry *e);
int  reg_kill(const char *id);                  /* 0 killed, -1 unknown */
/* reg_kill, with fn(sandbox, cls) run once the sandbox is stopped (backend's stop: every process
 * gone) and every other holder let go, just before it is destroyed: what may take its remains
 * (a template step's upper layer moved into a layer). 0 killed and fn run, -1 unknown or another
 * kill already under way (fn not run; this waits for that kill as reg_kill does). */
int  reg_kill_with(const char *id, void (*fn)(sbx_t *s, void *cls), void *cls);
/* Until its destruction completed a killed sandbox is still reported (GET, /health): */
bool reg_exists(const char *id);               /* known and not paused, dying included */
int  reg_lookup_info(const char *id, reg_info *info);   /* 0, or -1 unknown; dying included */
/* Its volume mounts as created, [{name, path}] (a new reference; [] for an unknown id). */
json_t *reg_volume_mounts(const char *id);

/* Lease: set_timeout replaces the end time; connect extends only and resumes a paused sandbox
 * (*resumed = true). Both return -1 for an unknown id, -2 when resuming failed. */
int  reg_set_timeout(const char *id, int64_t timeout_s);
int  reg_connect(const char *id, int64_t timeout_s, bool *resumed, reg_info *info);
int  reg_pause(const char *id);                 /* 0, -1 unknown, -2 already paused, -3 freeze failed */
/* Auto-resume: a paused sandbox created with auto_resume is resumed (its lease: its create
 * timeout from now). 0 when e runs now, -1 when it stays paused (no auto-resume, or the resume
 * failed). Envd traffic calls it (router.c). */
int  reg_wake(reg_entry *e);
/* fn(sandbox, info, cls) while the sandbox runs and nothing pauses, resumes or kills it (a kill
 * waits): fn's result, or -1 unknown (or dying), -2 paused. */
int  reg_with_running(const char *id, int (*fn)(sbx_t *s, const reg_info *info, void *cls), void *cls);

/* What the control plane reports of a sandbox's network from now on (internet: its
 * allow_internet_access; network: new `network` object, copied, or NULL). 0, or -1 unknown. */
int  reg_set_network(const char *id, bool internet, json_t *network);
/* Its `network` now (a new reference, or NULL: none, or an unknown entry). */
json_t *reg_network(reg_entry *e);

/* Every entry, newest first; the caller frees with reg_list_free. */
reg_info *reg_list(size_t *n);
void reg_list_free(reg_info *v, size_t n);

/* Accessors for envd handlers (entry held). */
sbx_t *reg_sbx(reg_entry *e);
const char *reg_id(const reg_entry *e);
const char *reg_token(const reg_entry *e);      /* NULL when the sandbox is not secure */
const char *reg_traffic_token(const reg_entry *e);   /* NULL when its ports are public (no traffic token) */
bool reg_paused(reg_entry *e);
bool reg_dying(reg_entry *e);                   /* set once a kill started: long handlers stop */
int  reg_kill_fd(reg_entry *e);                 /* eventfd that becomes readable when a kill starts (poll it) */
/* Per-sandbox WatchDir slots: +1 takes one (-1 when `max` are taken), -1 gives one back. */
int  reg_watch_slot(reg_entry *e, int delta, int max);

/* Find the secure sandbox whose token makes `match(token, cls)` true; new reference or NULL. */
reg_entry *reg_find_by_token(bool (*match)(const char *token, void *cls), void *cls);

#endif
