/* test_sbx_registry.c — sandboxd's sandbox table (sandboxd/registry.c) over a fake backend: ids and
 * tokens, reference counting against kills, death hooks in order, leases and expiry, pause and
 * connect, listing and token lookup. Links no HTTP and no sandbox code. */
#include "mbtest.h"
#include "sbx_fakes.h"
#include "clocks.h"

#include <unistd.h>

static reg_entry *make(bool secure, int64_t timeout_s, reg_info *info) {
  reg_create_opts o = fk_opts(secure, timeout_s);
  reg_info in;
  char err[256];
  if (reg_create(&o, &in, err, sizeof err) != 0) return NULL;
  if (info) *info = in;
  else json_decref(in.metadata);
  return reg_get(in.id);   /* a reference: the caller puts it */
}

static void test_ids_and_tokens(void) {
  reg_info a, b;
  reg_entry *ea = make(true, 300, &a), *eb = make(false, 300, &b);
  CHECK(ea && eb);
  CHECK_INT(strlen(a.id), 21);
  CHECK(a.id[0] == 'i');
  CHECK(reg_valid_id(a.id));
  CHECK(strcmp(a.id, b.id) != 0);
  CHECK_INT(strlen(a.token), 32);
  CHECK_STR(reg_token(ea), a.token);
  CHECK(reg_token(eb) == NULL);          /* not secure: no token */
  CHECK_STR(b.token, "");
  CHECK(b.seq > a.seq);
  CHECK(json_is_object(a.metadata) && json_object_size(a.metadata) == 0);
  CHECK(!reg_valid_id("") && !reg_valid_id("ABC") && !reg_valid_id("a-b") && !reg_valid_id("a/b"));
  char long_id[70];
  memset(long_id, 'a', 65);
  long_id[65] = 0;
  CHECK(!reg_valid_id(long_id));
  long_id[64] = 0;
  CHECK(reg_valid_id(long_id));
  reg_put(ea);
  reg_put(eb);
  json_decref(a.metadata);
  json_decref(b.metadata);
  CHECK_INT(reg_kill(a.id), 0);
  CHECK_INT(reg_kill(b.id), 0);
  CHECK_INT(reg_kill(a.id), -1);         /* gone */
}

/* A backend that had a sandbox ready under an id of its own (a warm spare, named with
 * reg_new_id when it was booted) hands that out: the entry, its lookup and its kill use it. */
static void test_backend_chosen_id(void) {
  char spare[32];
  CHECK_INT(reg_new_id(spare, sizeof spare), 0);
  CHECK_INT(strlen(spare), 21);
  CHECK(spare[0] == 'i' && reg_valid_id(spare));
  CHECK_INT(reg_new_id(spare, 21), -1);   /* no room for it */
  CHECK_INT(reg_new_id(spare, sizeof spare), 0);
  snprintf(fk.spare_id, sizeof fk.spare_id, "%s", spare);
  reg_info in;
  reg_entry *e = make(true, 300, &in);
  CHECK(e != NULL);
  CHECK_STR(in.id, spare);
  CHECK_STR(reg_id(e), spare);
  CHECK_HAS(fk.log, spare);
  json_decref(in.metadata);
  reg_put(e);
  CHECK_INT(reg_kill(spare), 0);
}

static void test_create_failure(void) {
  fk.fail_create = true;
  reg_create_opts o = fk_opts(false, 300);
  reg_info in;
  char err[256] = "";
  size_t before;
  reg_info *l = reg_list(&before);
  reg_list_free(l, before);
  CHECK_INT(reg_create(&o, &in, err, sizeof err), -1);
  CHECK_HAS(err, "the fake backend refuses");
  size_t after;
  l = reg_list(&after);
  reg_list_free(l, after);
  CHECK_INT(after, before);
  fk.fail_create = false;
}

typedef struct { char id[32]; int rc; } kill_job;
static void *killer(void *arg) {
  kill_job *j = arg;
  j->rc = reg_kill(j->id);
  return NULL;
}

/* A kill marks the entry dying at once, stops it, and destroys it only once every holder let go;
 * the hooks run before (dying) and after (gone), in that order. */
