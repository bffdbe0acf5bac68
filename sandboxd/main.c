/* main.c — sandboxd: a local, E2B-compatible sandbox server.
 *   sandboxd --listen 127.0.0.1:PORT [--api-key KEY] [--state-dir DIR]
 * Serves the control plane and envd on one address, in the foreground, until SIGTERM/SIGINT;
 * then every sandbox is destroyed and it exits 0. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "control.h"
#include "dispatch.h"
#include "http.h"
#include "layers.h"
#include "net.h"
#include "registry.h"
#include "router.h"
#include "rpc.h"
#include "sandbox.h"
#include "snapshots.h"
#include "paths.h"
#include "volumes.h"

static void usage(FILE *f) {
  fprintf(f, "usage: sandboxd --listen HOST:PORT [--api-key e2b_HEX] [--state-dir DIR] [--exit-with-parent]\n"
             "                [--envd-codecs json,proto]\n"
             "  Serves E2B's control plane and envd API on HOST:PORT (IPv4). Point the E2B SDK at it with\n"
             "  E2B_API_URL=http://HOST:PORT E2B_SANDBOX_URL=http://HOST:PORT E2B_API_KEY=<key>.\n"
             "  --exit-with-parent: SIGTERM (destroy every sandbox, exit) when the starting process dies.\n"
             "  --envd-codecs: the Connect codecs envd's RPCs take (default both; `json` answers binary\n"
             "  requests 415, as a JSON-only envd would).\n");
}

static int mkdir_p(const char *path, mode_t mode) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char *p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, mode) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return mkdir(buf, mode) != 0 && errno != EEXIST ? -1 : 0;
}

static int default_state_dir(char *out, size_t len) {
  const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
  if (xdg && *xdg) return snprintf(out, len, "%s/sandboxd", xdg) >= (int)len ? -1 : 0;
  if (geteuid() == 0) return snprintf(out, len, "/var/lib/sandboxd") >= (int)len ? -1 : 0;
  if (home && *home) return snprintf(out, len, "%s/.local/state/sandboxd", home) >= (int)len ? -1 : 0;
  return -1;
}

static bool valid_key(const char *k) {
  if (strncmp(k, "e2b_", 4) != 0 || !k[4]) return false;
  for (const char *p = k + 4; *p; p++)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return strlen(k) < 200;
}

/* The key kept in <state>/api-key, created on first start. */
static int load_or_make_key(const char *state_dir, char *key, size_t len) {
  char path[4200];
  snprintf(path, sizeof path, "%s/api-key", state_dir);
  FILE *f = fopen(path, "r");
  if (f) {
    bool ok = fgets(key, (int)len, f) != NULL;
    fclose(f);
    key[strcspn(key, "\r\n")] = '\0';
    if (ok && valid_key(key)) return 0;
    fprintf(stderr, "sandboxd: %s does not hold a valid key (e2b_<hex>); remove it to get a new one\n", path);
    return -1;
  }
  unsigned char rnd[20];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) { perror("sandboxd: getrandom"); return -1; }
  int n = snprintf(key, len, "e2b_");
  for (size_t i = 0; i < sizeof rnd; i++) n += snprintf(key + n, len - (size_t)n, "%02x", rnd[i]);
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, key, strlen(key)) != (ssize_t)strlen(key) || write(fd, "\n", 1) != 1) {
    fprintf(stderr, "sandboxd: cannot write %s: %s\n", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  return 0;
}

/* The registry's sandboxes are sandbox.c's; its deaths end the HTTP layer's streams. */
static char g_state_dir[4096];
static int backend_create(const char *id, const reg_create_opts *o, sbx_t **out, char *err, size_t errlen) {
  sbx_config cfg = {.id = id, .state_dir = g_state_dir, .internet = o->internet, .envs = o->envs, .layer = o->layer,
                    .mounts = o->mounts, .nmounts = o->nmounts};
  return sbx_create(&cfg, out, err, errlen);
}
static const reg_backend BACKEND = {backend_create, sbx_stop, sbx_destroy, sbx_pause, sbx_resume};
static void on_dying(const reg_entry *e) { sd_streams_abort(e); }
static void on_gone(const reg_entry *e) { sd_streams_release(e); }
static const reg_hooks DEATHS = {on_dying, on_gone};

static void report_caps(void) {
  sbx_host_caps caps;
  memset(&caps, 0, sizeof caps);
  sbx_probe_host(&caps);
  struct { bool ok; const char *name; } f[] = {
    { caps.userns, "user namespaces" }, { caps.overlay, "overlay root" }, { caps.pidns, "pid namespace" },
    { caps.netns, "network namespace" }, { caps.internet, "internet access (pasta)" },
    { caps.net_guard, "host address guard (nftables)" }, { caps.cgroup_pids, "cgroup pids limit" },
    { caps.cgroup_memory, "cgroup memory limit" }, { caps.freezer, "freezer (pause)" },
  };
  char missing[640] = "";
  for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
    if (!f[i].ok) {
      size_t n = strlen(missing);
      snprintf(missing + n, sizeof missing - n, "%s%s", n ? ", " : "", f[i].name);
    }
  if (missing[0]) fprintf(stderr, "sandboxd: isolation features unavailable: %s%s%s\n", missing,
                          caps.why[0] ? " — " : "", caps.why);
  else fprintf(stderr, "sandboxd: every isolation feature is available\n");
}

int main(int argc, char **argv) {
  const char *listen = NULL, *api_key = NULL, *state = NULL, *codecs = "json,proto";
  bool exit_with_parent = false;
  pid_t parent = getppid();                 /* before anything else: the process that started us */
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    if (!strcmp(a, "--exit-with-parent")) { exit_with_parent = true; continue; }
    if (i + 1 >= argc || (strcmp(a, "--listen") && strcmp(a, "--api-key") && strcmp(a, "--state-dir") &&
                          strcmp(a, "--envd-codecs"))) {
      fprintf(stderr, "sandboxd: unknown or incomplete argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
    const char *v = argv[++i];
    if (!strcmp(a, "--listen")) listen = v;
    else if (!strcmp(a, "--api-key")) api_key = v;
    else if (!strcmp(a, "--envd-codecs")) codecs = v;
    else state = v;
  }
  bool cj = !strcmp(codecs, "json") || !strcmp(codecs, "json,proto") || !strcmp(codecs, "proto,json");
  bool cp = !strcmp(codecs, "proto") || !strcmp(codecs, "json,proto") || !strcmp(codecs, "proto,json");
  if (!cj && !cp) { fprintf(stderr, "sandboxd: --envd-codecs '%s' must be json, proto or json,proto\n", codecs); return 2; }
  rpc_set_codecs(cj, cp);
  if (!listen) { fprintf(stderr, "sandboxd: --listen HOST:PORT is required\n"); usage(stderr); return 2; }
  char host[64];
  const char *colon = strrchr(listen, ':');
  char *end;
  long port = colon ? strtol(colon + 1, &end, 10) : -1;
  if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof host || !colon[1] || *end || port < 0 || port > 65535) {
    fprintf(stderr, "sandboxd: --listen '%s' must be IPV4:PORT, e.g. 127.0.0.1:49983\n", listen);
    return 2;
  }
  snprintf(host, sizeof host, "%.*s", (int)(colon - listen), listen);
  if (api_key && !valid_key(api_key)) {
    fprintf(stderr, "sandboxd: --api-key must look like e2b_<lowercase hex> (the E2B SDK rejects anything else)\n");
    return 2;
  }
  char state_dir[4096];
  if (state) snprintf(state_dir, sizeof state_dir, "%s", state);
  else if (default_state_dir(state_dir, sizeof state_dir)) { fprintf(stderr, "sandboxd: no state directory: pass --state-dir\n"); return 2; }
  if (mkdir_p(state_dir, 0700)) { fprintf(stderr, "sandboxd: cannot create %s: %s\n", state_dir, strerror(errno)); return 1; }
  /* Sandboxes keep absolute paths to their layers: resolve a relative --state-dir once, here. */
  char abs_state[PATH_MAX];
  if (!realpath(state_dir, abs_state) || strlen(abs_state) >= sizeof state_dir) {
    fprintf(stderr, "sandboxd: --state-dir %s: cannot resolve: %s\n", state_dir, strerror(errno ? errno : ENAMETOOLONG));
    return 1;
  }
  snprintf(state_dir, sizeof state_dir, "%s", abs_state);

  char keybuf[256];
  if (!api_key) {
    if (load_or_make_key(state_dir, keybuf, sizeof keybuf)) return 1;
    api_key = keybuf;
  }

  /* Upload buffers are large and short-lived: always mmap them so they go back to the system
   * instead of staying in the many per-thread arenas. */
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  umask(022);   /* files sandboxd creates for a sandbox get envd's modes (0644 / 0755) */
  /* Every thread inherits this mask; main takes the signals with sigwait. */
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);

  if (exit_with_parent) {
    /* SIGTERM is blocked above and taken by sigwait below, so a dead parent means the usual
     * orderly shutdown. A parent that died before prctl took effect: exit now. */
    if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) { perror("sandboxd: prctl(PR_SET_PDEATHSIG)"); return 1; }
    if (getppid() != parent) { fprintf(stderr, "sandboxd: --exit-with-parent: the parent already exited\n"); return 1; }
  }
  net_init(state_dir, NULL, 0);   /* before any sandbox: the host guard (report_caps says what is missing) */
  sbx_cleanup_stale(state_dir);
  report_caps();
  /* Snapshots: the layer store, the catalogue over it, then what nothing refers to any more. */
  char serr[512];
  if (ly_init(state_dir, serr, sizeof serr) != 0 || snap_init(state_dir, serr, sizeof serr) != 0) {
    fprintf(stderr, "sandboxd: %s\n", serr);
    sbx_pool_stop();
    net_shutdown();
    return 1;
  }
  /* Volumes: their owners are ids inside the sandboxes. */
  vol_idmap vmap;
  sbx_id_range(&vmap.uid_base, &vmap.gid_base, &vmap.count);
  if (vol_init(state_dir, &vmap, serr, sizeof serr) != 0) {
    fprintf(stderr, "sandboxd: %s\n", serr);
    sbx_pool_stop();
    net_shutdown();
    return 1;
  }
  paths_allow_dev(vol_dev());
  int swept = ly_sweep();
  if (swept > 0) fprintf(stderr, "sandboxd: removed %d snapshot layer%s nothing refers to\n", swept, swept == 1 ? "" : "s");
  control_init(state_dir);
  snprintf(g_state_dir, sizeof g_state_dir, "%s", state_dir);
  router_init(api_key);
  if (reg_init(&BACKEND, &DEATHS)) {
    fprintf(stderr, "sandboxd: cannot start the expiry thread\n");
    sbx_pool_stop();
    net_shutdown();
    return 1;
  }
  char err[512];
  if (sd_server_start(host, (int)port, dispatch_hooks(), err, sizeof err)) {
    fprintf(stderr, "sandboxd: %s\n", err);
    reg_shutdown();
    sbx_pool_stop();
    net_shutdown();
    return 1;
  }
  if (api_key == keybuf) printf("sandboxd api key: %s (kept in %s/api-key)\n", api_key, state_dir);
  printf("sandboxd listening on http://%s:%d\n", host, sd_server_port());
  fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  fprintf(stderr, "sandboxd: %s: destroying every sandbox\n", strsignal(sig));
  reg_shutdown();
  sd_server_stop();
  router_shutdown();
  snap_shutdown();
  ly_shutdown();
  vol_shutdown();
  sbx_pool_stop();     /* the spares' pastas, before their guard goes */
  net_shutdown();
  return 0;
}
