/* test_sbx_statefile.c — sandboxd's state files (sandboxd/statefile.c): a missing file is no
 * error, a malformed one is named with its line, duplicate keys are refused, a version-1
 * catalogue's array is found and anything else is not, a write replaces the file whole (0600,
 * whatever the umask), a leftover PATH.tmp is replaced and a link there is never followed, and a
 * write that cannot happen leaves the old file as it was. */
#include "mbtest.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "statefile.h"

static char dir[64] = "/tmp/mb-statefile-XXXXXX", path[128], tmp[140], msg[600];

static void put(const char *p, const char *text) {
  FILE *f = fopen(p, "w");
  CHECK(f != NULL);
  if (f) { fputs(text, f); fclose(f); }
}

static const char *get(const char *p) {
  static char buf[4096];
  FILE *f = fopen(p, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return f ? buf : NULL;
}

static void test_load(void) {
  json_t *root = (json_t *)1;
  unlink(path);
  CHECK_INT(statefile_load(path, &root, msg, sizeof msg), 0);
  CHECK(root == NULL);

  put(path, "{\"version\": 1,\n \"entries\": [1, 2,]}");
  CHECK_INT(statefile_load(path, &root, msg, sizeof msg), -1);
  CHECK(root == NULL);
  CHECK_HAS(msg, path);
  CHECK_HAS(msg, "line 2");

  /* A file that cannot be read: named, without a position that means nothing. */
  char sub[160];
  put(path, "{}");
  snprintf(sub, sizeof sub, "%s/under-a-file", path);   /* ENOTDIR: there, but not opened */
  CHECK_INT(statefile_load(sub, &root, msg, sizeof msg), -1);
  CHECK_HAS(msg, sub);
  CHECK_HAS(msg, "Not a directory");
  CHECK(strstr(msg, "line") == NULL);

  put(path, "{\"version\": 1, \"entries\": [], \"entries\": []}");
  CHECK_INT(statefile_load(path, &root, msg, sizeof msg), -1);
  CHECK_HAS(msg, "duplicate");

  put(path, "{\"version\": 1, \"entries\": [{\"a\": 1}]}");
  CHECK_INT(statefile_load(path, &root, msg, sizeof msg), 0);
  json_t *arr = statefile_v1_array(root, "entries");
  CHECK(arr != NULL && json_array_size(arr) == 1);
  CHECK(statefile_v1_array(root, "snapshots") == NULL);
  json_decref(root);

  const char *not_v1[] = {"{\"version\": 2, \"entries\": []}", "{\"version\": \"1\", \"entries\": []}", "{\"entries\": []}",
                          "{\"version\": 1, \"entries\": {}}", "[]"};
  for (size_t i = 0; i < sizeof not_v1 / sizeof *not_v1; i++) {
    put(path, not_v1[i]);
    CHECK_INT(statefile_load(path, &root, msg, sizeof msg), 0);
    CHECK(root && statefile_v1_array(root, "entries") == NULL);
    json_decref(root);
  }
}

static void test_save(void) {
  mode_t old = umask(0);   /* the file is 0600 whatever the umask lets through */
  json_t *root = json_pack("{s:i,s:[s]}", "version", 1, "entries", "é");
  CHECK_INT(statefile_save(path, root, JSON_COMPACT, msg, sizeof msg), 0);
  umask(old);
  CHECK_STR(get(path), "{\"version\":1,\"entries\":[\"é\"]}");
  struct stat st;
  CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0600);
  CHECK(access(tmp, F_OK) != 0);

  /* What a crash left at PATH.tmp is replaced; a link there is removed, its target untouched. */
  char target[140];
  snprintf(target, sizeof target, "%s/target", dir);
  put(target, "keep");
  CHECK_INT(symlink(target, tmp), 0);
  CHECK_INT(statefile_write(path, "second", msg, sizeof msg), 0);
  CHECK_STR(get(path), "second");
  CHECK_STR(get(target), "keep");
  CHECK(access(tmp, F_OK) != 0);

  /* A write that cannot happen (PATH.tmp cannot be made) leaves the old file as it was. */
  CHECK_INT(mkdir(tmp, 0700), 0);
  char inside[160];
  snprintf(inside, sizeof inside, "%s/x", tmp);
  put(inside, "x");   /* a non-empty directory: unlink and open both fail */
  CHECK_INT(statefile_save(path, root, 0, msg, sizeof msg), -1);
  CHECK_HAS(msg, tmp);
  CHECK_STR(get(path), "second");
  unlink(inside);
  rmdir(tmp);

  /* Into a directory that is not there: an error naming the file, nothing made. */
  char nowhere[160];
  snprintf(nowhere, sizeof nowhere, "%s/none/f.json", dir);
  CHECK_INT(statefile_save(nowhere, root, 0, msg, sizeof msg), -1);
  CHECK_HAS(msg, "none/f.json.tmp");
  json_decref(root);
  unlink(target);
}

static void test_sync_dir(void) {
  CHECK_INT(statefile_sync_dir(dir), 0);
  CHECK_INT(statefile_sync_dir(path), -1);   /* a file is not a directory */
}

int main(void) {
  if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
  snprintf(path, sizeof path, "%s/catalogue.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  MBT_RUN(test_load);
  MBT_RUN(test_save);
  MBT_RUN(test_sync_dir);
  unlink(path);
  rmdir(dir);
  return mbt_report();
}
