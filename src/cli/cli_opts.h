/* cli_opts.h: the option parsing and the progress line that commands share.
 *
 * A numeric option is checked against its range and refused with one
 * message shape for every command ("tandem <cmd>: <flag> <value>: expected
 * ..."), exit status 2. The progress line is an eval_progress_fn for the
 * commands that run datasets (eval, drift, calibrate, the ladder). */
#ifndef TANDEM_CLI_OPTS_H
#define TANDEM_CLI_OPTS_H

#include <stddef.h>

/* Parses s as an integer in [lo, hi] into *out (output) for option flag of
 * command cmd. Returns 0, or prints "tandem <cmd>: <flag> <s>: expected an
 * integer from lo to hi" on stderr and returns 2 (usage); *out is then
 * unchanged. */
int cli_parse_uint(const char *cmd, const char *flag, const char *s, unsigned lo, unsigned hi,
                   unsigned *out);

/* Parses s as a number in [lo, hi] into *out (output) for option flag of
 * command cmd. Returns 0, or prints "tandem <cmd>: <flag> <s>: expected a
 * number from lo to hi" on stderr and returns 2 (usage); *out is then
 * unchanged. */
int cli_parse_double(const char *cmd, const char *flag, const char *s, double lo, double hi,
                     double *out);

/* An eval_progress_fn writing "\r<label>: done/total requests, rate/s, ETA"
 * to stderr and erasing the line once done == total; user is the label (a
 * const char *, borrowed). */
void cli_progress(void *user, size_t done, size_t total, double elapsed_s);

#endif
