/* network_opts.c — E2B's network options parsed (network_opts.h). */
#include "network_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net.h"

#define MASK_MAX 253

/* A list of strings (absent or null: none) as a C array into *out (borrowed strings). 0, or -1
 * after replying. */
static int string_list(sd_request *r, json_t *v, const char *pre, const char *field, const char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_array(v)) { sd_reply_error(r, 400, "field '%s%s' must be an array of strings", pre, field); return -1; }
  size_t count = json_array_size(v);
  if (count > EGRESS_MAX_ENTRIES) {
    sd_reply_error(r, 400, "field '%s%s': at most %d entries (got %zu)", pre, field, EGRESS_MAX_ENTRIES, count);
    return -1;
  }
  const char **l = calloc(count ? count : 1, sizeof *l);
  if (!l) { sd_reply_error(r, 500, "out of memory"); return -1; }
  for (size_t i = 0; i < count; i++) {
    json_t *e = json_array_get(v, i);
    if (!json_is_string(e)) {
      sd_reply_error(r, 400, "field '%s%s[%zu]' must be a string (an address, a CIDR or a host name)", pre, field, i);
      free(l);
      return -1;
    }
    l[i] = json_string_value(e);
  }
  *out = l;
  *n = count;
  return 0;
}

/* The lists parsed into o->rules, and o->reported's allowOut/denyOut as in force. pre: where the
 * request has them ("network." on create). */
static int egress_lists(sd_request *r, const char *pre, json_t *allow_v, json_t *deny_v, net_opts *o) {
  const char **allow = NULL, **deny = NULL;
  size_t na = 0, nd = 0;
  char err[512];
  int rc = -1;
  if (string_list(r, allow_v, pre, "allowOut", &allow, &na) != 0 || string_list(r, deny_v, pre, "denyOut", &deny, &nd) != 0) goto out;
  if ((na || nd) && !net_guarded()) {
    sd_reply_error(r, 501, "field '%s%s': egress rules need sandboxd to run as root (without root a sandbox reaches "
                   "the network through pasta, which cannot enforce them)", pre, na ? "allowOut" : "denyOut");
    goto out;
  }
  /* E2B: allow_internet_access false replaces denyOut with all traffic. */
  if (egress_rules_parse(&o->rules, o->internet, allow, na, o->internet ? deny : NULL, o->internet ? nd : 0, err, sizeof err) != 0) {
    size_t at = strcspn(err, ":");            /* err: "allowOut[2]: why" */
    sd_reply_error(r, 400, "field '%s%.*s'%s", pre, (int)at, err, err + at);
    goto out;
  }
  json_t *a = json_array(), *d = json_array();
  for (size_t i = 0; i < o->rules.nallow; i++) json_array_append_new(a, json_string(o->rules.allow[i].text));
  if (!o->internet) json_array_append_new(d, json_string("0.0.0.0/0"));
  for (size_t i = 0; i < o->rules.ndeny; i++) json_array_append_new(d, json_string(o->rules.deny[i].text));
  json_object_set_new(o->reported, "allowOut", a);
  json_object_set_new(o->reported, "denyOut", d);
  rc = 0;
out:
  free(allow);
  free(deny);
  return rc;
}

/* `rules` {host: [{transform: {headers: {name: value}}}]} into o->rules.tf (after the lists: they
 * reset the rules) and o->reported's `rules` (keys as normalised). 0, or -1 after replying. */
