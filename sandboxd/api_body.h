/* api_body.h — control-plane request bodies: one JSON object, its fields checked by name. Each
 * function that finds a field wrong replies 400 itself, naming the field and what was expected. */
#ifndef SANDBOXD_API_BODY_H
#define SANDBOXD_API_BODY_H
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "http.h"

#define API_MAX_TIMEOUT_S 86400

/* The body as an object (empty: {} when optional, else 400); NULL after replying. */
json_t *api_body_object(sd_request *r, bool optional);
/* `timeout`: absent or null → dflt; else an integer in [0, API_MAX_TIMEOUT_S]. 0, or -1 after replying. */
int api_timeout(sd_request *r, json_t *body, int64_t dflt, int64_t *out);
/* An object of strings (keys valid environment variable names when env_names). 0, or -1 after replying. */
int api_string_map(sd_request *r, json_t *v, const char *field, bool env_names);
/* A boolean field (absent or null → dflt). 0, or -1 after replying. */
int api_bool(sd_request *r, json_t *body, const char *field, bool dflt, bool *out);
/* Only the NULL-terminated `allowed` fields. 0, or -1 after replying naming the first other. */
int api_only_fields(sd_request *r, json_t *body, const char *const *allowed);
/* The request's first query parameter that `known` (NULL-terminated) does not name, or NULL. */
const char *api_query_unknown(const sd_request *r, const char *const *known);
/* 0 when every query parameter is one of `known`; else a 400 "query parameter 'x' is not
 * supported here (a, b are)" and -1. */
int api_query_only(sd_request *r, const char *const *known);
#endif