static void test_kill_waits_for_holders(void) {
  reg_info in;
  reg_entry *e = make(false, 300, &in);
  json_decref(in.metadata);
  CHECK(e != NULL);
  int dyings = fk_count(&fk.dyings), destroys = fk_count(&fk.destroys), gones = fk_count(&fk.gones);
  int stops = fk_count(&fk.stops);   /* before the killer starts: it may stop it at once */
  kill_job j;
  snprintf(j.id, sizeof j.id, "%s", in.id);
  pthread_t t;
  pthread_create(&t, NULL, killer, &j);
  CHECK(fk_wait(&fk.stops, stops + 1));
  CHECK(fk_count(&fk.dyings) > dyings);
  CHECK(reg_get(in.id) == NULL);         /* dying: nothing new may use it */
  CHECK(reg_dying(e));
  CHECK(reg_exists(in.id));              /* but it is still reported until it is gone */
  CHECK_INT(fk_count(&fk.destroys), destroys);   /* we still hold it */
  uint64_t v;
  CHECK(read(reg_kill_fd(e), &v, sizeof v) == (ssize_t)sizeof v);   /* long handlers were woken */
  reg_put(e);
  pthread_join(t, NULL);
  CHECK_INT(j.rc, 0);
  CHECK_INT(fk_count(&fk.destroys), destroys + 1);
  CHECK_INT(fk_count(&fk.gones), gones + 1);
  CHECK(!reg_exists(in.id));
  reg_info gone;
  CHECK_INT(reg_lookup_info(in.id, &gone), -1);
  /* the order of what happened to it */
  char want[200];
  snprintf(want, sizeof want, "dying:%s stop:%s", in.id, in.id);
  CHECK_HAS(fk.log, want);
  snprintf(want, sizeof want, "destroy:%s gone:%s", in.id, in.id);
  CHECK_HAS(fk.log, want);
}

/* reg_kill_with: fn runs once the sandbox is stopped and every other holder let go, before it is
 * destroyed; an unknown sandbox, or one another kill already took, never reaches it. */
typedef struct { char id[32]; int rc, calls; bool stopped_then; int destroys_then; reg_entry *held; } with_job;
static void with_fn(sbx_t *s, void *cls) {
  with_job *j = cls;
  j->calls++;
  j->stopped_then = s->stopped;
  j->destroys_then = fk_count(&fk.destroys);
  fk_note("with", s->id, &fk.resumes);   /* in the log, in order (the counter is not checked) */
}
static void *with_killer(void *arg) {
  with_job *j = arg;
  j->rc = reg_kill_with(j->id, with_fn, j);
  return NULL;
}

static void test_kill_with(void) {
  reg_info in;
  reg_entry *e = make(false, 300, &in);
  json_decref(in.metadata);
  CHECK(e != NULL);
  int stops = fk_count(&fk.stops), destroys = fk_count(&fk.destroys);
  with_job j = {0};
  snprintf(j.id, sizeof j.id, "%s", in.id);
  pthread_t t;
  pthread_create(&t, NULL, with_killer, &j);
  CHECK(fk_wait(&fk.stops, stops + 1));
  struct timespec ts = {0, 50 * 1000000L};
  nanosleep(&ts, NULL);
  CHECK_INT(j.calls, 0);                 /* we still hold it: fn waits for us */
  reg_put(e);
  pthread_join(t, NULL);
  CHECK_INT(j.rc, 0);
  CHECK_INT(j.calls, 1);
  CHECK(j.stopped_then);
  CHECK_INT(j.destroys_then, destroys);  /* before the destroy */
  CHECK_INT(fk_count(&fk.destroys), destroys + 1);
  char want[200];
  snprintf(want, sizeof want, "with:%s destroy:%s gone:%s", in.id, in.id, in.id);
  CHECK_HAS(fk.log, want);
  const char *with_at = strstr(fk.log, want);
  snprintf(want, sizeof want, "stop:%s", in.id);
  const char *stop_at = strstr(fk.log, want);
  CHECK(stop_at && with_at && stop_at < with_at);
  with_job none = {0};
  CHECK_INT(reg_kill_with("nosuchsandbox", with_fn, &none), -1);
  CHECK_INT(none.calls, 0);
  /* another kill under way: this one waits for it, and fn is not run */
  e = make(false, 300, &in);
  json_decref(in.metadata);
  kill_job k;
  snprintf(k.id, sizeof k.id, "%s", in.id);
  stops = fk_count(&fk.stops);
  pthread_t t2;
  pthread_create(&t2, NULL, killer, &k);
  CHECK(fk_wait(&fk.stops, stops + 1));
  with_job late = {0};
  snprintf(late.id, sizeof late.id, "%s", in.id);
  pthread_create(&t, NULL, with_killer, &late);
  nanosleep(&ts, NULL);
  reg_put(e);
  pthread_join(t2, NULL);
  pthread_join(t, NULL);
  CHECK_INT(k.rc, 0);
  CHECK_INT(late.rc, -1);
  CHECK_INT(late.calls, 0);
}

