/* main.c — sandboxd: a local, E2B-compatible sandbox server.
 *   sandboxd --listen 127.0.0.1:PORT [--api-key-file F | --api-key-fd N] [--state-dir DIR]
 *   sandboxd [--listen ...] --tls-listen ADDR:443 --domain D --tls-cert F --tls-key F   (edge mode)
 * Serves the control plane, envd and the port proxy on its listeners, in the foreground, until
 * SIGTERM/SIGINT; then every sandbox is destroyed and it exits 0. */
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <sys/file.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "apikey.h"
#include "control.h"
#include "dispatch.h"
#include "http.h"
#include "layers.h"
#include "egress.h"
#include "harden.h"
#include "net.h"
#include "registry.h"
#include "router.h"
#include "rpc.h"
#include "sandbox.h"
#include "secrets.h"
#include "snapshots.h"
#include "template_build.h"
#include "paths.h"
#include "proxy.h"
#include "volumes.h"
#include "egress_http.h"
#include "image.h"

static void usage(FILE *f) {
  fprintf(f, "usage: sandboxd [--version] [--listen HOST:PORT] [--tls-listen HOST:PORT --tls-cert PEM --tls-key PEM] [--domain D]\n"
             "                [--api-key-file FILE | --api-key-fd N] [--state-dir DIR] [--exit-with-parent]\n"
             "                [--envd-codecs json,proto] [--dns ADDR[:PORT]]... [--egress-unblock private|link-local|CIDR]...\n"
             "                [--cpu-count N] [--memory-mb M] [--pids-max N] [--cgroup DIR] [--egress-ca FILE]\n"
             "                [--template-ready-timeout S] [--insecure-registry HOST[:PORT]]...\n"
             "       sandboxd --clean-up --state-dir DIR\n"
             "  Serves E2B's control plane, envd API and port proxy on HOST:PORT (IPv4; plain HTTP), and with\n"
             "  --tls-listen over TLS too (the certificate chain and key in PEM files). Point the E2B SDK at it\n"
             "  with E2B_API_URL=http://HOST:PORT E2B_SANDBOX_URL=http://HOST:PORT E2B_API_KEY=<key>; a port\n"
             "  inside sandbox ID is at http://HOST:PORT/_sandbox/ID/PORT/.\n"
             "  --domain D (edge mode, as E2B's cloud): requests are routed by Host, api.D to the control plane,\n"
             "  <port>-<id>.D to that sandbox (49983: envd; any other port: the proxy to it), sandbox.D by the\n"
             "  E2b-Sandbox-Id and E2b-Sandbox-Port headers; then E2B_DOMAIN=D E2B_API_KEY=<key> is the\n"
             "  whole client configuration (with DNS for *.D and trust in the certificate).\n"
             "  The API key (e2b_HEX): --api-key-file FILE (one line; the file must be private to its owner,\n"
             "  mode 600), --api-key-fd N (read from descriptor N up to a newline or its end, then closed:\n"
             "  e.g. --api-key-fd 3 3<<<\"$KEY\"), else <state-dir>/api-key, made and printed on first start.\n"
             "  A key is never taken on the command line, where every local user can read it.\n"
             "  --exit-with-parent: SIGTERM (destroy every sandbox, exit) when the starting process dies.\n"
             "  sandboxd --clean-up --state-dir DIR: removes what a sandboxd of DIR that was killed left (its\n"
             "  sandboxes' processes, cgroups and directories) and exits; refused while a sandboxd runs there\n"
             "  (one sandboxd per state dir: <state-dir>/sandboxd.lock).\n"
             "  --envd-codecs json,proto: the Connect codecs envd's RPCs take (default both; `json` answers\n"
             "  binary requests 415, as a JSON-only envd would).\n"
             "  --dns ADDR[:PORT] (up to 4): the resolvers sandboxes' DNS queries go to, and that sandboxd asks\n"
             "  for names an egress rule allows (default: the host's /etc/resolv.conf).\n"
             "  --egress-unblock: let sandboxes reach private and shared ranges (10/8, 172.16/12, 192.168/16,\n"
             "  100.64/10, fc00::/7: `private`), link-local ones (169.254/16, fe80::/10, where clouds serve\n"
             "  instance metadata: `link-local`) or a CIDR inside them, which are refused otherwise (private\n"
             "  ones unless a sandbox's allowOut names them).\n"
             "  --egress-ca FILE: the CA bundle (PEM) that hosts reached for a sandbox's header rules are verified\n"
             "  with, instead of the system's (a private CA, a TLS-inspecting corporate proxy).\n"
             "  --cpu-count N, --memory-mb M: every sandbox's CPU quota and memory limit (the base template's\n"
             "  cpuCount and memoryMB, reported by getInfo; default 2 (at most the host's CPUs) and 2048);\n"
             "  --pids-max N: its process limit (default 4096). Enforced through cgroups where the host has them.\n"
             "  --cgroup DIR: a cgroup v2 directory sandboxd owns, for its sandboxes' cgroups (default: its own\n"
             "  cgroup when systemd delegates it, else as root a directory under the hierarchy's root).\n"
             "  --template-ready-timeout S: how long a built template's ready command (setStartCmd's check) may\n"
             "  fail before its build fails, or a create from it answers anyway (default 300, 1..3600).\n"
             "  --insecure-registry HOST[:PORT] (up to 16): a registry that template builds' fromImage reach over\n"
             "  plain HTTP or TLS without verification (a local registry); every other one: TLS, verified.\n");
}