static int parse_rules(sd_request *r, const char *pre, json_t *v, net_opts *o) {
  if (!v || json_is_null(v)) return 0;
  if (!json_is_object(v)) { sd_reply_error(r, 400, "field '%srules' must be an object {host: [rule, ...]}", pre); return -1; }
  if (json_object_size(v) && !net_guarded()) {
    sd_reply_error(r, 501, "field '%srules': per-host transforms need sandboxd to run as root (its egress proxy)", pre);
    return -1;
  }
  json_t *reported = json_object();
  const char *host;
  json_t *list;
  json_object_foreach(v, host, list) {
    size_t i;
    json_t *rule;
    if (!json_is_array(list)) { sd_reply_error(r, 400, "field '%srules[\"%.80s\"]' must be an array of rules", pre, host); goto fail; }
    json_array_foreach(list, i, rule) {
      json_t *tf = json_is_object(rule) ? json_object_get(rule, "transform") : NULL;
      json_t *headers = json_is_object(tf) ? json_object_get(tf, "headers") : NULL;
      if (!json_is_object(rule) || json_object_size(rule) > (tf ? 1u : 0u) || (tf && (!json_is_object(tf) ||
          json_object_size(tf) > (headers ? 1u : 0u) || (headers && !json_is_object(headers))))) {
        sd_reply_error(r, 400, "field '%srules[\"%.80s\"][%zu]' must be {\"transform\": {\"headers\": {name: value}}} "
                       "(no other field)", pre, host, i);
        goto fail;
      }
      size_t n = headers ? json_object_size(headers) : 0, k = 0;
      const char *names[TRANSFORM_MAX_HEADERS + 1], *values[TRANSFORM_MAX_HEADERS + 1];
      const char *hn;
      json_t *hv;
      if (n > TRANSFORM_MAX_HEADERS) {
        sd_reply_error(r, 400, "field '%srules[\"%.80s\"][%zu]': at most %d headers", pre, host, i, TRANSFORM_MAX_HEADERS);
        goto fail;
      }
      if (headers) json_object_foreach(headers, hn, hv) { names[k] = hn; values[k++] = json_is_string(hv) ? json_string_value(hv) : NULL; }
      char err[512];
      if (transforms_add(&o->rules.tf, host, names, values, n, err, sizeof err) != 0) {
        sd_reply_error(r, 400, "field '%srules' %s", pre, err);
        goto fail;
      }
    }
    const transform_host *th = o->rules.tf.nhosts ? &o->rules.tf.hosts[o->rules.tf.nhosts - 1] : NULL;
    json_object_set(reported, th && json_array_size(list) ? th->host : host, list);
  }
  json_object_set_new(o->reported, "rules", reported);
  return 0;
fail:
  json_decref(reported);
  return -1;
}

static int refused_field(sd_request *r, const char *k, json_t *v) {
  if (!strcmp(k, "egressProxy")) {
    sd_reply_error(r, 400, "field 'network.egressProxy' (a SOCKS5 proxy for the sandbox's egress) is not supported by sandboxd");
  } else if (!strcmp(k, "httpsPorts")) {
    if (json_is_array(v) && json_array_size(v) == 0) return 0;
    sd_reply_error(r, 400, "field 'network.httpsPorts' (ports the port proxy reaches over TLS) is not supported by sandboxd");
  } else {
    sd_reply_error(r, 400, "field 'network.%s' is not one of E2B's network options (allowOut, denyOut, allowPublicTraffic, "
                   "maskRequestHost, rules, egressProxy, httpsPorts)", k);
  }
  return -1;
}

/* maskRequestHost: a Host header value once ${PORT} is replaced: visible ASCII, no '/' or '@'. */
static bool valid_mask(const char *m) {
  size_t n = strlen(m);
  if (!n || n > MASK_MAX) return false;
  for (size_t i = 0; i < n; i++)
    if (m[i] <= ' ' || m[i] >= 0x7f || m[i] == '/' || m[i] == '@' || m[i] == '\\' || m[i] == '?' || m[i] == '#') return false;
  return true;
}

int net_opts_create(sd_request *r, json_t *network, bool internet, net_opts *out) {
  memset(out, 0, sizeof *out);
  out->internet = internet;
  out->reported = json_object();
  json_t *allow = NULL, *deny = NULL, *rules = NULL;
  bool asked = !internet;
  if (network && !json_is_null(network)) {
    if (!json_is_object(network)) { sd_reply_error(r, 400, "field 'network' must be an object"); goto fail; }
    const char *k;
    json_t *v;
    json_object_foreach(network, k, v) {
      if (json_is_null(v)) continue;
      if (!strcmp(k, "allowOut")) allow = v;
      else if (!strcmp(k, "denyOut")) deny = v;
      else if (!strcmp(k, "rules")) rules = v;
      else if (!strcmp(k, "allowPublicTraffic")) {
        if (!json_is_boolean(v)) { sd_reply_error(r, 400, "field 'network.allowPublicTraffic' must be a boolean"); goto fail; }
        out->private_ports = json_is_false(v);   /* its ports need the traffic access token */
        json_object_set(out->reported, k, v);
      } else if (!strcmp(k, "maskRequestHost")) {
        if (!json_is_string(v) || !valid_mask(json_string_value(v))) {
          sd_reply_error(r, 400, "field 'network.maskRequestHost' must be a host name, with ${PORT} where the port goes "
                         "(at most %d visible characters, no '/', '@', '?', '#')", MASK_MAX);
          goto fail;
        }
        json_object_set(out->reported, k, v);
      } else if (refused_field(r, k, v) != 0) goto fail;
      asked = true;
    }
  }
  if (egress_lists(r, "network.", allow, deny, out) != 0 || parse_rules(r, "network.", rules, out) != 0) goto fail;
  if (!asked) { json_decref(out->reported); out->reported = NULL; }
  return 0;
fail:
  net_opts_free(out);
  return -1;
}

