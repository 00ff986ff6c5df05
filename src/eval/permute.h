/* permute.h: the option-order test of `tandem eval --permute K`.
 *
 * Every choice question of a set is asked again with its options in K seeded
 * permutations; the answers, mapped back to the original option order, show
 * how much the model's decision depends on where an option stands. A choice
 * question of one option has no other order: here it counts as no choice
 * question. */
#ifndef TANDEM_PERMUTE_H
#define TANDEM_PERMUTE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "eval/eval.h"
#include "eval/evalset.h"

/* Runs the option-order test of the choice questions of base->set against
 * params->endpoint. base holds the answers in the original order (the first
 * answered repeat of each case counts); each choice question is asked again
 * in k seeded orders (permute_orders() with seed), once each: params is used
 * as given (its progress callback too) except that repeat is 1. Cases
 * without a choice question are not sent, and of a case only its choice
 * questions are. On success *out is the summary's "permutation" object (new
 * reference, caller owns; fields in docs/eval.md); failed requests are
 * counted and listed there, not fatal. Returns TANDEM_ERR_INVAL (k = 0, or
 * no choice question), the errors of eval_run_new(), or TANDEM_ERR_NOMEM;
 * err[errlen] says why. */
tandem_err permute_run(const struct eval_run *base, const struct eval_params *params, unsigned k,
                       uint64_t seed, json_t **out, char *err, size_t errlen);

/* Writes the k orders of the n-option question `question` of case
 * `case_index` into perms[k * n] (caller-allocated output): order t is
 * perms[t * n .. t * n + n), and perms[t * n + j] is the original index of the
 * option asked at position j. Deterministic in (seed, case_index, question,
 * n, k); each order is a Fisher-Yates shuffle drawn from splitmix64, redrawn
 * while it is the identity or repeats an earlier order of its round (rounds
 * of n! - 1 orders, so orders differ from the identity and from each other
 * whenever n! - 1 >= k). n >= 2. */
void permute_orders(uint64_t seed, size_t case_index, size_t question, size_t n, unsigned k,
                    size_t *perms);

/* Builds in *out (caller owns; evalset_case_deinit()) the request of case c
 * asked in order t: only c's choice questions, each with its "criteria" keys
 * rearranged by its order (perms[qi] is question qi's k orders from
 * permute_orders(), NULL for non-choice questions) and its gold answer, when
 * it has one, as the plain option name. The case is parsed back by
 * evalset_parse_line(), so its options and gold index are in the asked order.
 * Returns TANDEM_ERR_INVAL when c has no choice question, TANDEM_ERR_NOMEM,
 * or evalset_parse_line()'s errors; err[errlen] says why. */
tandem_err permute_case_new(const struct evalset_case *c, const size_t *const *perms, unsigned t,
                            struct evalset_case *out, char *err, size_t errlen);

/* Builds the permuted copy of base (*out, caller owns; evalset_free()): for
 * each order t = 0..k-1, every case of base with a choice question, asked in
 * order t (permute_case_new(), orders from permute_orders() with seed); case
 * t * m + i of the copy is the i-th such case in order t, m of them. base is
 * borrowed for the call. Returns TANDEM_ERR_INVAL (k = 0, or no choice
 * question), TANDEM_ERR_NOMEM, or permute_case_new()'s errors; err[errlen]
 * says why. */
tandem_err permute_set_new(const struct evalset *base, unsigned k, uint64_t seed,
                           struct evalset **out, char *err, size_t errlen);

/* Compares asked (a run of permute_set_new(base->set, k, seed), repeat 1)
 * with base and returns the "permutation" object (new reference, caller
 * owns), or NULL when out of memory. Both runs are borrowed. */
json_t *permute_summarize(const struct eval_run *base, const struct eval_run *asked, unsigned k,
                          uint64_t seed);

#endif
