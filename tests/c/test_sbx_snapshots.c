/* test_sbx_snapshots.c — snapshot layering (sandboxd/layers.c) and the snapshot catalogue
 * (sandboxd/snapshots.c) against a real state directory: captures and their chains, shared
 * references and removal with the last one, a restart's reopening and sweep, broken chains; names,
 * resolution, a name taken again, deletion in use, persistence and a catalogue that cannot be
 * written; tags: their syntax, builds tagged, tags moved and removed (a build no tag names leaves,
 * its layer with it), persistence and a catalogue of before tags. Links no HTTP and no sandbox code. */
#include "mbtest.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layers.h"
#include "snapshots.h"

static char state[256], src[300];
static int srcfd = -1;

static int count_layers(void) {
  char p[400];
  snprintf(p, sizeof p, "%s/layers", state);
  DIR *d = opendir(p);
  if (!d) return -1;
  int n = 0;
  struct dirent *de;
  while ((de = readdir(d))) if (de->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static bool layer_has(const layer *l, const char *rel) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s/%s", ly_dir(), ly_id(l), rel);
  return access(p, F_OK) == 0;
}

static void put(const char *rel, const char *text) {
  char p[600];
  snprintf(p, sizeof p, "%s/%s", src, rel);
  FILE *f = fopen(p, "w");
  if (f) { fputs(text, f); fclose(f); }
}

static const ly_tree TREES[] = {{"upper", "root"}, {"upper-usr", "usr"}};

static layer *capture(layer *parent, char *err, size_t errlen) {
  layer *l = NULL;
  if (ly_capture(srcfd, TREES, 2, parent, geteuid(), getegid(), &l, err, errlen) != 0) return NULL;
  return l;
}

static void test_capture_and_chain(void) {
  char err[1024] = "";
  put("upper/a", "first");
  layer *one = capture(NULL, err, sizeof err);
  CHECK(one != NULL);
  if (!one) { fprintf(stderr, "     %s\n", err); return; }
  CHECK_INT(strlen(ly_id(one)), LY_ID_LEN);
  CHECK_INT(ly_depth(one), 1);
  CHECK(ly_parent(one) == NULL);
  CHECK(layer_has(one, "root/a") && layer_has(one, "usr") && layer_has(one, "parent"));
  put("upper/b", "second");
  layer *two = capture(one, err, sizeof err);
  CHECK(two != NULL);
  CHECK_INT(ly_depth(two), 2);
  CHECK(ly_parent(two) == one);
  CHECK(layer_has(two, "root/b"));
  CHECK_INT(count_layers(), 2);
  CHECK_INT(ly_count(), 2);
  /* the parent lives as long as a child: released first, it stays */
  ly_release(one);
  CHECK_INT(count_layers(), 2);
  CHECK(layer_has(two, "root/a"));   /* a copy of the upper layer as it was, not a link to it */
  ly_hold(two);
  ly_release(two);
  CHECK_INT(count_layers(), 2);
  ly_release(two);                   /* the last reference: both go, top down */
  CHECK_INT(count_layers(), 0);
  CHECK_INT(ly_count(), 0);
  /* a failed capture leaves nothing */
  static const ly_tree missing[] = {{"upper", "root"}, {"no-such-dir", "usr"}};
  layer *none = NULL;
  CHECK_INT(ly_capture(srcfd, missing, 2, NULL, geteuid(), getegid(), &none, err, sizeof err), -1);
  CHECK(none == NULL);
  CHECK_HAS(err, "copying no-such-dir: no-such-dir: No such file or directory");
  CHECK_INT(count_layers(), 0);
}

static void test_depth_limit(void) {
  char err[1024] = "";
  layer *top = NULL;
  for (int i = 0; i < LY_MAX_DEPTH; i++) {
    layer *l = capture(top, err, sizeof err);
    if (!l) { fprintf(stderr, "     %s\n", err); break; }
    ly_release(top);                 /* the new layer holds it */
    top = l;
  }
  CHECK(top && ly_depth(top) == LY_MAX_DEPTH);
  CHECK(capture(top, err, sizeof err) == NULL);
  CHECK_HAS(err, "would be 33 layers deep (at most 32");
  CHECK_INT(count_layers(), LY_MAX_DEPTH);
  ly_release(top);
  CHECK_INT(count_layers(), 0);
}

/* After a restart: layers reopen from disk with their chains; what nothing reopened is swept. */
static void test_reopen_and_sweep(void) {
  char err[1024] = "", id1[LY_ID_LEN + 1], id2[LY_ID_LEN + 1], id3[LY_ID_LEN + 1];
  layer *one = capture(NULL, err, sizeof err), *two = capture(one, err, sizeof err), *three = capture(NULL, err, sizeof err);
  CHECK(one && two && three);
  snprintf(id1, sizeof id1, "%s", ly_id(one));
  snprintf(id2, sizeof id2, "%s", ly_id(two));
  snprintf(id3, sizeof id3, "%s", ly_id(three));
  ly_shutdown();                     /* forgets them in memory, keeps the files */
  CHECK_INT(count_layers(), 3);
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s/layers/tmp-unfinished", state);   /* a crashed capture */
  CHECK_INT(mkdir(tmp, 0700), 0);
  CHECK_INT(ly_init(state, err, sizeof err), 0);
  CHECK(access(tmp, F_OK) != 0);     /* unfinished captures go at once */
  layer *again = ly_open(id2, err, sizeof err);
  CHECK(again != NULL);
  if (!again) { fprintf(stderr, "     %s\n", err); return; }
  CHECK_INT(ly_depth(again), 2);
  CHECK_STR(ly_id(ly_parent(again)), id1);
  CHECK(ly_open(id2, err, sizeof err) == again);   /* one struct per layer */
  ly_release(again);
  CHECK_INT(ly_sweep(), 1);          /* three: nothing opened it */
  CHECK_INT(count_layers(), 2);
  CHECK(ly_open(id3, err, sizeof err) == NULL);
  CHECK_HAS(err, id3);
  /* malformed ids and chains */
  CHECK(ly_open("short", err, sizeof err) == NULL);
  CHECK_HAS(err, "'short' is not a layer id");
  char p[600];
  snprintf(p, sizeof p, "%s/layers/%s/parent", state, id1);
  FILE *f = fopen(p, "w");
  fputs("not-a-layer-id\n", f);
  fclose(f);
  ly_shutdown();                     /* `again` is still held: forgotten, not released */
  CHECK_INT(ly_init(state, err, sizeof err), 0);
  CHECK(ly_open(id2, err, sizeof err) == NULL);
  CHECK_HAS(err, "is malformed");
  /* a loop: one's parent is two, two's is one */
  f = fopen(p, "w");
  fprintf(f, "%s\n", id2);
  fclose(f);
  CHECK(ly_open(id2, err, sizeof err) == NULL);
  CHECK_HAS(err, "deeper than 32 layers (or loops)");
  CHECK_INT(ly_count(), 0);
  CHECK_INT(ly_sweep(), 2);
  CHECK_INT(count_layers(), 0);
}

static void test_names(void) {
  char out[SNAP_NAME_MAX + 1], err[512];
  CHECK_INT(snap_parse_name("my-snap_1", out, sizeof out, err, sizeof err), 0);
  CHECK_STR(out, "my-snap_1");
  CHECK_INT(snap_parse_name("  My-Snap:DEFAULT ", out, sizeof out, err, sizeof err), 0);   /* E2B: trimmed, lower-cased */
  CHECK_STR(out, "my-snap");
  CHECK_INT(snap_parse_name("name:v1", out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "tag 'v1'");
  CHECK_INT(snap_parse_name("team/name", out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "namespace");
  CHECK_INT(snap_parse_name("a b", out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "a-z, 0-9, '_' and '-' only");
  CHECK_INT(snap_parse_name("", out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "got 0 characters");
  CHECK_INT(snap_parse_name(":default", out, sizeof out, err, sizeof err), -1);
  CHECK_INT(snap_parse_name("base", out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "'base'");
  char longname[200];
  memset(longname, 'a', 129);
  longname[129] = 0;
  CHECK_INT(snap_parse_name(longname, out, sizeof out, err, sizeof err), -1);
  CHECK_HAS(err, "got 129 characters");
  longname[128] = 0;
  CHECK_INT(snap_parse_name(longname, out, sizeof out, err, sizeof err), 0);
  CHECK_INT(snap_parse_name(NULL, out, sizeof out, err, sizeof err), -1);
}

static void test_catalogue(void) {
  char err[1024] = "";
  CHECK_INT(snap_init(state, err, sizeof err), 0);
  size_t n;
  snap_info *all = snap_list(&n);
  CHECK_INT(n, 0);
  free(all);
  put("upper/which", "one");
  layer *l1 = capture(NULL, err, sizeof err);
  snap_info a, b, got;
  CHECK_INT(snap_add("named", l1, "isandbox1", 1000, &a, err, sizeof err), 0);
  CHECK_INT(snap_add(NULL, l1, "isandbox1", 2000, &b, err, sizeof err), 0);   /* two snapshots may share a layer */
  ly_release(l1);                                    /* the catalogue holds its own */
  CHECK_INT(count_layers(), 1);
  CHECK_STR(a.name, "named");
  CHECK_STR(b.name, "");
  CHECK(strcmp(a.id, b.id) != 0 && b.seq > a.seq);
  /* resolution: id, name, either with :default, any case */
  int status = 0;
  layer *r = snap_resolve("NAMED:default", &got, &status, err, sizeof err);
  CHECK(r != NULL && !strcmp(got.id, a.id));
  ly_release(r);
  r = snap_resolve(b.id, &got, &status, err, sizeof err);
  CHECK(r != NULL && !strcmp(got.id, b.id));
  ly_release(r);
  CHECK(snap_resolve("nothing-here", &got, &status, err, sizeof err) == NULL);
  CHECK_INT(status, 404);
  CHECK_HAS(err, "template 'nothing-here' not found");
  CHECK(snap_resolve("a/b", &got, &status, err, sizeof err) == NULL);
  CHECK_INT(status, 400);
  /* a name that is an id is refused */
  r = snap_resolve("named", &got, &status, err, sizeof err);
  CHECK_INT(snap_add(b.id, r, "isandbox1", 3000, &got, err, sizeof err), -2);
  CHECK_HAS(err, "is the id of another snapshot");
  ly_release(r);
  /* the name taken again: same id, the new layer, newest; the old layer goes with its last user */
  put("upper/which", "two");
  layer *l2 = capture(NULL, err, sizeof err);
  snap_info a2;
  CHECK_INT(snap_add("named", l2, "isandbox2", 4000, &a2, err, sizeof err), 0);
  ly_release(l2);
  CHECK_STR(a2.id, a.id);
  CHECK_STR(a2.sandbox_id, "isandbox2");
  CHECK(a2.seq > b.seq);
  all = snap_list(&n);
  CHECK(n == 2 && !strcmp(all[0].id, a.id) && !strcmp(all[1].id, b.id));   /* newest first */
  free(all);
  CHECK_INT(count_layers(), 2);      /* b still holds the first layer */
  /* delete in use: a holder (a sandbox) keeps the layer after the catalogue lets go */
  layer *held = snap_resolve(b.id, &got, &status, err, sizeof err);
  CHECK_INT(snap_delete(b.id, err, sizeof err), 0);
  CHECK_INT(snap_delete(b.id, err, sizeof err), 404);
  CHECK_INT(snap_delete("a b", err, sizeof err), 400);
  CHECK_INT(count_layers(), 2);
  ly_release(held);
  CHECK_INT(count_layers(), 1);
  /* persistence: a restart reads the same catalogue */
  snap_shutdown();
  ly_shutdown();
  CHECK_INT(ly_init(state, err, sizeof err), 0);
  CHECK_INT(snap_init(state, err, sizeof err), 0);
  CHECK_INT(ly_sweep(), 0);
  all = snap_list(&n);
  CHECK(n == 1 && !strcmp(all[0].id, a.id) && !strcmp(all[0].name, "named") && all[0].created_ms == 4000 &&
        !strcmp(all[0].sandbox_id, "isandbox2"));
  free(all);
  r = snap_resolve("named", &got, &status, err, sizeof err);
  CHECK(r && layer_has(r, "root/which"));
  ly_release(r);
  /* a catalogue that cannot be written: nothing changes */
  char tmp[600];
  snprintf(tmp, sizeof tmp, "%s/snapshots.json.tmp", state);
  CHECK_INT(mkdir(tmp, 0700), 0);    /* the temporary file cannot be created */
  layer *l3 = capture(NULL, err, sizeof err);
  CHECK_INT(snap_add("other", l3, "isandbox3", 5000, &got, err, sizeof err), -1);
  CHECK_HAS(err, "snapshots.json.tmp");
  ly_release(l3);
  CHECK_INT(snap_delete("named", err, sizeof err), 500);
  all = snap_list(&n);
  CHECK_INT(n, 1);
  free(all);
  CHECK_INT(count_layers(), 1);
  rmdir(tmp);
  /* an entry whose layer is gone is dropped at load; an unreadable catalogue is an error */
  snap_shutdown();
  ly_shutdown();
  char p[600];
  snprintf(p, sizeof p, "%s/snapshots.json", state);
  FILE *f = fopen(p, "w");
  fprintf(f, "{\"version\":1,\"snapshots\":[{\"id\":\"%s\",\"layer\":\"abcdefghij0123456789\",\"sandboxID\":\"i1\",\"createdMs\":1}]}", a.id);
  fclose(f);
  CHECK_INT(ly_init(state, err, sizeof err), 0);
  CHECK_INT(snap_init(state, err, sizeof err), 0);
  all = snap_list(&n);
  CHECK_INT(n, 0);
  free(all);
  CHECK_INT(ly_sweep(), 1);          /* the named snapshot's layer: no entry refers to it now */
  snap_shutdown();
  f = fopen(p, "w");
  fputs("{\"version\":1,\"snapshots\":[", f);
  fclose(f);
  CHECK_INT(snap_init(state, err, sizeof err), -1);
  CHECK_HAS(err, "snapshots.json");
  f = fopen(p, "w");
  fputs("{\"version\":2,\"snapshots\":[]}", f);
  fclose(f);
  CHECK_INT(snap_init(state, err, sizeof err), -1);
  CHECK_HAS(err, "not a sandboxd snapshot catalogue");
  snap_shutdown();
  CHECK_INT(count_layers(), 0);
}

static int drops;
static char dropped[LY_ID_LEN + 1];
static void on_drop(const char *tid, const char *bid) {
  (void)tid;
  drops++;
  snprintf(dropped, sizeof dropped, "%s", bid);
}

static void test_tags(void) {
  char err[1024] = "", out[SNAP_NAME_MAX + 1], tag[SNAP_TAG_MAX + 1];
  /* syntax */
  CHECK_INT(snap_parse_tag(" V1.2_rc-3 ", tag, sizeof tag, err, sizeof err), 0);
  CHECK_STR(tag, "v1.2_rc-3");
  CHECK_INT(snap_parse_tag("a b", tag, sizeof tag, err, sizeof err), -1);
  CHECK_HAS(err, "a-z, 0-9, '.', '_' and '-' only");
  CHECK_INT(snap_parse_tag("123E4567-e89b-12d3-a456-426614174000", tag, sizeof tag, err, sizeof err), -1);
  CHECK_HAS(err, "cannot be a UUID");
  CHECK_INT(snap_parse_tag("", tag, sizeof tag, err, sizeof err), -1);
  CHECK_INT(snap_parse_ref("Name:V1", out, sizeof out, tag, sizeof tag, err, sizeof err), 0);
  CHECK(!strcmp(out, "name") && !strcmp(tag, "v1"));
  CHECK_INT(snap_parse_ref("name", out, sizeof out, tag, sizeof tag, err, sizeof err), 0);
  CHECK_STR(tag, "");
  CHECK_INT(snap_parse_ref("name:", out, sizeof out, tag, sizeof tag, err, sizeof err), -1);
  CHECK_INT(snap_parse_ref("name:a:b", out, sizeof out, tag, sizeof tag, err, sizeof err), -1);
  /* a refusal quotes the name or tag cut between characters (the message goes into a JSON reply;
   * found by fuzz/fuzz_sbx_template_request.c's twin in template_spec.c) */
  char bad[2 + 3 * 70 + 1] = "ab";   /* "ab" then 3-byte characters: a 64- or 160-byte cut splits one */
  for (int i = 0; i < 70; i++) strcat(bad, "\xe2\x82\xac");
  char spaced[sizeof bad + 2], tagged[sizeof bad + 2];
  snprintf(spaced, sizeof spaced, "%s/x", bad);   /* "'%.160s' has a namespace" */
  snprintf(tagged, sizeof tagged, "n:%s", bad);   /* "tag '%.64s...': a tag is 1 to 128 characters" */
  const char *const refs[] = {spaced, tagged, NULL};
  for (size_t i = 0; refs[i]; i++) {
    err[0] = '\0';
    CHECK_INT(snap_parse_ref(refs[i], out, sizeof out, tag, sizeof tag, err, sizeof err), -1);
    json_t *m = json_string(err);
    if (!m) fprintf(stderr, "not UTF-8: %s\n", err);
    CHECK(m != NULL);
    CHECK_HAS(err, "ab\xe2\x82\xac");
    json_decref(m);
  }
  CHECK_INT(snap_parse_tag(bad, tag, sizeof tag, err, sizeof err), -1);   /* "tag '%.64s': ..." */
  json_t *m = json_string(err);
  CHECK(m != NULL);
  CHECK_HAS(err, "tag 'ab\xe2\x82\xac");
  json_decref(m);

  char p[600];
  snprintf(p, sizeof p, "%s/snapshots.json", state);
  unlink(p);
  CHECK_INT(snap_init(state, err, sizeof err), 0);
  snap_on_drop(on_drop);
  int base = count_layers();
  static const char V1[1][SNAP_TAG_MAX + 1] = {"v1"}, V2[2][SNAP_TAG_MAX + 1] = {"v2", "stable"};
  put("upper/which", "one");
  layer *l1 = capture(NULL, err, sizeof err);
  put("upper/which", "two");
  layer *l2 = capture(NULL, err, sizeof err);
  snap_info a, b, got;
  CHECK_INT(snap_add_build("abcdefghij0123456789", "tagged", "bbbbbbbbbb0000000001", l1, "i1", 1000, V1, 1, &a, err, sizeof err), 0);
  CHECK_INT(snap_add_build(NULL, "tagged", "bbbbbbbbbb0000000002", l2, "i2", 2000, V2, 2, &b, err, sizeof err), 0);
  ly_release(l1);
  ly_release(l2);
  CHECK_STR(a.id, "abcdefghij0123456789");
  CHECK_STR(b.id, a.id);
  CHECK_INT(b.nbuilds, 2);
  CHECK_INT(count_layers(), base + 2);
  int status = 0;
  layer *r = snap_resolve("tagged:v1", &got, &status, err, sizeof err);
  CHECK(r && layer_has(r, "root/which") && !strcmp(got.build_id, "bbbbbbbbbb0000000001") && !strcmp(got.tag, "v1"));
  ly_release(r);
  r = snap_resolve("tagged:stable", &got, &status, err, sizeof err);
  CHECK(r && !strcmp(got.build_id, "bbbbbbbbbb0000000002") && got.created_ms == 2000);
  ly_release(r);
  CHECK(snap_resolve("tagged", &got, &status, err, sizeof err) == NULL);   /* no build got default */
  CHECK_INT(status, 404);
  CHECK_HAS(err, "template 'tagged' has no tag 'default'");
  CHECK(snap_has_build("bbbbbbbbbb0000000001"));
  /* moving v1 away: its build leaves, its layer with it (nothing else holds it) */
  char bid[LY_ID_LEN + 1];
  static const char V1D[2][SNAP_TAG_MAX + 1] = {"v1", "default"};
  CHECK_INT(snap_assign_tags("tagged:v2", V1D, 2, 3000, bid, err, sizeof err), 0);
  CHECK_STR(bid, "bbbbbbbbbb0000000002");
  CHECK_INT(drops, 1);
  CHECK_STR(dropped, "bbbbbbbbbb0000000001");
  CHECK(!snap_has_build("bbbbbbbbbb0000000001"));
  CHECK_INT(count_layers(), base + 1);
  CHECK_INT(snap_assign_tags("tagged:nope", V1, 1, 3000, bid, err, sizeof err), 404);
  CHECK_HAS(err, "no tag 'nope'");
  CHECK_INT(snap_assign_tags("other:v1", V1, 1, 3000, bid, err, sizeof err), 404);
  snap_tag *tags;
  size_t n;
  CHECK_INT(snap_tags("tagged", &tags, &n, err, sizeof err), 0);
  CHECK_INT(n, 4);
  CHECK(n == 4 && !strcmp(tags[0].tag, "stable") && !strcmp(tags[1].tag, "v2") && tags[2].created_ms == 3000);
  free(tags);
  /* removal: not default, not unknown, not all of them */
  static const char DEF[1][SNAP_TAG_MAX + 1] = {"default"}, ALL[3][SNAP_TAG_MAX + 1] = {"v1", "v2", "stable"};
  CHECK_INT(snap_remove_tags("tagged", DEF, 1, err, sizeof err), 400);
  CHECK_INT(snap_remove_tags("tagged", (const char (*)[SNAP_TAG_MAX + 1])"zzz", 1, err, sizeof err), 404);
  CHECK_HAS(err, "no tag 'zzz'");
  CHECK_INT(snap_remove_tags("tagged:v1", V1, 1, err, sizeof err), 400);
  CHECK_INT(snap_remove_tags("tagged", ALL, 3, err, sizeof err), 0);
  CHECK_INT(snap_tags("tagged", &tags, &n, err, sizeof err), 0);
  CHECK(n == 1 && !strcmp(tags[0].tag, "default"));
  free(tags);
  /* a new build tagged default takes it: the old one leaves */
  put("upper/which", "three");
  layer *l3 = capture(NULL, err, sizeof err);
  CHECK_INT(snap_add("tagged", l3, "i3", 4000, &got, err, sizeof err), 0);
  ly_release(l3);
  CHECK_INT(drops, 2);
  CHECK_INT(count_layers(), base + 1);
  CHECK_INT(snap_assign_tags("tagged", V1, 1, 5000, bid, err, sizeof err), 0);
  /* persistence */
  snap_shutdown();
  ly_shutdown();
  CHECK_INT(ly_init(state, err, sizeof err), 0);
  CHECK_INT(snap_init(state, err, sizeof err), 0);
  CHECK_INT(ly_sweep(), 0);
  CHECK_INT(snap_tags("tagged", &tags, &n, err, sizeof err), 0);
  CHECK(n == 2 && !strcmp(tags[0].tag, "default") && !strcmp(tags[1].tag, "v1") && tags[1].created_ms == 5000 &&
        !strcmp(tags[0].build_id, tags[1].build_id));
  free(tags);
  r = snap_resolve("tagged:v1", &got, &status, err, sizeof err);
  CHECK(r != NULL && got.created_ms == 4000 && !strcmp(got.sandbox_id, "i3"));
  ly_release(r);
  CHECK_INT(snap_delete("tagged:v1", err, sizeof err), 400);
  CHECK_INT(snap_delete("tagged", err, sizeof err), 0);
  CHECK_INT(drops, 3);
  CHECK_INT(count_layers(), base);
  /* a catalogue of before tags: its entry is one build (the template's id) tagged default */
  put("upper/which", "old");
  layer *l4 = capture(NULL, err, sizeof err);
  snap_shutdown();
  FILE *f = fopen(p, "w");
  fprintf(f, "{\"version\":1,\"snapshots\":[{\"id\":\"oldoldoldo0123456789\",\"name\":\"legacy\",\"layer\":\"%s\","
          "\"sandboxID\":\"i9\",\"createdMs\":9}]}", ly_id(l4));
  fclose(f);
  CHECK_INT(snap_init(state, err, sizeof err), 0);
  ly_release(l4);   /* the catalogue holds it now */
  r = snap_resolve("legacy", &got, &status, err, sizeof err);
  CHECK(r && !strcmp(got.build_id, "oldoldoldo0123456789") && !strcmp(got.tag, "default") && got.created_ms == 9);
  ly_release(r);
  CHECK_INT(snap_delete("legacy", err, sizeof err), 0);
  snap_on_drop(NULL);
  snap_shutdown();
}

int main(void) {
  snprintf(state, sizeof state, "/tmp/mb-snapshots-XXXXXX");
  if (!mkdtemp(state)) { perror("mkdtemp"); return 1; }
  snprintf(src, sizeof src, "%s/src", state);
  char p[400];
  mkdir(src, 0755);
  snprintf(p, sizeof p, "%s/upper", src);
  mkdir(p, 0755);
  snprintf(p, sizeof p, "%s/upper-usr", src);
  mkdir(p, 0755);
  srcfd = open(src, O_RDONLY | O_DIRECTORY);
  char err[512];
  if (ly_init(state, err, sizeof err) != 0) { fprintf(stderr, "%s\n", err); return 1; }
  MBT_RUN(test_capture_and_chain);
  MBT_RUN(test_depth_limit);
  MBT_RUN(test_reopen_and_sweep);
  MBT_RUN(test_names);
  MBT_RUN(test_catalogue);
  MBT_RUN(test_tags);
  ly_shutdown();
  close(srcfd);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", state);
  if (system(cmd) != 0) fprintf(stderr, "cleanup of %s failed\n", state);
  return mbt_report();
}