int net_opts_update(sd_request *r, json_t *body, json_t *current, net_opts *out) {
  memset(out, 0, sizeof *out);
  out->internet = true;                  /* what the update leaves out is cleared */
  out->reported = json_object();
  json_t *allow = NULL, *deny = NULL, *rules = NULL;
  const char *k;
  json_t *v;
  json_object_foreach(body, k, v) {
    if (json_is_null(v)) continue;
    if (!strcmp(k, "allowOut")) allow = v;
    else if (!strcmp(k, "denyOut")) deny = v;
    else if (!strcmp(k, "allow_internet_access")) {
      if (!json_is_boolean(v)) { sd_reply_error(r, 400, "field 'allow_internet_access' must be a boolean"); goto fail; }
      out->internet = json_is_true(v);
    } else if (!strcmp(k, "rules")) {
      rules = v;
    } else if (!strcmp(k, "egressProxy")) {
      if (refused_field(r, k, v) != 0) goto fail;
    } else {
      sd_reply_error(r, 400, "field '%s' is not part of a network update (allowOut, denyOut, allow_internet_access, rules, "
                     "egressProxy)", k);
      goto fail;
    }
  }
  if (!net_guarded()) {
    sd_reply_error(r, 501, "network updates need sandboxd to run as root (without root a sandbox reaches the network "
                   "through pasta, which cannot enforce egress rules)");
    goto fail;
  }
  if (egress_lists(r, "", allow, deny, out) != 0 || parse_rules(r, "", rules, out) != 0) goto fail;
  /* The ingress options stay as created. */
  static const char *const INGRESS[] = {"allowPublicTraffic", "maskRequestHost"};
  for (size_t i = 0; i < 2 && current; i++)
    if (json_object_get(current, INGRESS[i])) json_object_set(out->reported, INGRESS[i], json_object_get(current, INGRESS[i]));
  return 0;
fail:
  net_opts_free(out);
  return -1;
}

void net_opts_free(net_opts *o) {
  egress_rules_free(&o->rules);
  json_decref(o->reported);
  o->reported = NULL;
}

bool net_opts_private_ports(json_t *network) {
  return network && json_is_false(json_object_get(network, "allowPublicTraffic"));
}

bool net_opts_mask_host(json_t *network, unsigned port, char *out, size_t cap) {
  json_t *m = network ? json_object_get(network, "maskRequestHost") : NULL;
  if (!json_is_string(m)) return false;
  const char *s = json_string_value(m);
  size_t n = 0;
  char p[8];
  snprintf(p, sizeof p, "%u", port);
  while (*s && n + 1 < cap) {
    if (!strncmp(s, "${PORT}", 7)) {
      n += (size_t)snprintf(out + n, cap - n, "%s", p);
      if (n >= cap) n = cap - 1;
      s += 7;
    } else {
      out[n++] = *s++;
    }
  }
  out[n] = 0;
  return true;
}

void net_opts_rules(json_t *reported, bool internet, egress_rules *out) {
  const char *l[2][EGRESS_MAX_ENTRIES];
  size_t n[2] = {0, 0};
  static const char *const LISTS[2] = {"allowOut", "denyOut"};
  for (int k = 0; k < 2; k++) {
    json_t *a = reported ? json_object_get(reported, LISTS[k]) : NULL, *e;
    size_t i;
    json_array_foreach(a, i, e)
      if (json_is_string(e) && n[k] < EGRESS_MAX_ENTRIES) l[k][n[k]++] = json_string_value(e);
  }
  /* They parsed when they were given; without internet access denyOut stands for all traffic. */
  if (egress_rules_parse(out, internet, l[0], n[0], internet ? l[1] : NULL, internet ? n[1] : 0, NULL, 0) != 0) {
    egress_rules_open(out);
    out->internet = false;               /* cannot happen; if it did, nothing gets out */
  }
  /* and the transforms, in their order */
  json_t *rules = reported ? json_object_get(reported, "rules") : NULL, *list;
  const char *host;
  json_object_foreach(rules, host, list) {
    size_t i;
    json_t *rule;
    json_array_foreach(list, i, rule) {
      json_t *headers = json_object_get(json_object_get(rule, "transform"), "headers"), *hv;
      const char *names[TRANSFORM_MAX_HEADERS], *values[TRANSFORM_MAX_HEADERS], *hn;
      size_t k = 0;
      json_object_foreach(headers, hn, hv) if (k < TRANSFORM_MAX_HEADERS) { names[k] = hn; values[k++] = json_string_value(hv); }
      (void)transforms_add(&out->tf, host, names, values, k, NULL, 0);   /* they parsed when given */
    }
  }
}