/* reg_with_running: the callback sees the sandbox and its info while nothing pauses or kills it;
 * a kill started meanwhile waits for it. Paused, unknown and dying sandboxes never reach it. */
typedef struct { sbx_t *seen; char template_id[REG_TEMPLATE_MAX]; int calls; int rc; kill_job *kill; pthread_t killer; } run_ctx;
static int run_cb(sbx_t *s, const reg_info *in, void *cls) {
  run_ctx *c = cls;
  c->seen = s;
  c->calls++;
  snprintf(c->template_id, sizeof c->template_id, "%s", in->template_id);
  if (c->kill) {   /* a kill while we run: it stops the sandbox only after we return */
    int stops = fk_count(&fk.stops);
    pthread_create(&c->killer, NULL, killer, c->kill);
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
    if (fk_count(&fk.stops) != stops) c->rc = -100;
    CHECK(!s->stopped);
  }
  return c->rc;
}

static void test_with_running(void) {
  reg_create_opts o = fk_opts(false, 300);
  o.template_id = "snapid0000000000000a";
  o.template_alias = "my-snap";
  reg_info in;
  char err[256];
  CHECK_INT(reg_create(&o, &in, err, sizeof err), 0);
  CHECK_STR(in.template_id, "snapid0000000000000a");
  CHECK_STR(in.template_alias, "my-snap");
  json_decref(in.metadata);
  run_ctx c = {.rc = 7};
  CHECK_INT(reg_with_running(in.id, run_cb, &c), 7);   /* the callback's result */
  CHECK_INT(c.calls, 1);
  CHECK(c.seen != NULL && !strcmp(c.seen->id, in.id));
  CHECK_STR(c.template_id, "snapid0000000000000a");
  CHECK_INT(reg_with_running("nosuchsandbox", run_cb, &c), -1);
  CHECK_INT(reg_pause(in.id), 0);
  CHECK_INT(reg_with_running(in.id, run_cb, &c), -2);
  CHECK_INT(c.calls, 1);                                 /* paused: never called */
  bool resumed;
  reg_info again;
  CHECK_INT(reg_connect(in.id, 300, &resumed, &again), 0);
  json_decref(again.metadata);
  kill_job j;
  snprintf(j.id, sizeof j.id, "%s", in.id);
  c = (run_ctx){.rc = 0, .kill = &j};
  CHECK_INT(reg_with_running(in.id, run_cb, &c), 0);
  pthread_join(c.killer, NULL);
  CHECK_INT(j.rc, 0);
  CHECK(!reg_exists(in.id));
  /* defaults: "base" for both */
  reg_create_opts d = fk_opts(false, 300);
  CHECK_INT(reg_create(&d, &in, err, sizeof err), 0);
  CHECK_STR(in.template_id, "base");
  CHECK_STR(in.template_alias, "base");
  json_decref(in.metadata);
  CHECK_INT(reg_kill(in.id), 0);
}

/* reg_wake: envd traffic resumes a paused sandbox made with auto_resume (its create timeout again);
 * one without stays paused; a running one is left alone. */
