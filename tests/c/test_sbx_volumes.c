/* test_sbx_volumes.c — persistent volumes (sandboxd/volumes.c) against a real state directory:
 * the catalogue (names, tokens, persistence, deletion refused while mounted and deferred while
 * accessed), and the content API's operations with their owners, modes and refusals; every path
 * stays inside its volume (".." and symlinks pointing out resolve inside it). Links no HTTP code. */
#include "mbtest.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "volumes.h"

static char state[64] = "/tmp/mb-volumes-XXXXXX", msg[600];
static vol_idmap map;
static bool root;

static json_t *got;
#define OUT(call) (json_decref(got), got = NULL, (call))
static const char *sget(const char *k) { return json_string_value(json_object_get(got, k)); }
static long long iget(const char *k) { return json_integer_value(json_object_get(got, k)); }

static void host_path(const vol_info *in, const char *rel, char *out, size_t n) { snprintf(out, n, "%s/volumes/%s%s", state, in->id, rel); }

static void test_catalogue(void) {
  vol_info a, b, c;
  CHECK_INT(vol_create("data", &a, msg, sizeof msg), 0);
  CHECK_INT(strlen(a.id), VOL_ID_LEN);
  CHECK(a.id[14] == '4');                                  /* a version 4 UUID */
  CHECK_INT(strlen(a.token), VOL_TOKEN_LEN);
  CHECK_INT(vol_create("data", &c, msg, sizeof msg), 400);   /* E2B's answer for a taken name */
  CHECK_HAS(msg, "Volume with name 'data' already exists");
  const char *bads[] = {"", "has space", "a/b", "dot.name"};
  for (size_t i = 0; i < 4; i++) {
    CHECK_INT(vol_create(bads[i], &c, msg, sizeof msg), 400);
    CHECK_HAS(msg, "field 'name'");
  }
  char longname[200];
  memset(longname, 'x', VOL_NAME_MAX + 1);
  longname[VOL_NAME_MAX + 1] = 0;
  CHECK_INT(vol_create(longname, &c, msg, sizeof msg), 400);
  CHECK_INT(vol_create("Mixed_Case-2", &b, msg, sizeof msg), 0);
  size_t n;
  vol_info *all = vol_list(&n);
  CHECK(n == 2 && !strcmp(all[0].name, "data") && !strcmp(all[1].name, "Mixed_Case-2"));   /* oldest first */
  free(all);
  CHECK_INT(vol_get(a.id, &c), 0);
  CHECK_STR(c.token, a.token);
  CHECK_INT(vol_get("nope", &c), 404);
  /* tokens: only the volume's own */
  int st = 0;
  volume *v = vol_access(a.id, b.token, &st, msg, sizeof msg);
  CHECK(v == NULL && st == 401);
  CHECK(vol_access(a.id, NULL, &st, msg, sizeof msg) == NULL && st == 401);
  CHECK(vol_access("00000000-0000-4000-8000-000000000000", a.token, &st, msg, sizeof msg) == NULL && st == 404);
  /* a mounted volume cannot be deleted; an accessed one goes once the access ends */
  volume *m = vol_mount("data", &st, msg, sizeof msg);
  CHECK(m != NULL);
  CHECK(vol_mount("nope", &st, msg, sizeof msg) == NULL && st == 400);
  CHECK_HAS(msg, "volume 'nope' not found");
  CHECK_INT(vol_delete(a.id, msg, sizeof msg), 409);
  CHECK_HAS(msg, "mounted in 1 running sandbox");
  vol_unmount(m);
  v = vol_access(a.id, a.token, &st, msg, sizeof msg);
  CHECK(v != NULL);
  CHECK_INT(vol_delete(a.id, msg, sizeof msg), 0);
  CHECK_INT(vol_get(a.id, &c), 404);
  char p[300];
  host_path(&a, "", p, sizeof p);
  CHECK(access(p, F_OK) == 0);           /* still in use */
  vol_put(v);
  CHECK(access(p, F_OK) != 0);           /* gone with the last user */
  CHECK_INT(vol_delete(a.id, msg, sizeof msg), 404);
  /* persistence */
  vol_shutdown();
  CHECK_INT(vol_init(state, &map, msg, sizeof msg), 0);
  all = vol_list(&n);
  CHECK(n == 1 && !strcmp(all[0].id, b.id) && !strcmp(all[0].token, b.token));
  free(all);
  CHECK_INT(vol_delete(b.id, msg, sizeof msg), 0);
  /* an unreadable catalogue is an error, not an empty one */
  vol_shutdown();
  char cat[200];
  snprintf(cat, sizeof cat, "%s/volumes.json", state);
  FILE *f = fopen(cat, "w");
  fputs("{\"version\":1,\"volumes\":", f);
  fclose(f);
  CHECK_INT(vol_init(state, &map, msg, sizeof msg), -1);
  CHECK_HAS(msg, "volumes.json");
  unlink(cat);
  CHECK_INT(vol_init(state, &map, msg, sizeof msg), 0);
}