/* A decimal count lo..hi into *out; 0 or -1 (said why). */
static int parse_count(const char *flag, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (errno || end == v || *end || n < lo || n > hi) {
    fprintf(stderr, "sandboxd: %s '%s' must be a whole number from %ld to %ld\n", flag, v, lo, hi);
    return -1;
  }
  *out = n;
  return 0;
}

/* HOST:PORT (IPv4 address, port 0..65535) into host/port; 0 or -1. */
static int parse_addr(const char *flag, const char *v, char *host, size_t hostlen, int *port) {
  const char *colon = strrchr(v, ':');
  char *end;
  long p = colon ? strtol(colon + 1, &end, 10) : -1;
  if (!colon || colon == v || (size_t)(colon - v) >= hostlen || !colon[1] || *end || p < 0 || p > 65535) {
    fprintf(stderr, "sandboxd: %s '%s' must be IPV4:PORT, e.g. 127.0.0.1:49983\n", flag, v);
    return -1;
  }
  snprintf(host, hostlen, "%.*s", (int)(colon - v), v);
  struct in_addr a;
  if (inet_pton(AF_INET, host, &a) != 1) {
    fprintf(stderr, "sandboxd: %s '%s': '%s' is not an IPv4 address\n", flag, v, host);
    return -1;
  }
  *port = (int)p;
  return 0;
}

/* A PEM file, whole (at most SD_MAX_PEM bytes): malloc'ed text, or NULL with the reason printed. */
static char *read_pem(const char *flag, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "sandboxd: %s %s: %s\n", flag, path, strerror(errno)); return NULL; }
  char *buf = malloc(SD_MAX_PEM + 1);
  size_t n = buf ? fread(buf, 1, SD_MAX_PEM + 1, f) : 0;
  bool bad = ferror(f);
  fclose(f);
  if (!buf || bad || n == 0 || n > SD_MAX_PEM || memchr(buf, 0, n)) {
    fprintf(stderr, "sandboxd: %s %s: %s\n", flag, path, !buf ? "out of memory" : bad ? "cannot be read"
            : n == 0 ? "is empty" : n > SD_MAX_PEM ? "is larger than 1 MiB" : "is not PEM text");
    free(buf);
    return NULL;
  }
  buf[n] = '\0';
  if (!strstr(buf, "-----BEGIN ")) {
    fprintf(stderr, "sandboxd: %s %s: is not PEM (no -----BEGIN line)\n", flag, path);
    free(buf);
    return NULL;
  }
  return buf;
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

/* The registry's sandboxes are sandbox.c's; its deaths end the HTTP layer's streams. */
static char g_state_dir[4096];
static int backend_create(char *id, size_t idcap, const reg_create_opts *o, sbx_t **out, char *err, size_t errlen) {
  sbx_config cfg = {.id = id, .state_dir = g_state_dir, .internet = o->internet, .envs = o->envs, .layer = o->layer,
                    .mounts = o->mounts, .nmounts = o->nmounts, .egress = o->egress, .workdir = o->workdir,
                    .cpu_count = o->cpu_count, .memory_mb = o->memory_mb};
  if (sbx_create(&cfg, out, err, errlen) != 0) return -1;
  snprintf(id, idcap, "%s", sbx_id(*out));   /* a claimed spare keeps the id it was booted with */
  return 0;
}
static const reg_backend BACKEND = {backend_create, sbx_stop, sbx_destroy, sbx_pause, sbx_resume};
static void on_dying(const reg_entry *e) { sd_streams_abort(e); }
static void on_gone(const reg_entry *e) {
  sd_streams_release(e);
  secrets_sandbox_gone(reg_id(e));     /* its scoped secrets go with it */
}
static bool sandbox_alive(const char *id) { return reg_exists(id); }
static const reg_hooks DEATHS = {on_dying, on_gone};

