/* tycho ABI version.
 *
 * Rules (as for NCCL's net plugins and Vulkan's loader):
 *  - A MAJOR change breaks binary compatibility: the host refuses plugins of any other major.
 *  - A MINOR change only appends fields to structs or functions to vtables. The host accepts a
 *    plugin whose minor is <= its own and checks `struct_size` before reading appended fields;
 *    it refuses a plugin built against a newer minor than the host knows.
 */
#ifndef TYCHO_VERSION_H
#define TYCHO_VERSION_H

#define TYCHO_ABI_VERSION_MAJOR 1
#define TYCHO_ABI_VERSION_MINOR 0
/* Packed as (major << 16) | minor, the form every descriptor carries. */
#define TYCHO_ABI_VERSION ((TYCHO_ABI_VERSION_MAJOR << 16) | TYCHO_ABI_VERSION_MINOR)
#define TYCHO_ABI_MAJOR_OF(v) ((unsigned)(v) >> 16)
#define TYCHO_ABI_MINOR_OF(v) ((unsigned)(v) & 0xffffu)

/* Release version of the tycho runtime (not the ABI). */
#define TYCHO_VERSION_STRING "0.1.0"

#endif