static void test_content(void) {
  vol_info in;
  CHECK_INT(vol_create("content", &in, msg, sizeof msg), 0);
  int st = 0;
  volume *v = vol_access(in.id, in.token, &st, msg, sizeof msg);
  CHECK(v != NULL);
  if (!v) return;
  uint32_t def = root ? VOL_DEFAULT_ID : 0;
  /* write: a new file, E2B's defaults (0666, id 9090 where it exists) */
  vol_attrs none = {0};
  vol_writer *w = vol_write_begin(v, "a.txt", &none, false, &st, msg, sizeof msg);
  CHECK(w != NULL);
  CHECK_INT(vol_write(w, "hello", 5, msg, sizeof msg), 0);
  CHECK_INT(OUT(vol_write_finish(w, &got, msg, sizeof msg)), 0);
  CHECK_STR(sget("path"), "/a.txt");
  CHECK_STR(sget("name"), "a.txt");
  CHECK_STR(sget("type"), "file");
  CHECK_INT(iget("size"), 5);
  CHECK_INT(iget("mode"), 0666);
  CHECK_INT(iget("uid"), def);
  CHECK(sget("mtime") && strlen(sget("mtime")) == 30);   /* RFC 3339 with nanoseconds */
  /* again without force: 409, the file untouched; with force: replaced */
  w = vol_write_begin(v, "/a.txt", &none, false, &st, msg, sizeof msg);
  CHECK_INT(vol_write(w, "other", 5, msg, sizeof msg), 0);
  CHECK_INT(vol_write_finish(w, &got, msg, sizeof msg), 409);
  CHECK_HAS(msg, "already exists (write with force to replace it)");
  vol_attrs own = {.has_mode = true, .mode = 0640, .has_uid = root, .uid = 1000, .has_gid = root, .gid = 1000};
  w = vol_write_begin(v, "/a.txt", &own, true, &st, msg, sizeof msg);
  CHECK_INT(vol_write(w, "replaced", 8, msg, sizeof msg), 0);
  CHECK_INT(OUT(vol_write_finish(w, &got, msg, sizeof msg)), 0);
  CHECK_INT(iget("size"), 8);
  CHECK_INT(iget("mode"), 0640);
  if (root) CHECK_INT(iget("uid"), 1000);
  char p[300];
  host_path(&in, "/a.txt", p, sizeof p);
  struct stat hs;
  CHECK_INT(stat(p, &hs), 0);
  CHECK_INT(hs.st_uid, map.uid_base + (root ? 1000 : 0));   /* the sandboxes' id, on the host */
  /* an abandoned write leaves the old file and no temporary file */
  w = vol_write_begin(v, "/a.txt", &none, true, &st, msg, sizeof msg);
  CHECK_INT(vol_write(w, "partial", 7, msg, sizeof msg), 0);
  vol_write_abort(w);
  int fd;
  uint64_t size;
  CHECK_INT(vol_open_file(v, "/a.txt", &fd, &size, msg, sizeof msg), 0);
  char buf[32] = "";
  CHECK(read(fd, buf, sizeof buf) == 8 && !memcmp(buf, "replaced", 8) && size == 8);
  close(fd);
  CHECK_INT(OUT(vol_list_dir(v, "/", 1, &got, msg, sizeof msg)), 0);
  CHECK_INT(json_array_size(got), 1);  /* no ".a.txt.volume-upload-..." */
  /* parents: missing without force → 404, with force made (0777, the owner asked) */
  CHECK(vol_write_begin(v, "/x/y/z.txt", &none, false, &st, msg, sizeof msg) == NULL);
  CHECK_INT(st, 404);
  w = vol_write_begin(v, "/x/y/z.txt", &none, true, &st, msg, sizeof msg);
  CHECK(w != NULL);
  CHECK_INT(OUT(vol_write_finish(w, &got, msg, sizeof msg)), 0);
  CHECK_INT(iget("size"), 0);
  CHECK_INT(OUT(vol_stat(v, "/x/y", &got, msg, sizeof msg)), 0);
  CHECK_STR(sget("type"), "directory");
  CHECK_INT(iget("mode"), 0777);
  /* a component that is a file */
  CHECK(vol_write_begin(v, "/a.txt/b", &none, false, &st, msg, sizeof msg) == NULL);
  CHECK_INT(st, 400);
  CHECK_HAS(msg, "a component of path '/a.txt/b' is not a directory");
  /* attributes out of range */
  vol_attrs bad = {.has_uid = true, .uid = map.count};
  CHECK(vol_write_begin(v, "/b", &bad, false, &st, msg, sizeof msg) == NULL && st == 400);
  CHECK_HAS(msg, "is not an id of the sandboxes");
  vol_attrs badmode = {.has_mode = true, .mode = 010000};
  CHECK_INT(OUT(vol_make_dir(v, "/m", &badmode, false, &got, msg, sizeof msg)), 400);
  CHECK_HAS(msg, "mode 10000 has bits beyond 07777");
  /* make dir: new, existing (409, or as it is with force), under a missing parent */
  vol_attrs dmode = {.has_mode = true, .mode = 0750};
  CHECK_INT(OUT(vol_make_dir(v, "/d", &dmode, false, &got, msg, sizeof msg)), 0);
  CHECK_INT(iget("mode"), 0750);
  CHECK_INT(OUT(vol_make_dir(v, "/d", &none, false, &got, msg, sizeof msg)), 409);
  CHECK_INT(OUT(vol_make_dir(v, "/d", &none, true, &got, msg, sizeof msg)), 0);
  CHECK_INT(iget("mode"), 0750);          /* an existing directory keeps its mode */
  CHECK_INT(OUT(vol_make_dir(v, "/a.txt", &none, true, &got, msg, sizeof msg)), 409);
  CHECK_INT(OUT(vol_make_dir(v, "/no/such", &none, false, &got, msg, sizeof msg)), 404);
  CHECK_INT(OUT(vol_make_dir(v, "/", &none, true, &got, msg, sizeof msg)), 409);
  /* listing: depth 1, 3, out of range; a missing directory */
  CHECK_INT(OUT(vol_list_dir(v, "/", 1, &got, msg, sizeof msg)), 0);
  CHECK_INT(json_array_size(got), 3);     /* a.txt, d, x */
  CHECK_INT(OUT(vol_list_dir(v, "", 3, &got, msg, sizeof msg)), 0);
  CHECK_INT(json_array_size(got), 5);     /* + x/y, x/y/z.txt */
  bool deep = false;
  for (size_t i = 0; i < json_array_size(got); i++)
    deep = deep || !strcmp(json_string_value(json_object_get(json_array_get(got, i), "path")), "/x/y/z.txt");
  CHECK(deep);
  CHECK_INT(OUT(vol_list_dir(v, "/", 11, &got, msg, sizeof msg)), 400);
  CHECK_HAS(msg, "between 1 and 10");
  CHECK_INT(OUT(vol_list_dir(v, "/nothing", 1, &got, msg, sizeof msg)), 404);
  CHECK_INT(OUT(vol_list_dir(v, "/a.txt", 1, &got, msg, sizeof msg)), 400);
  /* update */
  vol_attrs upd = {.has_mode = true, .mode = 0600};
  CHECK_INT(OUT(vol_update(v, "/a.txt", &upd, &got, msg, sizeof msg)), 0);
  CHECK_INT(iget("mode"), 0600);
  CHECK_INT(OUT(vol_update(v, "/missing", &upd, &got, msg, sizeof msg)), 404);
  /* remove: a file, a tree, the root, something missing */
  CHECK_INT(vol_remove(v, "/x", msg, sizeof msg), 0);
  CHECK_INT(OUT(vol_stat(v, "/x/y/z.txt", &got, msg, sizeof msg)), 404);
  CHECK_INT(vol_remove(v, "/d", msg, sizeof msg), 0);
  CHECK_INT(vol_remove(v, "/", msg, sizeof msg), 400);
  CHECK_HAS(msg, "cannot delete the volume's root");
  CHECK_INT(vol_remove(v, "/gone", msg, sizeof msg), 404);
  CHECK_INT(vol_open_file(v, "/", &fd, &size, msg, sizeof msg), 400);
  CHECK_HAS(msg, "is a directory");
  CHECK(vol_write_begin(v, "/", &none, true, &st, msg, sizeof msg) == NULL && st == 400);
  vol_put(v);
  CHECK_INT(vol_delete(in.id, msg, sizeof msg), 0);
}

