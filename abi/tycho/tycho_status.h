/* Status codes shared by the embedding API and every plugin function that can fail.
 * A function returning anything other than TYCHO_OK has also set the calling thread's
 * last-error message (tycho_last_error() for embedders, host->set_error for plugins). */
#ifndef TYCHO_STATUS_H
#define TYCHO_STATUS_H

typedef enum tycho_status {
  TYCHO_OK = 0,
  TYCHO_ERR_INVALID_ARGUMENT = 1, /* a bad parameter or config value */
  TYCHO_ERR_NOT_FOUND = 2,        /* a file, dataset, key or component that does not exist */
  TYCHO_ERR_IO = 3,               /* reading or writing a file failed */
  TYCHO_ERR_BAD_DATA = 4,         /* input that exists but has the wrong shape, type or values */
  TYCHO_ERR_ABI_MISMATCH = 5,     /* a plugin built for an incompatible ABI version */
  TYCHO_ERR_OUT_OF_MEMORY = 6,
  TYCHO_ERR_UNSUPPORTED = 7,      /* a valid request this build or component cannot do */
  TYCHO_ERR_CANCELLED = 8,        /* a progress callback asked to stop */
  TYCHO_ERR_INTERNAL = 9          /* a bug: please report it */
} tycho_status;

#endif