static void test_wake(void) {
  reg_create_opts o = fk_opts(false, 120);
  o.auto_resume = true;
  reg_info in;
  char err[256];
  CHECK_INT(reg_create(&o, &in, err, sizeof err), 0);
  CHECK(in.auto_resume);
  json_decref(in.metadata);
  reg_entry *e = reg_get(in.id);
  int resumes = fk_count(&fk.resumes);
  CHECK_INT(reg_wake(e), 0);                    /* running: nothing to do */
  CHECK_INT(fk_count(&fk.resumes), resumes);
  CHECK_INT(reg_set_timeout(in.id, 5), 0);
  CHECK_INT(reg_pause(in.id), 0);
  CHECK(reg_paused(e));
  CHECK_INT(reg_wake(e), 0);
  CHECK(!reg_paused(e));
  CHECK_INT(fk_count(&fk.resumes), resumes + 1);
  reg_info after;
  CHECK_INT(reg_lookup_info(in.id, &after), 0);
  CHECK(after.end_ms - wall_ms() > 100 * 1000);   /* the create's 120 s, not the 5 s set later */
  json_decref(after.metadata);
  reg_put(e);
  CHECK_INT(reg_kill(in.id), 0);
  /* without auto_resume */
  reg_create_opts p = fk_opts(false, 120);
  CHECK_INT(reg_create(&p, &in, err, sizeof err), 0);
  CHECK(!in.auto_resume);
  json_decref(in.metadata);
  e = reg_get(in.id);
  CHECK_INT(reg_pause(in.id), 0);
  CHECK_INT(reg_wake(e), -1);
  CHECK(reg_paused(e));
  reg_put(e);
  CHECK_INT(reg_kill(in.id), 0);
}

static void test_expiry(void) {
  int gones = fk_count(&fk.gones);
  reg_info in;
  reg_entry *e = make(false, 0, &in);    /* a lease that ends now */
  json_decref(in.metadata);
  reg_put(e);
  CHECK(fk_wait(&fk.gones, gones + 1));
  CHECK(!reg_exists(in.id));
}

/* The backend's pause returns before the entry says paused: wait for it (bounded, a hang detector). */
static bool wait_paused(const char *id) {
  for (int i = 0; i < 30000; i++) {
    reg_info in;
    if (reg_lookup_info(id, &in) == 0) {
      json_decref(in.metadata);
      if (in.paused) return true;
    }
    usleep(1000);
  }
  return false;
}

static void test_auto_pause(void) {
  reg_create_opts o = fk_opts(false, 0);
  o.auto_pause = true;
  reg_info in;
  char err[256];
  int pauses = fk_count(&fk.pauses);
  CHECK_INT(reg_create(&o, &in, err, sizeof err), 0);
  json_decref(in.metadata);
  CHECK(fk_wait(&fk.pauses, pauses + 1));   /* expiry pauses it instead of killing it */
  CHECK(wait_paused(in.id));
  CHECK(!reg_exists(in.id));                /* envd does not serve a paused sandbox */
  CHECK_INT(reg_pause(in.id), -2);          /* already paused */
  bool resumed = false;
  reg_info c;
  CHECK_INT(reg_connect(in.id, 60, &resumed, &c), 0);
  CHECK(resumed);
  CHECK(!c.paused);
  CHECK(c.end_ms > wall_ms() + 50000);
  json_decref(c.metadata);
  /* a backend that cannot freeze: pause says so (-3), and an expiry kills instead */
  fk.fail_pause = true;
  CHECK_INT(reg_pause(in.id), -3);
  int gones = fk_count(&fk.gones);
  CHECK_INT(reg_set_timeout(in.id, 0), 0);
  CHECK(fk_wait(&fk.gones, gones + 1));
  fk.fail_pause = false;
  CHECK_INT(reg_pause("nosuchsandbox"), -1);
}

static void test_lease(void) {
  reg_info in;
  reg_entry *e = make(false, 100, &in);
  json_decref(in.metadata);
  reg_put(e);
  bool resumed;
  reg_info c;
  CHECK_INT(reg_connect(in.id, 10, &resumed, &c), 0);   /* never shortens */
  CHECK(!resumed);
  CHECK(c.end_ms >= in.end_ms);
  json_decref(c.metadata);
  CHECK_INT(reg_set_timeout(in.id, 10), 0);               /* set_timeout does */
  reg_info s;
  CHECK_INT(reg_lookup_info(in.id, &s), 0);
  CHECK(s.end_ms < in.end_ms);
  json_decref(s.metadata);
  CHECK_INT(reg_set_timeout("nosuchsandbox", 10), -1);
  CHECK_INT(reg_connect("nosuchsandbox", 10, &resumed, &c), -1);
  CHECK_INT(reg_kill(in.id), 0);
}

