/* s1.h: the System One contract (POST /v1/systemone) on the server side.
 *
 * Two things every route of tandem serve needs: checking a request body
 * before it is forwarded to an engine child, and the one error body shape
 * tandem returns everywhere (shared/reference/systemone-api.md, "Errors").
 * Pure functions over jansson values; no state, no I/O. */
#ifndef TANDEM_S1_H
#define TANDEM_S1_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "proto/s1q.h"

/* Checks a parsed POST /v1/systemone body (borrowed, not modified) against
 * the request contract:
 *   - the body is an object;
 *   - "model": optional string;
 *   - "state": required string, object or array;
 *   - "questions": required non-empty object, id -> question, each checked by
 *     s1q_check() with max_options (proto/s1q.h): "type" ("choice", "score"
 *     or "noul") and "instructions" (string, object or array), and "criteria"
 *     by type:
 *       choice: required object, option -> description (string, object, array
 *               or null), 1 to max_options options;
 *       score:  required array of S1Q_MIN_SCORE_LEVELS to S1Q_MAX_SCORE_LEVELS
 *               level descriptions (string, object or array), lowest first;
 *       noul:   optional (null counts as absent); an object whose only keys are
 *               "true" and/or "false" (string, object, array or null);
 *   - "images", "files": optional arrays of strings.
 * Unknown extra fields, at the top level and inside questions, are allowed:
 * clients add their own and the engine ignores them. Question ids must be
 * non-empty; otherwise they and option names are the caller's, passed
 * verbatim. max_options is the loaded model's limit (S1Q_MAX_CHOICE_OPTIONS
 * normally, S1Q_OPENJEV_MAX_CHOICE_OPTIONS for openjev).
 * Returns TANDEM_OK, or TANDEM_ERR_FORMAT for the first problem found (body
 * NULL included) with err[errlen] (optional, caller-owned output) set to
 * "<field path>: <what is wrong>", e.g. "questions.route.criteria: expected
 * at least 1 option, got an empty object". A message cut short to fit errlen
 * never ends inside a UTF-8 sequence. */
tandem_err s1_validate_request(const json_t *body, unsigned max_options, char *err,
                               size_t errlen);

/* The choice options a model of decision type decision_type takes:
 * S1Q_OPENJEV_MAX_CHOICE_OPTIONS for "openjev", S1Q_MAX_CHOICE_OPTIONS otherwise. */
unsigned s1_max_options(const char *decision_type);

/* Returns the body's "model" string, or NULL when body is not an object or
 * "model" is absent or not a string. The pointer is borrowed from body and
 * valid while body holds it. */
const char *s1_request_model(const json_t *body);

/* Returns the static default error type for an HTTP status: 400 and 422
 * "invalid_request_error", 401 "authentication_error", 403
 * "permission_error", 404 "not_found_error", 405 "method_not_allowed", 413
 * "request_too_large", 429 "queue_full", 500 "internal_error", 501
 * "not_supported_error", 502 "upstream_error", 503 "unavailable_error", 504
 * "deadline_exceeded", anything else "error". Never returns NULL. */
const char *s1_error_type(int status);

/* Builds tandem's one error body, shared by every route:
 *   {"error": {"code": status, "type": type, "message": message, "param": param},
 *    "detail": {"error_type": type, "message": message}}
 * "error" serves OpenAI-style clients, "detail" TypeSafe clients. param is
 * omitted when NULL; type NULL means s1_error_type(status); message NULL
 * means "". Strings are copied (borrowed only for the call); a string that
 * is not valid UTF-8 has its non-ASCII bytes replaced by '?', so that the
 * body always serializes.
 * Returns a new object (caller owns: json_decref()), or NULL when out of
 * memory. Callers may add members to the "error" object afterwards. */
json_t *s1_error_body(int status, const char *type, const char *message, const char *param);

/* s1_error_body(status, type, message, NULL) serialized (compact, in order)
 * into out[cap] (cap > 0), NUL-terminated; when it does not fit, the same
 * document with the message "refused"; "" when out of memory or cap is too
 * small even for that. */
void s1_error_dump(int status, const char *type, const char *message, char *out, size_t cap);

/* A key of what an engine's answer to a request body depends on, for the
 * scheduler's repeat check (sched_submit): a 64-bit FNV-1a hash of the
 * compact, key-sorted JSON of the body's "state" (System One), else its
 * "messages", "prompt" or "input" (the OpenAI routes), the first present.
 * Equal values give equal keys; distinct values almost always differ (a
 * collision only costs a needless slot erase). Returns 0 when body is not
 * an object, holds none of those members, or memory runs out. */
uint64_t s1_prompt_key(const json_t *body);

#endif
