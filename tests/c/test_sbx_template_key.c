/* test_sbx_template_key.c — a template build step's cache key (sandboxd/template_key.c): the
 * encoding checked against vectors computed independently (Python's hashlib over the documented
 * length-prefixed fields), every input that decides a step's result changes its key, and inputs
 * that would concatenate to the same bytes do not collide. */
#include "mbtest.h"

#include <string.h>

#include "template_key.h"

#define HASH_A "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define HASH_B "1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static const char *const ENVS[] = {"A=1", "B=2"};

static tk_ctx ctx(const char *user, const char *workdir, size_t nenvs) {
  return (tk_ctx){.user = user, .workdir = workdir, .envs = ENVS, .nenvs = nenvs};
}

static ts_step run(const char *const *args, size_t nargs, const char *user) {
  return (ts_step){.kind = TS_RUN, .args = args, .nargs = nargs, .cmd = args[0], .user = user};
}

static void test_vectors(void) {
  char base[TK_KEY_LEN + 1], step[TK_KEY_LEN + 1], fin[TK_KEY_LEN + 1];
  tk_ctx c0 = ctx("user", "", 0), c1 = ctx("user", "/app", 1);
  CHECK_INT(tk_base(NULL, &c0, base), 0);
  CHECK_STR(base, "7a816b5d6f19d4fd9c0490664bd681971c751347b35e34a8d5f27b5c3c555fa7");
  const char *args[] = {"echo hi"};
  ts_step s = run(args, 1, NULL);
  CHECK_INT(tk_step(base, &s, &c1, step), 0);
  CHECK_STR(step, "549c69965796bfaab6410eb41aa11425c244f4b44b0fe81a24a9697f62a552fa");
  CHECK_INT(tk_final(step, "npm start", NULL, fin), 0);
  CHECK_STR(fin, "16c304739aa38caec9184090dc16e170e84ae01c10963b6bfe2a0e5b16890ea6");
  CHECK_INT((int)strlen(fin), TK_KEY_LEN);
}

/* Every key below must differ from every other. */
#define MAXK 64
static char keys[MAXK][TK_KEY_LEN + 1];
static const char *what[MAXK];
static int nkeys;
static void add(const char *w, const char *k) {
  for (int i = 0; i < nkeys; i++)
    if (!strcmp(keys[i], k)) { printf("  '%s' has the key of '%s'\n", w, what[i]); CHECK(0); }
  if (nkeys < MAXK) { memcpy(keys[nkeys], k, TK_KEY_LEN + 1); what[nkeys++] = w; }
}

static void test_inputs_matter(void) {
  char parent[TK_KEY_LEN + 1], other[TK_KEY_LEN + 1], k[TK_KEY_LEN + 1];
  tk_ctx c = ctx("user", "/w", 2);
  CHECK_INT(tk_base(NULL, &c, parent), 0);
  add("base on base", parent);
  CHECK_INT(tk_base("abcdefghij0123456789", &c, other), 0);
  add("base on a layer", other);
  tk_ctx cu = ctx("root", "/w", 2);
  CHECK_INT(tk_base(NULL, &cu, k), 0);
  add("base as root", k);

  const char *a1[] = {"echo hi"}, *a2[] = {"echo ho"}, *a3[] = {"echo hi", "root"}, *s1[] = {"ab", "c"}, *s2[] = {"a", "bc"};
  ts_step s = run(a1, 1, NULL);
  CHECK_INT(tk_step(parent, &s, &c, k), 0);
  add("RUN echo hi", k);
  char again[TK_KEY_LEN + 1];
  CHECK_INT(tk_step(parent, &s, &c, again), 0);
  CHECK_STR(again, k);                                    /* the same inputs, the same key */
  s.force = true;                                         /* force is no input: a forced step refreshes its entry */
  CHECK_INT(tk_step(parent, &s, &c, again), 0);
  CHECK_STR(again, k);
  CHECK_INT(tk_step(other, &s, &c, k), 0);
  add("RUN echo hi on another parent", k);
  s = run(a2, 1, NULL);
  CHECK_INT(tk_step(parent, &s, &c, k), 0);
  add("RUN echo ho", k);
  s = run(a3, 2, "root");
  CHECK_INT(tk_step(parent, &s, &c, k), 0);
  add("RUN echo hi as root", k);
  s = run(a1, 1, "");
  CHECK_INT(tk_step(parent, &s, &c, k), 0);
  add("RUN echo hi, user \"\"", k);
  s = run(s1, 2, NULL);
  CHECK_INT(tk_step(parent, &s, &c, k), 0);
  add("args ab c", k);
  s = run(s2, 2, NULL);
  CHECK_INT(tk_step(parent, &s, &c, k), 0);
  add("args a bc", k);
  s = run(a1, 1, NULL);
  s.kind = TS_WORKDIR;
  CHECK_INT(tk_step(parent, &s, &c, k), 0);
  add("WORKDIR echo hi", k);

  /* what is set when it runs */
  s = run(a1, 1, NULL);
  tk_ctx v[] = {ctx("root", "/w", 2), ctx("user", "/x", 2), ctx("user", "", 2), ctx("user", "/w", 1), ctx("user", "/w", 0)};
  const char *vw[] = {"as root", "in /x", "in home", "one env", "no env"};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    CHECK_INT(tk_step(parent, &s, &v[i], k), 0);
    add(vw[i], k);
  }
  const char *swapped[] = {"B=2", "A=1"}, *changed[] = {"A=1", "B=3"};
  tk_ctx cs = {.user = "user", .workdir = "/w", .envs = swapped, .nenvs = 2}, cc = {.user = "user", .workdir = "/w", .envs = changed, .nenvs = 2};
  CHECK_INT(tk_step(parent, &s, &cs, k), 0);
  add("envs in another order", k);
  CHECK_INT(tk_step(parent, &s, &cc, k), 0);
  add("an env changed", k);

  /* COPY: the files' hash, the mode */
  const char *ca[] = {"src", "/dst", "", ""};
  ts_step cp = {.kind = TS_COPY, .args = ca, .nargs = 4, .src = "src", .dest = "/dst", .hash = HASH_A};
  CHECK_INT(tk_step(parent, &cp, &c, k), 0);
  add("COPY, files A", k);
  cp.hash = HASH_B;
  CHECK_INT(tk_step(parent, &cp, &c, k), 0);
  add("COPY, files B", k);
  cp.has_mode = true;
  cp.mode = 0;
  CHECK_INT(tk_step(parent, &cp, &c, k), 0);
  add("COPY, files B, mode 0", k);
  cp.mode = 0755;
  CHECK_INT(tk_step(parent, &cp, &c, k), 0);
  add("COPY, files B, mode 755", k);

  /* the final state: start and ready commands */
  CHECK_INT(tk_final(parent, NULL, NULL, k), 0);
  add("no start command", k);
  CHECK_INT(tk_final(parent, "srv", NULL, k), 0);
  add("start srv", k);
  CHECK_INT(tk_final(parent, "srv", "", k), 0);
  add("start srv, ready \"\"", k);
  CHECK_INT(tk_final(parent, "srv", "curl", k), 0);
  add("start srv, ready curl", k);
  CHECK_INT(tk_final(parent, "srvcurl", NULL, k), 0);
  add("start srvcurl", k);
  CHECK_INT(tk_final(other, "srv", "curl", k), 0);
  add("start srv, ready curl after another step", k);
}

int main(void) {
  MBT_RUN(test_vectors);
  MBT_RUN(test_inputs_matter);
  return mbt_report();
}
