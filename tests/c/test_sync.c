/* test_sync.c — the host side of workspace sync without Lua (so the sanitizer build covers it):
 * the gitignore matcher, path checks, scans (rules, limits, refused types, changes under it),
 * packs (round trip through unpack, hashes, a file changing while it is read), unpacks of
 * hostile archives crafted here with libarchive (every refused entry, limits, malformed input),
 * placements and their checks, stepped hashing, removal that never follows a link, the sweep. */
#include "ignore.h"
#include "mbtest.h"
#include "sync.h"

#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <openssl/evp.h>
#include <unistd.h>

static char tmp_root[256];

static void path_of(char *out, size_t cap, const char *rel) { snprintf(out, cap, "%s/%s", tmp_root, rel); }

static void put(const char *rel, const char *content) {
  char p[1024];
  path_of(p, sizeof p, rel);
  FILE *f = fopen(p, "wb");
  if (!f) { fprintf(stderr, "cannot write %s\n", p); exit(2); }
  fwrite(content, 1, strlen(content), f);
  fclose(f);
}

static void mkd(const char *rel) {
  char p[1024];
  path_of(p, sizeof p, rel);
  if (mkdir(p, 0755) < 0 && errno != EEXIST) { fprintf(stderr, "mkdir %s\n", p); exit(2); }
}

static void sh(const char *fmt, ...) {
  char cmd[2048];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  if (system(cmd) != 0) { fprintf(stderr, "failed: %s\n", cmd); exit(2); }
}

static void fresh(void) {
  if (tmp_root[0]) sh("rm -rf '%s'", tmp_root);
  snprintf(tmp_root, sizeof tmp_root, "/tmp/mb_test_sync_XXXXXX");
  if (!mkdtemp(tmp_root)) exit(2);
}