static bool token_is(const char *token, void *cls) { return !strcmp(token, (const char *)cls); }

static void test_list_and_token_lookup(void) {
  reg_info a, b, c;
  reg_entry *ea = make(true, 300, &a), *eb = make(true, 300, &b), *ec = make(false, 300, &c);
  size_t n;
  reg_info *all = reg_list(&n);
  CHECK(n >= 3);
  /* newest first */
  for (size_t i = 1; i < n; i++) CHECK(all[i - 1].seq > all[i].seq);
  reg_list_free(all, n);
  reg_entry *f = reg_find_by_token(token_is, b.token);
  CHECK(f == eb);
  reg_put(f);
  CHECK(reg_find_by_token(token_is, "no-such-token") == NULL);
  CHECK(reg_find_by_token(token_is, "") == NULL);   /* the insecure one's empty token never matches */
  /* watch slots: a per-sandbox budget */
  CHECK_INT(reg_watch_slot(ea, +1, 2), 0);
  CHECK_INT(reg_watch_slot(ea, +1, 2), 0);
  CHECK_INT(reg_watch_slot(ea, +1, 2), -1);
  CHECK_INT(reg_watch_slot(ea, -1, 0), 0);
  CHECK_INT(reg_watch_slot(ea, +1, 2), 0);
  reg_put(ea);
  reg_put(eb);
  reg_put(ec);
  const char *ids[] = {a.id, b.id, c.id};
  for (int i = 0; i < 3; i++) CHECK_INT(reg_kill(ids[i]), 0);
  json_decref(a.metadata);
  json_decref(b.metadata);
  json_decref(c.metadata);
}

static void test_metadata_is_copied(void) {
  json_t *md = json_pack("{s:s}", "k", "v");
  reg_create_opts o = fk_opts(false, 300);
  o.metadata = md;
  reg_info in;
  char err[256];
  CHECK_INT(reg_create(&o, &in, err, sizeof err), 0);
  json_object_set_new(md, "k", json_string("changed"));
  reg_info again;
  CHECK_INT(reg_lookup_info(in.id, &again), 0);
  CHECK_STR(json_string_value(json_object_get(again.metadata, "k")), "v");
  json_decref(again.metadata);
  json_decref(in.metadata);
  json_decref(md);
  CHECK_INT(reg_kill(in.id), 0);
}

static void test_shutdown_kills_everything(void) {
  reg_info a, b;
  reg_entry *ea = make(false, 300, &a), *eb = make(true, 300, &b);
  reg_put(ea);
  reg_put(eb);
  json_decref(a.metadata);
  json_decref(b.metadata);
  reg_shutdown();
  size_t n;
  reg_info *l = reg_list(&n);
  reg_list_free(l, n);
  CHECK_INT(n, 0);
  CHECK_INT(fk_count(&fk.creates), fk_count(&fk.destroys));   /* every sandbox made was destroyed */
}

int main(void) {
  if (reg_init(&FK_BACKEND, &FK_HOOKS) != 0) { fprintf(stderr, "reg_init failed\n"); return 1; }
  MBT_RUN(test_ids_and_tokens);
  MBT_RUN(test_backend_chosen_id);
  MBT_RUN(test_create_failure);
  MBT_RUN(test_kill_waits_for_holders);
  MBT_RUN(test_with_running);
  MBT_RUN(test_kill_with);
  MBT_RUN(test_wake);
  MBT_RUN(test_expiry);
  MBT_RUN(test_auto_pause);
  MBT_RUN(test_lease);
  MBT_RUN(test_list_and_token_lookup);
  MBT_RUN(test_metadata_is_copied);
  MBT_RUN(test_shutdown_kills_everything);
  return mbt_report();
}
