/* api_key.h: where a client command finds the API key it sends to a daemon.
 *
 * Never on the command line: /proc/PID/cmdline is readable by every local
 * user. A command takes --api-key-file FILE (the first line that is neither
 * empty nor a '#' comment; the file must not be readable by group or
 * others) or $TANDEM_API_KEY, and refuses --api-key KEY with a message that
 * names both. */
#ifndef TANDEM_API_KEY_H
#define TANDEM_API_KEY_H

#include <stddef.h>

#include "base/err.h"

#define API_KEY_MAX 512 /* the longest key, NUL included */

/* The message --api-key gets: "--api-key puts the key in the process list;
 * use --api-key-file FILE or $TANDEM_API_KEY". Static. */
const char *api_key_argv_refusal(void);

/* Reads the key from path into key[cap] (whitespace around it cut):
 * the first line that is neither empty nor starts with '#'. Returns
 * TANDEM_OK; TANDEM_ERR_IO when it cannot be read, TANDEM_ERR_INVAL when
 * group or others may read it, TANDEM_ERR_NOTFOUND when it holds no key,
 * TANDEM_ERR_TOOBIG for a key of cap bytes or more; each with a message in
 * err[errcap] that names the file. */
tandem_err api_key_read_file(const char *path, char *key, size_t cap, char *err, size_t errcap);

/* The key a command sends: from file when file is not NULL (into buf[cap]),
 * else $TANDEM_API_KEY when set and not empty, else none. *key (output) is
 * buf, the environment's string (valid while the environment is unchanged)
 * or NULL. Returns what api_key_read_file returns, TANDEM_OK otherwise. */
tandem_err api_key_resolve(const char *file, char *buf, size_t cap, const char **key, char *err,
                           size_t errcap);

#endif