static void report_caps(void) {
  sbx_host_caps caps;
  memset(&caps, 0, sizeof caps);
  sbx_probe_host(&caps);
  struct { bool ok; const char *name; } f[] = {
    { caps.userns, "user namespaces" }, { caps.overlay, "overlay root" }, { caps.pidns, "pid namespace" },
    { caps.netns, "network namespace" }, { caps.internet, "internet access" },
    { caps.net_guard, "egress rules (the gateway) and the host address guard" }, { caps.cgroup_pids, "cgroup pids limit" },
    { caps.cgroup_memory, "cgroup memory limit" }, { caps.cgroup_cpu, "cgroup CPU limit" }, { caps.freezer, "freezer (pause)" },
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
  int cpus;
  long mem_mb;
  sbx_limits(&cpus, &mem_mb);
  fprintf(stderr, "sandboxd: %s; each sandbox: %d CPU%s, %ld MB\n", caps.cgroups, cpus, cpus == 1 ? "" : "s", mem_mb);
}

/* One sandboxd per state dir: <state>/sandboxd.lock held (flock) for its whole life, by a
 * descriptor no child inherits. 0, or -1 with the reason in err. */
static int lock_state_dir(const char *state_dir, char *err, size_t errlen) {
  char p[4200];
  snprintf(p, sizeof p, "%s/sandboxd.lock", state_dir);
  int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) { snprintf(err, errlen, "cannot open %s: %s", p, strerror(errno)); return -1; }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    snprintf(err, errlen, "--state-dir %s is in use by another sandboxd (%s is locked)", state_dir, p);
    close(fd);
    return -1;
  }
  return 0;   /* fd stays open: the lock is ours until we exit */
}

/* sandboxd --clean-up --state-dir DIR: what a crashed sandboxd of DIR left (its sandboxes'
 * processes, cgroups and directories, its pastas) removed; nothing is started. Refused while a
 * sandboxd runs there. */
static int clean_up_after(const char *state, bool other_options) {
  if (other_options || !state) {
    fprintf(stderr, "sandboxd: --clean-up takes --state-dir DIR and nothing else\n");
    return 2;
  }
  char dir[4096], err[4400];
  if (!realpath(state, dir)) {
    if (errno == ENOENT) return 0;   /* nothing there: nothing left */
    fprintf(stderr, "sandboxd: --state-dir %s: cannot resolve: %s\n", state, strerror(errno));
    return 1;
  }
  if (lock_state_dir(dir, err, sizeof err) != 0) { fprintf(stderr, "sandboxd: --clean-up: %s\n", err); return 1; }
  sbx_cleanup_crashed(dir);
  return 0;
}