/* Nothing resolves outside the volume: ".." is folded at its root, and symlinks a sandbox made
 * (absolute, or climbing) resolve inside it. */
static void test_containment(void) {
  vol_info in;
  CHECK_INT(vol_create("contained", &in, msg, sizeof msg), 0);
  int st;
  volume *v = vol_access(in.id, in.token, &st, msg, sizeof msg);
  char p[300];
  host_path(&in, "/abs", p, sizeof p);
  CHECK_INT(symlink("/etc", p), 0);
  host_path(&in, "/up", p, sizeof p);
  CHECK_INT(symlink("../../../../../../../etc", p), 0);
  host_path(&in, "/inside", p, sizeof p);
  CHECK_INT(symlink("real", p), 0);
  host_path(&in, "/real", p, sizeof p);
  CHECK_INT(mkdir(p, 0777), 0);
  int fd;
  uint64_t size;
  const char *escapes[] = {"../../../../etc/passwd", "/../etc/passwd", "abs/passwd", "/up/passwd", "./abs/../../etc/passwd"};
  for (size_t i = 0; i < 5; i++) {
    CHECK_INT(vol_open_file(v, escapes[i], &fd, &size, msg, sizeof msg), 404);
    CHECK_INT(OUT(vol_stat(v, escapes[i], &got, msg, sizeof msg)), 404);
  }
  CHECK_HAS(msg, "'/etc/passwd' not found");   /* shown as the volume path it is */
  /* a symlink itself is reported as one, with its target */
  CHECK_INT(OUT(vol_stat(v, "/abs", &got, msg, sizeof msg)), 0);
  CHECK_STR(sget("type"), "symlink");
  CHECK_STR(sget("target"), "/etc");
  /* writing through a symlink pointing out stays inside too: nothing appears in the host's /etc */
  vol_attrs none = {0};
  CHECK(vol_write_begin(v, "/abs/mb-volume-escape", &none, true, &st, msg, sizeof msg) == NULL);
  CHECK_INT(st, 400);                      /* "abs" leads to the volume's /etc, which does not exist */
  CHECK_HAS(msg, "a component of path '/abs/mb-volume-escape' is not a directory");
  CHECK(vol_write_begin(v, "/abs/mb-volume-escape", &none, false, &st, msg, sizeof msg) == NULL);
  CHECK_INT(st, 404);
  CHECK(access("/etc/mb-volume-escape", F_OK) != 0);
  CHECK_INT(OUT(vol_make_dir(v, "/up/mb-escape", &none, true, &got, msg, sizeof msg)), 400);
  CHECK(access("/etc/mb-escape", F_OK) != 0);
  /* once the volume has an /etc, that is where they lead */
  CHECK_INT(OUT(vol_make_dir(v, "/etc", &none, false, &got, msg, sizeof msg)), 0);
  CHECK_INT(OUT(vol_make_dir(v, "/up/mb-escape", &none, false, &got, msg, sizeof msg)), 0);
  CHECK_STR(sget("path"), "/up/mb-escape");
  CHECK(access("/etc/mb-escape", F_OK) != 0);
  host_path(&in, "/etc/mb-escape", p, sizeof p);
  CHECK_INT(access(p, F_OK), 0);
  /* a symlink inside the volume works */
  vol_writer *w = vol_write_begin(v, "/inside/f", &none, false, &st, msg, sizeof msg);
  CHECK(w != NULL);
  CHECK_INT(OUT(vol_write_finish(w, &got, msg, sizeof msg)), 0);
  host_path(&in, "/real/f", p, sizeof p);
  CHECK_INT(access(p, F_OK), 0);
  /* removing a symlink removes the link, not what it points to */
  CHECK_INT(vol_remove(v, "/inside", msg, sizeof msg), 0);
  CHECK_INT(access(p, F_OK), 0);
  vol_put(v);
  CHECK_INT(vol_delete(in.id, msg, sizeof msg), 0);
}

int main(void) {
  root = geteuid() == 0;
  /* as root, the identity map: inner ids are host ids (enough to see that they are applied) */
  map = root ? (vol_idmap){0, 0, 65536} : (vol_idmap){geteuid(), getegid(), 1};
  if (!mkdtemp(state)) { perror("mkdtemp"); return 1; }
  if (vol_init(state, &map, msg, sizeof msg) != 0) { fprintf(stderr, "%s\n", msg); return 1; }
  MBT_RUN(test_catalogue);
  MBT_RUN(test_content);
  MBT_RUN(test_containment);
  json_decref(got);
  vol_shutdown();
  char cmd[200];
  snprintf(cmd, sizeof cmd, "rm -rf %s", state);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", state);
  return mbt_report();
}