static void sha_hex(const void *p, size_t n, char out[65]) {
  unsigned char d[32];
  unsigned int dl;
  EVP_Digest(p, n, d, &dl, EVP_sha256(), NULL);
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* ---- the matcher ---- */

static int m(mb_ignore *ig, const char *path, int dir) { return mb_ignore_match(ig, path, strlen(path), dir); }

static mb_ignore *rules(const char *text) {
  mb_ignore *ig = mb_ignore_new(1 << 20);
  CHECK(ig != NULL);
  CHECK_INT(mb_ignore_push(ig, "", 0, text, strlen(text), MB_IGNORE_FILE, NULL), 0);
  return ig;
}

static void test_ignore_patterns(void) {
  mb_ignore *ig = rules("# comment\n\n*.log\n!keep.log\nbuild/\n/root.txt\ndoc/*.md\na/**/z\n**/deep\nout/**\n"
                        "[a-c]?.c\n\\#hash\nsp\\ \ntrail   \n\\!bang\n*.tmp\r\n[[:digit:]]x\n[!q]n\n");
  CHECK(m(ig, "x.log", 0) && m(ig, "d/e/x.log", 0));
  CHECK(!m(ig, "keep.log", 0) && !m(ig, "d/keep.log", 0));
  CHECK(m(ig, "build", 1) && m(ig, "src/build", 1) && !m(ig, "build", 0));     /* directory only */
  CHECK(m(ig, "root.txt", 0) && !m(ig, "sub/root.txt", 0));                    /* anchored */
  CHECK(m(ig, "doc/a.md", 0) && !m(ig, "doc/sub/a.md", 0) && !m(ig, "x/doc/a.md", 0));
  CHECK(m(ig, "a/z", 0) && m(ig, "a/b/z", 0) && m(ig, "a/b/c/z", 0) && !m(ig, "b/a/z", 0));
  CHECK(m(ig, "deep", 0) && m(ig, "x/y/deep", 1));
  CHECK(m(ig, "out/x", 0) && m(ig, "out/x/y", 0) && !m(ig, "out", 1));         /* trailing ** : inside */
  CHECK(m(ig, "b1.c", 0) && m(ig, "x/cz.c", 0) && !m(ig, "d1.c", 0) && !m(ig, "b12.c", 0));
  CHECK(m(ig, "#hash", 0) && m(ig, "sp ", 0) && !m(ig, "sp", 0));
  CHECK(m(ig, "trail", 0) && !m(ig, "trail   ", 0));                           /* trailing spaces dropped */
  CHECK(m(ig, "!bang", 0));
  CHECK(m(ig, "a.tmp", 0));                                                     /* CRLF line */
  CHECK(m(ig, "7x", 0) && !m(ig, "ax", 0));
  CHECK(m(ig, "an", 0) && !m(ig, "qn", 0));
  CHECK(!m(ig, "src/main.c", 0) && !m(ig, "", 1));
  CHECK_INT(mb_ignore_patterns(ig), 16);
  mb_ignore_free(ig);

  /* '*' never crosses '/', '?' neither; a pattern with a slash in the middle is anchored */
  ig = rules("a*b\nx?y\nfoo/bar\n");
  CHECK(m(ig, "ab", 0) && m(ig, "aXYb", 0) && m(ig, "d/aqb", 0) && !m(ig, "a/b", 0));
  CHECK(m(ig, "xzy", 0) && !m(ig, "x/y", 0));
  CHECK(m(ig, "foo/bar", 0) && !m(ig, "z/foo/bar", 0));
  mb_ignore_free(ig);

  /* no exponential backtracking: many stars against a long non-matching name */
  ig = rules("*a*a*a*a*a*a*a*a*a*a*b\n**/**/**/**/**/**/q\n");
  char longname[4001];
  memset(longname, 'a', 4000);
  longname[4000] = 0;
  CHECK(!m(ig, longname, 0));
  char deep[4001];
  for (int i = 0; i < 2000; i++) { deep[2 * i] = 'd'; deep[2 * i + 1] = '/'; }
  deep[3999] = 'x';
  deep[4000] = 0;
  CHECK(!m(ig, deep, 0));
  mb_ignore_free(ig);
}

static void test_ignore_frames(void) {
  mb_ignore *ig = mb_ignore_new(1 << 16);
  CHECK(mb_ignore_push(ig, "", 0, "*.o\n!keep.o\n", 12, MB_IGNORE_FILE, NULL) == 0);
  CHECK(mb_ignore_push(ig, "sub", 3, "keep.o\n!x.o\n/only\n", 19, MB_IGNORE_FILE, NULL) == 0);
  CHECK(m(ig, "a.o", 0) && !m(ig, "keep.o", 0));
  CHECK(m(ig, "sub/keep.o", 0));          /* the deeper file decides */
  CHECK(!m(ig, "sub/x.o", 0));            /* and re-includes */
  CHECK(m(ig, "sub/only", 0) && !m(ig, "only", 0) && !m(ig, "sub/d/only", 0)); /* anchored to sub/ */
  CHECK(!m(ig, "subway/keep.o", 0));      /* "sub" is a directory prefix, not a string prefix */
  size_t d = mb_ignore_depth(ig);
  CHECK(d == 2);
  /* the caller's patterns win over the files, negations included only among themselves */
  CHECK(mb_ignore_push(ig, "", 0, "keep.o\n", 7, MB_IGNORE_CALLER, NULL) == 0);
  CHECK(m(ig, "keep.o", 0));
  CHECK(mb_ignore_push(ig, "", 0, "!a.o\n", 5, MB_IGNORE_CALLER, NULL) == 0);
  CHECK(m(ig, "a.o", 0));                 /* a caller's negation does not beat a file's rule */
  mb_ignore_pop_to(ig, 1);
  CHECK(mb_ignore_depth(ig) == 1 && m(ig, "sub/x.o", 0) && !m(ig, "keep.o", 0));
  mb_ignore_free(ig);

  /* limits: a frame that does not fit is not added */
  CHECK(mb_ignore_new(8) == NULL);
  ig = mb_ignore_new(1200);
  int why = 0;
  char big[2000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = 0;
  CHECK(mb_ignore_push(ig, "", 0, big, strlen(big), MB_IGNORE_FILE, &why) == -1 && why == 1);
  CHECK(mb_ignore_depth(ig) == 0 && mb_ignore_patterns(ig) == 0);
  CHECK(mb_ignore_push(ig, "", 0, "a\n", 2, MB_IGNORE_FILE, &why) == 0 && m(ig, "a", 0));
  mb_ignore_free(ig);
  mb_ignore_free(NULL);
}

/* ---- paths ---- */

static void test_check_path(void) {
  struct mb_error e = {0};
  CHECK(mb_sync_check_path("a/b.c", 5, &e) == 0);
  CHECK(mb_sync_check_path("...", 3, &e) == 0);
  static const char *bad[][2] = {{"", "empty"}, {"/etc/passwd", "absolute"}, {"a/../../x", "'..'"},
                                 {"..", "'..'"}, {"a//b", "empty path component"}, {"a/", "empty"},
                                 {"./a", "'.'"}, {"a/./b", "'.'"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memset(&e, 0, sizeof e);
    CHECK(mb_sync_check_path(bad[i][0], strlen(bad[i][0]), &e) == -1);
    CHECK_STR(mb_error_code(&e), "SYNC_UNSAFE_ENTRY");
    CHECK_HAS(e.message, bad[i][1]);
  }
  CHECK(mb_sync_check_path("a\0b", 3, &e) == -1);
  CHECK_HAS(e.message, "NUL");
  static char lng[MB_SYNC_PATH_MAX + 2];
  memset(lng, 'a', sizeof lng - 1);
  CHECK(mb_sync_check_path(lng, sizeof lng - 1, &e) == -1);
  CHECK_HAS(e.message, "over");
}

static void test_roots(void) {
  fresh();
  struct mb_error e = {0};
  char p[1024];
  path_of(p, sizeof p, "missing");
  CHECK(mb_sync_root_open(p, &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_NOT_FOUND");
  put("file", "x");
  path_of(p, sizeof p, "file");
  CHECK(mb_sync_root_open(p, &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_NOT_DIRECTORY");
  mb_sync_root *r = mb_sync_root_open(tmp_root, &e);
  CHECK(r != NULL);
  CHECK_STR(mb_sync_root_path(r), tmp_root);
  /* lstat through the safe walk: absent, a link parent refused, a file parent */
  struct mb_sync_entry en;
  char link[256];
  CHECK(mb_sync_lstat(r, "nope/x", &en, link, sizeof link, &e) == 0);
  CHECK(mb_sync_lstat(r, "file", &en, link, sizeof link, &e) == 1 && en.type == MB_SYNC_FILE && en.size == 1);
  path_of(p, sizeof p, "ln");
  CHECK(symlink("/tmp", p) == 0);
  CHECK(mb_sync_lstat(r, "ln", &en, link, sizeof link, &e) == 1 && en.type == MB_SYNC_LINK);
  CHECK_STR(en.link, "/tmp");
  CHECK(mb_sync_lstat(r, "ln/x", &en, link, sizeof link, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_UNSAFE_PATH");
  CHECK_HAS(e.message, "symbolic link");
  CHECK(mb_sync_lstat(r, "file/x", &en, link, sizeof link, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_NOT_DIRECTORY");
  CHECK(mb_sync_lstat(r, "../x", &en, link, sizeof link, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_UNSAFE_ENTRY");
  CHECK(mb_sync_lstat(r, "ln", &en, link, 3, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_TOO_LARGE");
  mb_sync_root_close(r);
  mb_sync_root_close(NULL);
}

/* ---- scans ---- */

static mb_sync_scan *scan_all(mb_sync_root *r, struct mb_sync_scan_opts *o, struct mb_error *e, size_t budget) {
  mb_sync_scan *s = mb_sync_scan_new(r, o, e);
  if (!s) return NULL;
  int rc;
  while ((rc = mb_sync_scan_step(s, budget, e)) == 0) {
  }
  if (rc < 0) {
    mb_sync_scan_free(s);
    return NULL;
  }
  return s;
}

static struct mb_sync_scan_opts big_opts(void) {
  return (struct mb_sync_scan_opts){.max_entries = 1000, .max_bytes = 1 << 20, .max_meta = 1 << 20};
}

static const struct mb_sync_entry *find(mb_sync_scan *s, const char *path) {
  for (size_t i = 0; i < mb_sync_scan_count(s); i++)
    if (strcmp(mb_sync_scan_entry(s, i)->path, path) == 0) return mb_sync_scan_entry(s, i);
  return NULL;
}

static void make_tree(void) {
  fresh();
  mkd("a");
  mkd("a/b");
  mkd("empty");
  mkd("node_modules");
  mkd(".moonbox-sync-1-x.tmp");
  put("a/x.txt", "hello");
  put("a/b/y.log", "log");
  put("a/b/keep.log", "keep");
  put("node_modules/m.js", "m");
  put("top.c", "int main;");
  put(".gitignore", "*.log\n!keep.log\nnode_modules/\n");
  put("a/.gitignore", "x.txt\n");
  char p[1024];
  path_of(p, sizeof p, "a/link");
  if (symlink("../../outside", p) != 0) exit(2);
  path_of(p, sizeof p, "a/x.txt");
  chmod(p, 0750);
}

static void test_scan(void) {
  make_tree();
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(tmp_root, &e);
  struct mb_sync_scan_opts o = big_opts();
  mb_sync_scan *s = scan_all(r, &o, &e, 1);   /* one directory per step */
  CHECK(s != NULL);
  if (!s) return;
  /* everything but the staging directory; links are links; the root is entry 0 */
  CHECK(mb_sync_scan_entry(s, 0)->type == MB_SYNC_DIR && mb_sync_scan_entry(s, 0)->plen == 0);
  CHECK_INT(mb_sync_scan_count(s), 13);
  CHECK(find(s, ".moonbox-sync-1-x.tmp") == NULL);
  const struct mb_sync_entry *x = find(s, "a/x.txt");
  CHECK(x && x->type == MB_SYNC_FILE && x->size == 5 && x->mode == 0750 && !x->hashed);
  const struct mb_sync_entry *l = find(s, "a/link");
  CHECK(l && l->type == MB_SYNC_LINK && strcmp(l->link, "../../outside") == 0);
  CHECK(find(s, "empty") && find(s, "empty")->type == MB_SYNC_DIR);
  CHECK_INT(mb_sync_scan_bytes(s), 5 + 3 + 4 + 1 + 9 + strlen("*.log\n!keep.log\nnode_modules/\n") + 6);
  /* parents come before their children */
  for (size_t i = 1; i < mb_sync_scan_count(s); i++) {
    const char *p = mb_sync_scan_entry(s, i)->path, *sl = strrchr(p, '/');
    if (!sl) continue;
    int seen = 0;
    for (size_t j = 1; j < i; j++)
      if (strlen(mb_sync_scan_entry(s, j)->path) == (size_t)(sl - p) && strncmp(mb_sync_scan_entry(s, j)->path, p, (size_t)(sl - p)) == 0) seen = 1;
    CHECK(seen);
  }
  mb_sync_scan_free(s);

  /* with .gitignore rules (nested, negation, a directory pruned) and the caller's own */
  o.gitignore = 1;
  o.exclude = "top.c\n";
  o.exclude_len = 6;
  s = scan_all(r, &o, &e, 100);
  CHECK(s != NULL);
  if (s) {
    CHECK(find(s, "a/b/y.log") == NULL && find(s, "a/b/keep.log") != NULL);
    CHECK(find(s, "node_modules") == NULL && find(s, "node_modules/m.js") == NULL);
    CHECK(find(s, "a/x.txt") == NULL && find(s, "top.c") == NULL && find(s, ".gitignore") != NULL);
    CHECK_INT(mb_sync_scan_excluded(s), 4);
    mb_sync_scan_free(s);
  }
  /* keep_excluded: excluded entries are recorded, flagged, not descended */
  o.keep_excluded = 1;
  s = scan_all(r, &o, &e, 100);
  CHECK(s != NULL);
  if (s) {
    const struct mb_sync_entry *nm = find(s, "node_modules");
    CHECK(nm && nm->excluded && nm->type == MB_SYNC_DIR);
    CHECK(find(s, "node_modules/m.js") == NULL);
    mb_sync_scan_free(s);
  }

  /* limits, each naming the field and the entry */
  o = big_opts();
  o.max_entries = 3;
  CHECK(scan_all(r, &o, &e, 100) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_TOO_MANY_FILES");
  CHECK_HAS(e.message, "maxFiles");
  CHECK(e.path[0] != 0);
  o = big_opts();
  o.max_bytes = 4;
  CHECK(scan_all(r, &o, &e, 100) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_TOO_LARGE");
  CHECK_HAS(e.message, "maxBytes");
  o = big_opts();
  o.max_meta = 200;
  CHECK(scan_all(r, &o, &e, 100) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_TOO_LARGE");
  CHECK_HAS(e.message, "maxMetaBytes");
  o = big_opts();
  o.max_meta = 1 << 20;
  o.exclude = "x\n";
  o.exclude_len = 2;
  o.max_meta = 100;
  CHECK(mb_sync_scan_new(r, &o, &e) == NULL || 1);
  /* a gitignore over the budget */
  o = big_opts();
  o.gitignore = 1;
  o.max_meta = 40000;
  char big[50000];
  memset(big, 'z', sizeof big - 2);
  big[sizeof big - 2] = '\n';
  big[sizeof big - 1] = 0;
  put("empty/.gitignore", big);
  CHECK(scan_all(r, &o, &e, 100) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_TOO_LARGE");
  CHECK_HAS(e.path, ".gitignore");
  char p[1024];
  path_of(p, sizeof p, "empty/.gitignore");
  unlink(p);

  /* FIFOs and sockets are refused by name (device files need root: see the specs) */
  path_of(p, sizeof p, "a/fifo");
  CHECK(mkfifo(p, 0644) == 0);
  o = big_opts();
  CHECK(scan_all(r, &o, &e, 100) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_UNSUPPORTED_TYPE");
  CHECK_STR(e.path, "a/fifo");
  CHECK_HAS(e.message, "FIFO");
  unlink(p);
  path_of(p, sizeof p, "sock");
  int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(p) >= sizeof sa.sun_path) exit(2);
  memcpy(sa.sun_path, p, strlen(p) + 1);
  CHECK(bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0);
  CHECK(scan_all(r, &o, &e, 100) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_UNSUPPORTED_TYPE");
  CHECK_HAS(e.message, "socket");
  close(sfd);
  unlink(p);
  /* ...unless excluded */
  CHECK(mkfifo(p, 0644) == 0);
  o.exclude = "sock\n";
  o.exclude_len = 5;
  s = scan_all(r, &o, &e, 100);
  CHECK(s != NULL);
  mb_sync_scan_free(s);
  unlink(p);

  /* a directory replaced by a link between two steps: SYNC_CHANGED, not followed */
  o = big_opts();
  s = mb_sync_scan_new(r, &o, &e);
  CHECK(s && mb_sync_scan_step(s, 1, &e) == 0); /* the root only */
  sh("mv '%s/a' '%s/a.moved' && ln -s /etc '%s/a'", tmp_root, tmp_root, tmp_root);
  int rc;
  while ((rc = mb_sync_scan_step(s, 1, &e)) == 0) {
  }
  CHECK(rc == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_CHANGED");
  CHECK(mb_sync_scan_step(s, 1, &e) == -1); /* unusable after a failure */
  mb_sync_scan_free(s);
  mb_sync_root_close(r);
}

/* ---- packs and unpacks ---- */

static size_t drain(mb_pack *k, const char *file, struct mb_error *e) {
  FILE *f = fopen(file, "wb");
  char buf[7000];
  size_t total = 0;
  ssize_t n;
  while ((n = mb_pack_read(k, buf, sizeof buf)) > 0) {
    fwrite(buf, 1, (size_t)n, f);
    total += (size_t)n;
  }
  fclose(f);
  if (n < 0 && e) *e = *mb_pack_error(k);
  return n < 0 ? 0 : total;
}

static mb_unpack *unpack_all(mb_sync_root *r, const char *archive, const char *stage, uint64_t max_entries,
                             uint64_t max_bytes, struct mb_error *e) {
  mb_unpack *u = mb_unpack_new(r, archive, stage, "p", max_entries, max_bytes, e);
  if (!u) return NULL;
  int rc;
  while ((rc = mb_unpack_step(u, 3000, e)) == 0) {
  }
  if (rc < 0) {
    mb_unpack_free(u);
    return NULL;
  }
  return u;
}

static void test_pack_roundtrip(void) {
  make_tree();
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(tmp_root, &e);
  static char big[300000];
  for (size_t i = 0; i < sizeof big - 1; i++) big[i] = (char)('a' + i % 26);
  big[sizeof big - 1] = 0;
  put("a/big", big);
  struct mb_sync_scan_opts o = big_opts();
  mb_sync_scan *s = scan_all(r, &o, &e, 100);
  mb_pack *k = mb_pack_new(r, s, &e);
  CHECK(k != NULL);
  char archive[512];
  snprintf(archive, sizeof archive, "%s.tar", tmp_root);
  size_t n = drain(k, archive, &e);
  CHECK(n > sizeof big && n % 512 == 0);
  struct mb_pack_progress pr;
  mb_pack_progress(k, &pr);
  CHECK(pr.bytes_out == n && pr.files_done == 8 && pr.bytes_in == mb_sync_scan_bytes(s));
  CHECK(mb_pack_read(k, big, 10) == 0); /* the end stays the end */
  mb_pack_free(k);
  const struct mb_sync_entry *b = find(s, "a/big");
  char hx[65], want[65];
  sha_hex(big, strlen(big), want);
  for (int i = 0; i < 32; i++) snprintf(hx + 2 * i, 3, "%02x", b->sha256[i]);
  CHECK(b->hashed);
  CHECK_STR(hx, want);

  mkd("stage");
  mb_unpack *u = unpack_all(r, archive, "stage", 100, 1 << 20, &e);
  CHECK(u != NULL);
  if (u) {
    /* every entry but the root ("." places nothing), with the hashes the pack computed */
    CHECK_INT(mb_unpack_count(u), mb_sync_scan_count(s) - 1);
    for (size_t i = 0; i < mb_unpack_count(u); i++) {
      const struct mb_unpack_item *it = mb_unpack_item(u, i);
      const struct mb_sync_entry *en = find(s, it->path);
      if (!CHECK(en != NULL)) continue;
      CHECK(it->type == en->type && it->mode == en->mode);
      if (en->type == MB_SYNC_FILE) CHECK(memcmp(it->sha256, en->sha256, 32) == 0 && it->size == en->size);
      if (en->type == MB_SYNC_LINK) CHECK_STR(it->link, en->link);
      if (en->type != MB_SYNC_LINK) CHECK(it->mtime_s == en->mtime_s && it->mtime_ns == en->mtime_ns);
    }
    mb_unpack_free(u);
  }
  mb_sync_scan_free(s);
  mb_sync_root_close(r);
  unlink(archive);
}

/* A tar file written here, entry by entry: whatever a hostile peer could send. */
struct craft {
  struct archive *a;
  struct archive_entry *e;
};

static void craft_open(struct craft *c, const char *file) {
  c->a = archive_write_new();
  archive_write_set_format_pax_restricted(c->a);
  archive_write_open_filename(c->a, file);
  c->e = archive_entry_new();
}

static void craft_add(struct craft *c, const char *path, int type, const char *data, const char *link) {
  archive_entry_clear(c->e);
  archive_entry_copy_pathname(c->e, path);
  archive_entry_set_filetype(c->e, (unsigned)type);
  archive_entry_set_perm(c->e, 0640);
  archive_entry_set_mtime(c->e, 1000000000, 5);
  if (type == AE_IFLNK) archive_entry_copy_symlink(c->e, link);
  if (type == AE_IFREG && link) archive_entry_copy_hardlink(c->e, link);
  archive_entry_set_size(c->e, data ? (la_int64_t)strlen(data) : 0);
  archive_write_header(c->a, c->e);
  if (data) archive_write_data(c->a, data, strlen(data));
}

static void craft_close(struct craft *c) {
  archive_entry_free(c->e);
  archive_write_close(c->a);
  archive_write_free(c->a);
}

static void test_unpack(void) {
  fresh();
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(tmp_root, &e);
  mkd("stage");
  char archive[512];
  snprintf(archive, sizeof archive, "%s.tar", tmp_root);
  struct craft c;
  /* a good one: files staged under our names with their mode, mtime and hash; links staged */
  craft_open(&c, archive);
  craft_add(&c, "./d", AE_IFDIR, NULL, NULL);
  craft_add(&c, "./d/f", AE_IFREG, "content", NULL);
  craft_add(&c, "l", AE_IFLNK, NULL, "/etc/passwd");
  craft_close(&c);
  mb_unpack *u = unpack_all(r, archive, "stage", 10, 100, &e);
  CHECK(u != NULL);
  if (u) {
    CHECK_INT(mb_unpack_count(u), 3);
    const struct mb_unpack_item *d = mb_unpack_item(u, 0), *f = mb_unpack_item(u, 1), *l = mb_unpack_item(u, 2);
    CHECK(d->type == MB_SYNC_DIR && strcmp(d->path, "d") == 0);
    CHECK(f->type == MB_SYNC_FILE && strcmp(f->path, "d/f") == 0 && f->size == 7 && f->mode == 0640);
    CHECK(f->mtime_s == 1000000000);
    char hx[65], want[65];
    sha_hex("content", 7, want);
    for (int i = 0; i < 32; i++) snprintf(hx + 2 * i, 3, "%02x", f->sha256[i]);
    CHECK_STR(hx, want);
    CHECK_STR(f->staged, "pf1");
    char p[1024];
    path_of(p, sizeof p, "stage/pf1");
    struct stat st;
    CHECK(stat(p, &st) == 0 && st.st_size == 7 && (st.st_mode & 0777) == 0640 && st.st_mtime == 1000000000);
    CHECK(l->type == MB_SYNC_LINK && strcmp(l->link, "/etc/passwd") == 0);
    path_of(p, sizeof p, "stage/pl2");
    char t[64] = {0};
    CHECK(readlink(p, t, sizeof t - 1) == 11 && strcmp(t, "/etc/passwd") == 0);
    CHECK(mb_unpack_item(u, 3) == NULL);
    mb_unpack_free(u);
  }
  /* every hostile entry is refused, named */
  static const struct { const char *name; int type; const char *data, *link, *code, *what; } bad[] = {
      {"../evil", AE_IFREG, "x", NULL, "SYNC_UNSAFE_ENTRY", "'..'"},
      {"a/../../evil", AE_IFREG, "x", NULL, "SYNC_UNSAFE_ENTRY", "'..'"},
      {"/etc/evil", AE_IFREG, "x", NULL, "SYNC_UNSAFE_ENTRY", "absolute"},
      {"hard", AE_IFREG, NULL, "/etc/passwd", "SYNC_UNSAFE_ENTRY", "hard link"},
      {"hard2", AE_IFREG, NULL, "../x", "SYNC_UNSAFE_ENTRY", "hard link"},
      {"dev", AE_IFCHR, NULL, NULL, "SYNC_UNSAFE_ENTRY", "device"},
      {"blk", AE_IFBLK, NULL, NULL, "SYNC_UNSAFE_ENTRY", "device"},
      {"fifo", AE_IFIFO, NULL, NULL, "SYNC_UNSAFE_ENTRY", "FIFO"},
      {".", AE_IFREG, "x", NULL, "SYNC_UNSAFE_ENTRY", "'.'"},
      {"x//y", AE_IFREG, "x", NULL, "SYNC_UNSAFE_ENTRY", "empty"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    craft_open(&c, archive);
    craft_add(&c, "ok", AE_IFREG, "fine", NULL);
    craft_add(&c, bad[i].name, bad[i].type, bad[i].data, bad[i].link);
    craft_close(&c);
    sh("rm -rf '%s/stage' && mkdir '%s/stage'", tmp_root, tmp_root);
    memset(&e, 0, sizeof e);
    u = unpack_all(r, archive, "stage", 10, 100, &e);
    if (!CHECK(u == NULL)) { fprintf(stderr, "     entry %s\n", bad[i].name); mb_unpack_free(u); continue; }
    CHECK_STR(mb_error_code(&e), bad[i].code);
    CHECK_HAS(e.message, bad[i].what);
    CHECK(e.path[0] != 0);
  }
  /* nothing was ever written outside the staging directory */
  struct stat st;
  char p[1024];
  path_of(p, sizeof p, "../evil");
  CHECK(lstat(p, &st) < 0);
  /* limits */
  craft_open(&c, archive);
  craft_add(&c, "a", AE_IFREG, "12345", NULL);
  craft_add(&c, "b", AE_IFREG, "12345", NULL);
  craft_close(&c);
  sh("rm -rf '%s/stage' && mkdir '%s/stage'", tmp_root, tmp_root);
  CHECK(unpack_all(r, archive, "stage", 1, 100, &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_TOO_MANY_FILES");
  CHECK_STR(e.path, "b");
  sh("rm -rf '%s/stage' && mkdir '%s/stage'", tmp_root, tmp_root);
  CHECK(unpack_all(r, archive, "stage", 10, 8, &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_TOO_LARGE");
  CHECK_STR(e.path, "b");
  /* malformed: truncated, garbage, compressed (no decompression filter) */
  sh("rm -rf '%s/stage' && mkdir '%s/stage' && head -c 700 '%s' > '%s.cut'", tmp_root, tmp_root, archive, archive);
  char cut[600];
  snprintf(cut, sizeof cut, "%s.cut", archive);
  CHECK(unpack_all(r, cut, "stage", 10, 100, &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_BAD_ARCHIVE");
  sh("head -c 3000 /dev/urandom > '%s'", cut);
  CHECK(unpack_all(r, cut, "stage", 10, 100, &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_BAD_ARCHIVE");
  sh("gzip -c '%s' > '%s'", archive, cut);
  CHECK(unpack_all(r, cut, "stage", 10, 100, &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_BAD_ARCHIVE");
  unlink(cut);
  /* bad arguments */
  CHECK(mb_unpack_new(r, archive, "stage", "a/b", 10, 10, &e) == NULL);
  CHECK(mb_unpack_new(r, archive, "nostage", "", 10, 10, &e) == NULL);
  CHECK(mb_unpack_new(r, "/nonexistent.tar", "stage", "", 10, 10, &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_BAD_ARCHIVE");
  mb_sync_root_close(r);
  unlink(archive);
}

/* A file that changes between the scan and its archiving, or while it is read. */
static void test_pack_changes(void) {
  fresh();
  put("f", "0123456789");
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(tmp_root, &e);
  struct mb_sync_scan_opts o = big_opts();
  char archive[512];
  snprintf(archive, sizeof archive, "%s.tar", tmp_root);
  static const char *how[] = {"grown", "replaced", "gone", "link"};
  for (int i = 0; i < 4; i++) {
    put("f", "0123456789");
    mb_sync_scan *s = scan_all(r, &o, &e, 100);
    if (i == 0) put("f", "0123456789abc");
    if (i == 1) sh("rm '%s/f' && echo 0123456789 > '%s/f'", tmp_root, tmp_root);
    if (i == 2) sh("rm '%s/f'", tmp_root);
    if (i == 3) sh("rm '%s/f' && ln -s /etc/passwd '%s/f'", tmp_root, tmp_root);
    mb_pack *k = mb_pack_new(r, s, &e);
    memset(&e, 0, sizeof e);
    CHECK(drain(k, archive, &e) == 0);
    if (!CHECK(mb_error_code(&e) && strcmp(mb_error_code(&e), "SYNC_CHANGED") == 0)) fprintf(stderr, "     %s: %s\n", how[i], e.message);
    CHECK(mb_pack_read(k, archive, 1) == -1); /* stays failed */
    mb_pack_free(k);
    mb_sync_scan_free(s);
    sh("rm -f '%s/f'", tmp_root);
  }
  mb_sync_root_close(r);
  unlink(archive);
}

/* ---- hashing ---- */

static void test_hash(void) {
  fresh();
  static char data[200000];
  for (size_t i = 0; i < sizeof data - 1; i++) data[i] = (char)(i % 251 + 1);
  data[sizeof data - 1] = 0;
  put("h", data);
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(tmp_root, &e);
  mb_sync_hash *h = mb_sync_hash_open(r, "h", &e);
  CHECK(h != NULL);
  char hex[65], want[65], ver[MB_SYNC_VERSION_MAX];
  uint64_t size = 0;
  int rc, steps = 0;
  while ((rc = mb_sync_hash_step(h, 65536, hex, &size, ver, &e)) == 0) steps++;
  CHECK(rc == 1 && steps >= 2 && size == strlen(data));
  sha_hex(data, strlen(data), want);
  CHECK_STR(hex, want);
  mb_sync_hash_free(h);
  /* changed while read */
  h = mb_sync_hash_open(r, "h", &e);
  CHECK(mb_sync_hash_step(h, 65536, hex, &size, ver, &e) == 0);
  put("h", "short");
  while ((rc = mb_sync_hash_step(h, 65536, hex, &size, ver, &e)) == 0) {
  }
  CHECK(rc == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_CHANGED");
  mb_sync_hash_free(h);
  /* not a regular file; missing */
  mkd("dir");
  CHECK(mb_sync_hash_open(r, "dir", &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_CHANGED");
  char p[1024];
  path_of(p, sizeof p, "ln");
  CHECK(symlink("h", p) == 0);
  CHECK(mb_sync_hash_open(r, "ln", &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_CHANGED");
  CHECK(mb_sync_hash_open(r, "missing", &e) == NULL);
  CHECK_STR(mb_error_code(&e), "SYNC_NOT_FOUND");
  mb_sync_hash_free(NULL);
  mb_sync_root_close(r);
}

/* ---- placements ---- */

static void version_of(const char *rel, char out[MB_SYNC_VERSION_MAX]) {
  char p[1024];
  struct stat st;
  path_of(p, sizeof p, rel);
  if (lstat(p, &st) < 0) exit(2);
  mb_sync_version(&st, out);
}

static void test_place(void) {
  fresh();
  mkd("stage");
  mkd("d");
  put("stage/f1", "new");
  put("stage/f2", "new2");
  put("d/old", "old");
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(tmp_root, &e);
  char v[MB_SYNC_VERSION_MAX];
  /* expect absent */
  CHECK(mb_sync_place(r, "stage/f1", "d/new", "absent", &e) == 0);
  CHECK(mb_sync_place(r, "stage/f2", "d/new", "absent", &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  /* expect a version: the right one, then a stale one */
  version_of("d/old", v);
  CHECK(mb_sync_place(r, "stage/f2", "d/old", v, &e) == 0);
  put("stage/f3", "x");
  CHECK(mb_sync_place(r, "stage/f3", "d/old", v, &e) == -1); /* the rename gave it a new inode */
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  CHECK(mb_sync_place(r, "stage/f3", "d/gone", "1:2:3:4:5", &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  CHECK(mb_sync_place(r, "stage/f3", "d", NULL, &e) == -1); /* never over a directory */
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  /* never through a symlinked parent, never into a missing one */
  char p[1024];
  char outside[512];
  snprintf(outside, sizeof outside, "%s.outside", tmp_root);
  mkdir(outside, 0755);
  path_of(p, sizeof p, "ln");
  CHECK(symlink(outside, p) == 0);
  CHECK(mb_sync_place(r, "stage/f3", "ln/x", NULL, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_UNSAFE_PATH");
  CHECK(mb_sync_place(r, "stage/f3", "no/x", NULL, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_NOT_FOUND");
  CHECK(mb_sync_mkdir(r, "ln/sub", 0755, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_UNSAFE_PATH");
  CHECK(mb_sync_unlink(r, "ln/x", NULL, &e) == -1);
  CHECK(mb_sync_rmdir(r, "ln/x", &e) == -1);
  CHECK(mb_sync_chmod(r, "ln/x", 0600, NULL, &e) == -1);
  struct stat st;
  char ox[600];
  snprintf(ox, sizeof ox, "%s/x", outside);
  CHECK(lstat(ox, &st) < 0);
  /* mkdir: made with the mode, an existing directory only gets the mode, a file is a conflict */
  CHECK(mb_sync_mkdir(r, "d/sub", 0711, &e) == 0);
  path_of(p, sizeof p, "d/sub");
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0711);
  CHECK(mb_sync_mkdir(r, "d/sub", 0755, &e) == 0);
  CHECK(stat(p, &st) == 0 && (st.st_mode & 0777) == 0755);
  CHECK(mb_sync_mkdir(r, "d/new", 0755, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  /* chmod: checked, never a link */
  version_of("d/new", v);
  CHECK(mb_sync_chmod(r, "d/new", 0604, v, &e) == 0);
  CHECK(mb_sync_chmod(r, "d/new", 0600, "absent", &e) == -1);
  CHECK(mb_sync_chmod(r, "d/none", 0600, NULL, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  CHECK(mb_sync_chmod(r, "ln", 0600, NULL, &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  /* unlink: checked; a directory is a conflict; an absent file is fine */
  CHECK(mb_sync_unlink(r, "d/new", "1:1:1:1:1", &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_CONFLICT");
  CHECK(mb_sync_unlink(r, "d/sub", NULL, &e) == -1);
  CHECK(mb_sync_unlink(r, "d/new", NULL, &e) == 0);
  CHECK(mb_sync_unlink(r, "d/new", NULL, &e) == 0);
  /* rmdir: not empty */
  CHECK(mb_sync_rmdir(r, "d", &e) == -1);
  CHECK_STR(mb_error_code(&e), "SYNC_NOT_EMPTY");
  CHECK(mb_sync_rmdir(r, "d/sub", &e) == 0);
  /* rmtree never follows a link out of the tree */
  put("keep-outside", "x");
  snprintf(ox, sizeof ox, "%s/victim", outside);
  FILE *f = fopen(ox, "w");
  fputs("precious", f);
  fclose(f);
  mkd("tree");
  mkd("tree/sub");
  path_of(p, sizeof p, "tree/sub/escape");
  CHECK(symlink(outside, p) == 0);
  put("tree/sub/file", "x");
  CHECK(mb_sync_rmtree(r, "tree", &e) == 0);
  path_of(p, sizeof p, "tree");
  CHECK(lstat(p, &st) < 0);
  CHECK(stat(ox, &st) == 0);
  CHECK(mb_sync_rmtree(r, "tree", &e) == 0); /* absent: fine */
  CHECK(mb_sync_rmtree(r, "ln/x", &e) == -1);
  sh("rm -rf '%s'", outside);
  mb_sync_root_close(r);
}

static void test_sweep(void) {
  fresh();
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, NULL, 0);
  char name[128];
  snprintf(name, sizeof name, ".moonbox-sync-%d-aa.tmp", (int)dead);
  mkd(name);
  char sub[256];
  snprintf(sub, sizeof sub, "%s/f", name);
  put(sub, "x");
  char mine[128];
  snprintf(mine, sizeof mine, ".moonbox-sync-%d-bb.tmp", (int)getpid());
  mkd(mine);
  mkd(".moonbox-sync-1-cc.tmp"); /* init: alive */
  mkd("other");
  struct mb_error e = {0};
  mb_sync_root *r = mb_sync_root_open(tmp_root, &e);
  CHECK_INT(mb_sync_sweep(r), 1);
  char p[1024];
  struct stat st;
  path_of(p, sizeof p, name);
  CHECK(lstat(p, &st) < 0);
  path_of(p, sizeof p, mine);
  CHECK(lstat(p, &st) == 0);
  path_of(p, sizeof p, "other");
  CHECK(lstat(p, &st) == 0);
  mb_sync_root_close(r);
}

int main(void) {
  MBT_RUN(test_ignore_patterns);
  MBT_RUN(test_ignore_frames);
  MBT_RUN(test_check_path);
  MBT_RUN(test_roots);
  MBT_RUN(test_scan);
  MBT_RUN(test_pack_roundtrip);
  MBT_RUN(test_unpack);
  MBT_RUN(test_pack_changes);
  MBT_RUN(test_hash);
  MBT_RUN(test_place);
  MBT_RUN(test_sweep);
  if (tmp_root[0]) sh("rm -rf '%s'", tmp_root);
  return mbt_report();
}