int main(int argc, char **argv) {
  /* Before anything secret is in memory: no core dump, non-dumpable as root (harden.h). */
  char hardening[300];
  harden_process(hardening, sizeof hardening);
  const char *listen = NULL, *tls_listen = NULL, *domain = NULL, *cert_path = NULL, *key_path = NULL;
  const char *key_file = NULL, *key_fd = NULL, *state = NULL, *codecs = "json,proto";
  const char *cpu_arg = NULL, *mem_arg = NULL, *pids_arg = NULL, *cgroup = NULL, *egress_ca = NULL, *ready_arg = NULL;
  bool exit_with_parent = false, clean_up = false;
  egress_config ecfg;
  memset(&ecfg, 0, sizeof ecfg);
  ecfg.trace = getenv("SANDBOXD_TRACE_EGRESS") != NULL;
  pid_t parent = getppid();                 /* before anything else: the process that started us */
  static const char *const VALUED[] = {"--listen", "--tls-listen", "--domain", "--tls-cert", "--tls-key", "--api-key-file",
                                       "--api-key-fd", "--state-dir", "--envd-codecs", "--cpu-count", "--memory-mb", "--pids-max",
                                       "--cgroup", "--egress-ca", "--template-ready-timeout"};
  const char **slot[] = {&listen, &tls_listen, &domain, &cert_path, &key_path, &key_file, &key_fd, &state, &codecs,
                         &cpu_arg, &mem_arg, &pids_arg, &cgroup, &egress_ca, &ready_arg};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    if (!strcmp(a, "--version")) { printf("sandboxd %s (moonbox)\n", SANDBOXD_VERSION); return 0; }
    if (!strcmp(a, "--api-key") || !strncmp(a, "--api-key=", 10)) {
      /* Removed, not deprecated: a warning would leave the key readable by every local user. */
      fprintf(stderr, "sandboxd: --api-key is no longer accepted: a key on the command line is readable by every local "
                      "user (ps, /proc/PID/cmdline), who could then drive sandboxd. Put it in a file only you can read "
                      "and pass --api-key-file FILE, or pass it on a descriptor: --api-key-fd 3 3<<<\"$KEY\"\n");
      return 2;
    }
    if (!strcmp(a, "--exit-with-parent")) { exit_with_parent = true; continue; }
    if (!strcmp(a, "--clean-up")) { clean_up = true; continue; }
    if (!strcmp(a, "--insecure-registry") && i + 1 < argc) {
      char ierr[300];
      if (img_insecure_add(argv[++i], ierr, sizeof ierr) != 0) { fprintf(stderr, "sandboxd: --insecure-registry %s\n", ierr); return 2; }
      continue;
    }
    if ((!strcmp(a, "--dns") || !strcmp(a, "--egress-unblock")) && i + 1 < argc) {
      const char *v = argv[++i];
      char uerr[300];
      if (!strcmp(a, "--egress-unblock")) {
        if (egress_site_unblock(&ecfg.site, v, uerr, sizeof uerr) != 0) { fprintf(stderr, "sandboxd: --egress-unblock %s\n", uerr); return 2; }
      } else if (ecfg.ndns == EGRESS_DNS_SERVERS || strlen(v) >= sizeof ecfg.dns[0]) {
        fprintf(stderr, "sandboxd: --dns '%s': at most %d resolvers, each ADDR, ADDR:PORT or [ADDR]:PORT\n", v, EGRESS_DNS_SERVERS);
        return 2;
      } else {
        snprintf(ecfg.dns[ecfg.ndns++], sizeof ecfg.dns[0], "%s", v);
      }
      continue;
    }
    size_t k = 0;
    while (k < sizeof VALUED / sizeof VALUED[0] && strcmp(a, VALUED[k]) != 0) k++;
    if (i + 1 >= argc || k == sizeof VALUED / sizeof VALUED[0]) {
      fprintf(stderr, "sandboxd: unknown or incomplete argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
    *slot[k] = argv[++i];
  }
  if (clean_up) return clean_up_after(state, listen || tls_listen || domain || key_file || key_fd || exit_with_parent);
  static char egress_ca_abs[PATH_MAX];
  if (egress_ca) {   /* read by every intercepted HTTPS request: checked now, by its full path */
    FILE *f = realpath(egress_ca, egress_ca_abs) ? fopen(egress_ca_abs, "re") : NULL;
    char line[128] = "";
    bool pem = false;
    while (f && !pem && fgets(line, sizeof line, f)) pem = !strncmp(line, "-----BEGIN CERTIFICATE-----", 27);
    if (f) fclose(f);
    if (!pem) {
      fprintf(stderr, "sandboxd: --egress-ca '%s': %s\n", egress_ca, f ? "no PEM certificate in it" : strerror(errno));
      return 2;
    }
    egress_ca = egress_ca_abs;
  }
  bool cj = !strcmp(codecs, "json") || !strcmp(codecs, "json,proto") || !strcmp(codecs, "proto,json");
  bool cp = !strcmp(codecs, "proto") || !strcmp(codecs, "json,proto") || !strcmp(codecs, "proto,json");
  if (!cj && !cp) { fprintf(stderr, "sandboxd: --envd-codecs '%s' must be json, proto or json,proto\n", codecs); return 2; }
  rpc_set_codecs(cj, cp);
  sbx_defaults lim = {.cgroup = cgroup, .new_id = reg_new_id};
  long v;
  if (cpu_arg && parse_count("--cpu-count", cpu_arg, 1, 1024, &v)) return 2;
  lim.cpu_count = cpu_arg ? (int)v : 0;
  if (mem_arg && parse_count("--memory-mb", mem_arg, 16, 1L << 30, &v)) return 2;
  lim.memory_mb = mem_arg ? v : 0;
  if (pids_arg && parse_count("--pids-max", pids_arg, 8, 1L << 22, &v)) return 2;
  lim.pids_max = pids_arg ? v : 0;
  if (ready_arg && parse_count("--template-ready-timeout", ready_arg, 1, 3600, &v)) return 2;
  if (ready_arg) tb_set_ready_timeout((int64_t)v * 1000);
  if (!listen && !tls_listen) { fprintf(stderr, "sandboxd: --listen HOST:PORT (or --tls-listen) is required\n"); usage(stderr); return 2; }
  char host[64] = "", tls_host[64] = "";
  int port = 0, tls_port = 0;
  if (listen && parse_addr("--listen", listen, host, sizeof host, &port)) return 2;
  if (tls_listen && parse_addr("--tls-listen", tls_listen, tls_host, sizeof tls_host, &tls_port)) return 2;
  if (tls_listen && (!cert_path || !key_path)) {
    fprintf(stderr, "sandboxd: --tls-listen needs --tls-cert and --tls-key (PEM files: the certificate chain, its key)\n");
    return 2;
  }
  if (!tls_listen && (cert_path || key_path)) {
    fprintf(stderr, "sandboxd: --tls-cert and --tls-key are for --tls-listen, which is missing\n");
    return 2;
  }
  char domain_lc[RT_DOMAIN_MAX + 1] = "";
  if (domain) {
    size_t n = strlen(domain);
    if (n && domain[n - 1] == '.') n--;                       /* a fully qualified name's final dot */
    for (size_t i = 0; i < n && i < RT_DOMAIN_MAX; i++)
      domain_lc[i] = (char)(domain[i] >= 'A' && domain[i] <= 'Z' ? domain[i] - 'A' + 'a' : domain[i]);
    domain_lc[n < RT_DOMAIN_MAX ? n : RT_DOMAIN_MAX] = '\0';
    if (n > RT_DOMAIN_MAX || !rt_valid_domain(domain_lc)) {
      fprintf(stderr, "sandboxd: --domain '%s' must be a DNS name (letters, digits, '-', '.'; at most %d bytes)\n", domain, RT_DOMAIN_MAX);
      return 2;
    }
  }
  if (key_file && key_fd) { fprintf(stderr, "sandboxd: give at most one of --api-key-file and --api-key-fd\n"); return 2; }
  /* The key first: a descriptor is read and closed before anything else can inherit it. */
  char keybuf[APIKEY_MAX + 1], kerr[4400];
  const char *api_key = NULL;
  if (key_fd) {
    char *end;
    errno = 0;
    long fd = strtol(key_fd, &end, 10);
    if (!*key_fd || *end || errno || fd < 0 || fd > INT_MAX) {
      fprintf(stderr, "sandboxd: --api-key-fd '%s' must be a descriptor number\n", key_fd);
      return 2;
    }
    if (apikey_from_fd((int)fd, keybuf, sizeof keybuf, kerr, sizeof kerr)) { fprintf(stderr, "sandboxd: --api-key-fd: %s\n", kerr); return 2; }
    api_key = keybuf;
  } else if (key_file) {
    if (apikey_from_file(key_file, keybuf, sizeof keybuf, kerr, sizeof kerr)) { fprintf(stderr, "sandboxd: --api-key-file %s\n", kerr); return 2; }
    api_key = keybuf;
  }
  char *tls_cert = NULL, *tls_key = NULL;
  if (tls_listen && (!(tls_cert = read_pem("--tls-cert", cert_path)) || !(tls_key = read_pem("--tls-key", key_path)))) {
    free(tls_cert);
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
  char lerr[4400];
  if (lock_state_dir(state_dir, lerr, sizeof lerr) != 0) { fprintf(stderr, "sandboxd: %s\n", lerr); return 1; }

  bool key_made = false;
  if (!api_key) {
    if (apikey_load_or_make(state_dir, keybuf, sizeof keybuf, &key_made, kerr, sizeof kerr)) { fprintf(stderr, "sandboxd: %s\n", kerr); return 1; }
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
  char cgerr[700];
  if (sbx_init(state_dir, &lim, cgerr, sizeof cgerr) != 0) { fprintf(stderr, "sandboxd: %s\n", cgerr); return 2; }
  /* Before any sandbox: the gateway, the egress proxy, the host guard (report_caps says what is missing). */
  /* Intercepted connections (hosts whose rules set headers) are served by the HTTP layer. */
  char herr[512];
  if (egress_http_start(egress_ca, herr, sizeof herr) != 0) { fprintf(stderr, "sandboxd: %s\n", herr); return 1; }
  ecfg.intercept = egress_http_take;
  net_init(state_dir, &ecfg, NULL, 0);
  sbx_cleanup_stale(state_dir);
  report_caps();
  /* Snapshots: the layer store, the catalogue over it, then what nothing refers to any more. */
  char serr[512];
  if (ly_init(state_dir, serr, sizeof serr) != 0 || snap_init(state_dir, serr, sizeof serr) != 0 ||
      tb_init(state_dir, serr, sizeof serr) != 0 || img_init(state_dir, serr, sizeof serr) != 0) {
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
  /* The secret store: refused at start, naming the file, when its key or catalogue is wrong. */
  if (secrets_init(state_dir, kerr, sizeof kerr) != 0) {
    fprintf(stderr, "sandboxd: %s\n", kerr);
    sbx_pool_stop();
    net_shutdown();
    return 1;
  }
  if (hardening[0]) fprintf(stderr, "sandboxd: %s\n", hardening);
  int swept = ly_sweep();
  if (swept > 0) fprintf(stderr, "sandboxd: removed %d snapshot layer%s nothing refers to\n", swept, swept == 1 ? "" : "s");
  control_init(state_dir, domain_lc[0] ? domain_lc : NULL);
  snprintf(g_state_dir, sizeof g_state_dir, "%s", state_dir);
  router_init(api_key, domain_lc);
  if (reg_init(&BACKEND, &DEATHS)) {
    fprintf(stderr, "sandboxd: cannot start the expiry thread\n");
    sbx_pool_stop();
    net_shutdown();
    return 1;
  }
  /* Sandboxes do not outlive sandboxd: secrets scoped to one of the previous run's go now. */
  size_t orphans = secrets_sweep_scoped(sandbox_alive);
  if (orphans) fprintf(stderr, "sandboxd: deleted %zu secret%s scoped to sandboxes that no longer exist\n", orphans, orphans == 1 ? "" : "s");
  char err[512];
  sd_listen ls[SD_MAX_LISTEN];
  size_t nls = 0;
  if (listen) ls[nls++] = (sd_listen){.host = host, .port = port};
  if (tls_listen) ls[nls++] = (sd_listen){.host = tls_host, .port = tls_port, .tls_cert = tls_cert, .tls_key = tls_key};
  if (proxy_init(err, sizeof err) != 0 || sd_server_start(ls, nls, dispatch_hooks(), err, sizeof err)) {
    fprintf(stderr, "sandboxd: %s\n", err);
    free(tls_cert);
    free(tls_key);
    reg_shutdown();
    sbx_pool_stop();
    net_shutdown();
    return 1;
  }
  if (!key_file && !key_fd) printf("sandboxd api key: %s (kept in %s/api-key)\n", api_key, state_dir);
  for (size_t i = 0; i < nls; i++)
    printf("sandboxd listening on %s://%s:%d\n", ls[i].tls_cert ? "https" : "http", ls[i].host, sd_server_port(i));
  if (domain_lc[0])
    printf("sandboxd edge domain %s: api.%s (control plane), <port>-<id>.%s and sandbox.%s (sandboxes; 49983: envd)\n",
           domain_lc, domain_lc, domain_lc, domain_lc);
  fflush(stdout);

  int sig = 0;
  sigwait(&set, &sig);
  fprintf(stderr, "sandboxd: %s: destroying every sandbox\n", strsignal(sig));
  tb_shutdown();       /* running builds end (their sandboxes killed) before the registry goes */
  reg_shutdown();
  for (size_t i = 0; i < nls; i++) {
    sd_listen_stats st;
    sd_server_stats(i, &st);
    fprintf(stderr, "sandboxd: %s://%s:%d served %llu requests on %llu connections\n", ls[i].tls_cert ? "https" : "http",
            ls[i].host, sd_server_port(i), (unsigned long long)st.requests, (unsigned long long)st.connections);
  }
  sd_server_stop();
  egress_http_stop();
  free(tls_cert);                 /* MHD may refer to them while it runs */
  free(tls_key);
  router_shutdown();
  snap_shutdown();
  img_shutdown();
  ly_shutdown();
  vol_shutdown();
  secrets_shutdown();
  sbx_shutdown();      /* the spares' pastas, before their guard goes; the cgroup parent */
  net_shutdown();
  return 0;
}
